"""API keys on the running service: 401 without a valid key, 403 outside the key's tenants, admin for deleting a
user, /v1/health open. The tenant key is made while the service runs: the ingress re-reads the keys file."""

from __future__ import annotations

import httpx
import pytest

from serve.auth import KeyStore
from tests.integration.conftest import ADMIN_KEY, KEYS_FILE, auth_headers

A, B = "auth-a", "auth-b"
TURNS = [{"id": f"a{i}", "speaker": "user", "text": text} for i, text in enumerate(
    ["My locker code is 4711.", "I park on level three.", "The spare key is in the blue vase."])]


def error_of(r: httpx.Response) -> dict:
    body = r.json()
    assert set(body) == {"error"} and {"message", "type", "param", "code"} <= set(body["error"]), body
    return body["error"]


@pytest.fixture(scope="module")
def admin(service):
    with httpx.Client(base_url=service, timeout=300, headers=auth_headers(ADMIN_KEY)) as c:
        yield c


@pytest.fixture(scope="module")
def tenant_a(service, admin):
    """A client whose key is bound to user auth-a only; auth-a has memories, auth-b too."""
    for user in (A, B):
        r = admin.post("/v1/turns", json={"user_id": user, "turns": TURNS})
        assert r.status_code == 200, r.text
    key, _ = KeyStore(KEYS_FILE).create([A], name="test_auth")
    with httpx.Client(base_url=service, timeout=300, headers=auth_headers(key)) as c:
        yield c


def test_no_key_or_a_wrong_key_is_a_401_with_the_error_body(service, tenant_a):
    for headers in ({}, auth_headers("ek_00000000_" + "x" * 43), auth_headers("not-a-key"),
                    {"Authorization": f"Basic {ADMIN_KEY}"}):
        r = httpx.post(f"{service}/v1/search", json={"user_id": A, "query": "locker"}, headers=headers, timeout=60)
        assert r.status_code == 401, (headers, r.text)
        assert error_of(r)["type"] == "authentication_error" and r.headers["www-authenticate"] == "Bearer"
    r = httpx.get(f"{service}/v1/memories", params={"user_id": A}, timeout=60)
    assert r.status_code == 401 and "engram keys create" in error_of(r)["message"]


def test_a_tenant_key_reaches_its_tenant_only(tenant_a):
    r = tenant_a.post("/v1/search", json={"user_id": A, "query": "locker code"})
    assert r.status_code == 200 and "a0" in [m["id"] for m in r.json()["memories"]]
    for r in (tenant_a.post("/v1/search", json={"user_id": B, "query": "locker code"}),
              tenant_a.get("/v1/memories", params={"user_id": B}),
              tenant_a.get("/v1/memories/a0", params={"user_id": B}),
              tenant_a.post("/v1/turns", json={"user_id": B, "turns": [{"speaker": "x", "text": "intruder"}]})):
        assert r.status_code == 403, r.text
        err = error_of(r)
        assert err["type"] == "permission_error" and err["param"] == "user_id" and B in err["message"]


def test_deleting_a_user_needs_the_admin_key(tenant_a, admin):
    r = tenant_a.delete(f"/v1/users/{A}")
    assert r.status_code == 403 and error_of(r)["code"] == "admin_required"
    assert tenant_a.get("/v1/memories", params={"user_id": A}).json()["total"] == len(TURNS)  # nothing deleted
    r = admin.delete(f"/v1/users/{A}")
    assert r.status_code == 200 and r.json()["memories"] == len(TURNS)
    assert admin.delete(f"/v1/users/{B}").status_code == 200


def test_health_metrics_and_openapi_are_open(service):
    assert httpx.get(f"{service}/v1/health", timeout=60).status_code == 200
    assert httpx.get(f"{service}/metrics", timeout=60).status_code == 200
    spec = httpx.get(f"{service}/openapi.json", timeout=60).json()
    assert spec["paths"]["/v1/search"]["post"]["security"] == [{"ApiKey": []}]
