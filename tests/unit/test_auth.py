"""API keys (serve/auth.py): what the keys file holds, who may do what, and that changes reach a loaded store."""

from __future__ import annotations

import json
import os
import stat

import pytest
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from core.errors import ForbiddenError, UnauthorizedError
from serve.auth import KeyFileError, KeyStore, sha256_hex


@pytest.fixture
def store(tmp_path) -> KeyStore:
    return KeyStore(tmp_path / "keys" / "api-keys.json")


def test_the_file_holds_the_hash_never_the_plaintext_and_is_private(store) -> None:
    plaintext, key = store.create(["alice"], name="ci")
    text = store.path.read_text()
    assert plaintext not in text and plaintext.split("_", 2)[2] not in text  # neither the key nor its secret
    assert sha256_hex(plaintext) in text and key.sha256 == sha256_hex(plaintext)
    data = json.loads(text)
    assert data["version"] == 1 and [k["key_id"] for k in data["keys"]] == [key.key_id]
    assert data["keys"][0]["tenants"] == ["alice"] and data["keys"][0]["name"] == "ci"
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    assert plaintext.startswith(f"ek_{key.key_id}_") and len(key.key_id) == 8
    assert not [p for p in store.path.parent.iterdir() if p.name.endswith(".tmp")]  # no temporary file left


def test_a_key_acts_for_its_tenants_only(store) -> None:
    plaintext, key = store.create(["alice", "bob"])
    assert store.authorize(plaintext, "alice") == key and store.authorize(plaintext, "bob") == key
    assert store.authorize(plaintext, None) == key  # no particular tenant
    with pytest.raises(ForbiddenError) as exc:
        store.authorize(plaintext, "carol")
    assert exc.value.status == 403 and exc.value.param == "user_id" and "carol" in exc.value.message
    with pytest.raises(ForbiddenError, match="admin"):
        store.authorize(plaintext, "alice", admin=True)  # its own tenant, but an admin operation


def test_missing_malformed_and_unknown_keys_are_401(store) -> None:
    plaintext, _ = store.create(["alice"])
    other = KeyStore(store.path.parent / "other.json").create(["alice"])[0]  # well-formed, not in this store
    cases = {None: "missing_api_key", "": "missing_api_key", "hunter2": "invalid_api_key",
             plaintext[:-1]: "invalid_api_key", plaintext + "x": "invalid_api_key", other: "invalid_api_key",
             plaintext.replace("ek_", "EK_"): "invalid_api_key"}
    for token, code in cases.items():
        with pytest.raises(UnauthorizedError) as exc:
            store.authorize(token, "alice")
        assert exc.value.status == 401 and exc.value.code == code, token


def test_admin_and_wildcard_keys(store) -> None:
    admin, _ = store.create([], admin=True, name="root")
    every, _ = store.create(["*"])
    for tenant in ("alice", "bob", "x.y@z/1"):
        assert store.authorize(admin, tenant, admin=True).admin
        assert store.authorize(every, tenant).tenants == ["*"]
    with pytest.raises(ForbiddenError):
        store.authorize(every, "alice", admin=True)  # every tenant is not admin


def test_revoke_and_create_reach_a_store_that_already_loaded_the_file(store) -> None:
    plaintext, key = store.create(["alice"])
    service = KeyStore(store.path)  # as the ingress holds it
    assert service.authorize(plaintext, "alice") == key
    cli = KeyStore(store.path)  # as `engram keys revoke` / `create` run in another process
    assert cli.revoke(key.key_id) is True and cli.revoke(key.key_id) is False
    with pytest.raises(UnauthorizedError, match="no API keys"):
        service.authorize(plaintext, "alice")
    second, _ = cli.create(["bob"])
    assert service.authorize(second, "bob").tenants == ["bob"]
    with pytest.raises(UnauthorizedError, match="unknown or revoked"):
        service.authorize(plaintext, "alice")
    assert [k.key_id for k in service.list()] == [k.key_id for k in cli.list()]


def test_a_missing_file_has_no_keys_and_says_how_to_make_one(store) -> None:
    assert store.list() == [] and not store.path.exists()
    with pytest.raises(UnauthorizedError) as exc:
        store.authorize("ek_0123abcd_" + "a" * 43, "alice")
    assert "engram keys create --tenant USER" in exc.value.message and "--admin" in exc.value.message


def test_bad_tenants_are_refused_at_creation(store) -> None:
    for bad in (["bad id"], ["alice", ""], ["x" * 129], ["ä"]):
        with pytest.raises(ValueError, match="not a valid user id"):
            store.create(bad)
    with pytest.raises(ValueError, match="tenant"):
        store.create([])  # neither a tenant nor admin
    assert not store.path.exists()  # nothing was written
    assert store.create(["alice", "alice", "conv-26:1"])[1].tenants == ["alice", "conv-26:1"]


@pytest.mark.parametrize("content", ["{not json", '{"version": 2, "keys": []}',
                                     '{"version": 1, "keys": [{"key_id": 1}]}', '{"version": 1, "keys": [], "x": 1}'])
def test_a_corrupt_file_is_an_error_naming_it_and_is_never_overwritten(store, content) -> None:
    store.path.parent.mkdir(parents=True)
    store.path.write_text(content)
    for call in (store.list, lambda: store.authenticate("ek_0123abcd_" + "a" * 43), lambda: store.create(["a"])):
        with pytest.raises(KeyFileError, match=str(store.path)):
            call()
    assert store.path.read_text() == content


def test_every_v1_route_but_health_declares_the_bearer_scheme() -> None:
    from serve.ingress import app

    spec = get_openapi(title=app.title, version=app.version, routes=app.routes)  # NOTE: not app.openapi(): no cache
    scheme = spec["components"]["securitySchemes"]["ApiKey"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    operations = {(method.upper(), path): op for path, ops in spec["paths"].items() for method, op in ops.items()}
    assert ("DELETE", "/v1/users/{user_id}") in operations and ("POST", "/v1/turns") in operations
    for (method, path), op in operations.items():
        declared = op.get("security") == [{"ApiKey": []}]
        assert declared == (path.startswith("/v1/") and path != "/v1/health"), (method, path)


class SearchBody(BaseModel):
    user_id: str
    k: int


def _mini_app(keys: KeyStore | None):
    """A FastAPI app whose routes check keys like MemoryAPI's endpoints: the ingress's ``API_KEY`` dependency
    (authentication, before the body is validated), its ``authorize`` check and its error handlers — on a
    plain app, since MemoryAPI itself needs a Serve replica."""
    from fastapi import FastAPI, Security
    from fastapi.testclient import TestClient

    from serve.errors import install_error_handlers
    from serve.ingress import authorize
    from serve.middleware import API_KEY, ApiKeyCheck

    ApiKeyCheck.store = keys
    app = FastAPI()
    install_error_handlers(app)

    @app.delete("/v1/users/{user_id}")
    def delete_user(user_id: str, key=Security(API_KEY)) -> dict:
        authorize(key, user_id, admin=True)
        return {"deleted": user_id}

    @app.get("/v1/memories")
    def memories(user_id: str, key=Security(API_KEY)) -> dict:
        authorize(key, user_id)
        return {"user_id": user_id}

    @app.post("/v1/search")
    def search(body: SearchBody, key=Security(API_KEY)) -> dict:
        authorize(key, body.user_id)
        return {"user_id": body.user_id}

    return TestClient(app)


def test_the_ingress_check_over_http_401_403_and_the_error_body(store) -> None:
    tenant_key, _ = store.create(["alice"])
    admin_key, _ = store.create([], admin=True)
    client = _mini_app(store)

    r = client.get("/v1/memories", params={"user_id": "alice"})
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    assert r.json()["error"]["type"] == "authentication_error"
    r = client.get("/v1/memories", params={"user_id": "alice"}, headers={"Authorization": f"Basic {tenant_key}"})
    assert r.status_code == 401  # only Bearer credentials count
    bearer = {"Authorization": f"Bearer {tenant_key}"}
    assert client.get("/v1/memories", params={"user_id": "alice"}, headers=bearer).status_code == 200
    r = client.get("/v1/memories", params={"user_id": "bob"}, headers=bearer)
    assert r.status_code == 403 and r.json()["error"]["type"] == "permission_error"
    assert "www-authenticate" not in r.headers
    assert client.delete("/v1/users/alice", headers=bearer).status_code == 403
    assert client.delete("/v1/users/alice", headers={"Authorization": f"Bearer {admin_key}"}).json() == {
        "deleted": "alice"}

    r = client.post("/v1/search", json={"user_id": "alice", "k": "not a number"})
    assert r.status_code == 401  # the key is checked before the body: no key, nothing learned about the API
    r = client.post("/v1/search", json={"user_id": "alice", "k": "not a number"}, headers=bearer)
    assert r.status_code == 422
    assert client.post("/v1/search", json={"user_id": "bob", "k": 1}, headers=bearer).status_code == 403

    store.path.write_text("{broken")  # a corrupt keys file: refuse everything, 503, without the path in the body
    r = client.get("/v1/memories", params={"user_id": "alice"}, headers=bearer)
    assert r.status_code == 503 and str(store.path) not in r.text


def test_the_ingress_check_is_off_when_auth_is_not_required() -> None:
    client = _mini_app(None)  # MemoryAPI holds no KeyStore when auth.required is false
    assert client.delete("/v1/users/alice").status_code == 200


def test_the_service_refuses_to_start_without_a_key_unless_auth_is_off(tmp_path, monkeypatch) -> None:
    from core.config import load_config
    from serve.app import check_ready

    for var in ("ENGRAM_AUTH__KEYS_FILE", "ENGRAM_AUTH__REQUIRED", "ENGRAM_ADMISSION__MODE"):
        monkeypatch.delenv(var, raising=False)
    keys_file = tmp_path / "api-keys.json"
    config = load_config("cpu", {"admission": {"mode": "store_all"}, "auth": {"keys_file": str(keys_file)}})
    with pytest.raises(FileNotFoundError, match="engram keys create") as exc:
        check_ready(config)
    assert str(keys_file) in str(exc.value)
    KeyStore(keys_file).create(["alice"])
    check_ready(config)
    keys_file.write_text("[]")
    with pytest.raises(KeyFileError, match=str(keys_file)):
        check_ready(config)
    config.auth.required = False
    check_ready(config)


def test_the_middleware_gate_answers_before_the_body_is_read_and_hands_the_key_on(store) -> None:
    from fastapi import FastAPI, Security
    from fastapi.testclient import TestClient

    from serve import middleware
    from serve.metrics import METRICS

    tenant_key, _ = store.create(["alice"])
    middleware.ApiKeyCheck.store = store
    try:
        app = FastAPI()
        middleware.install(app)
        seen: list = []

        @app.post("/v1/search")
        def search(body: SearchBody, key=Security(middleware.API_KEY)) -> dict:
            seen.append(key)
            return {"user_id": body.user_id}

        @app.get("/v1/health")
        def health() -> dict:
            return {"status": "ok"}

        client = TestClient(app)
        before = METRICS.requests.labels("/v1/search", "401")._value.get()
        r = client.post("/v1/search", content=b"not json")  # refused at the gate: the body is never parsed
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        assert r.headers["www-authenticate"] == "Bearer" and "app;dur=" in r.headers["server-timing"]
        assert METRICS.requests.labels("unmatched", "401")._value.get() + METRICS.requests.labels(
            "/v1/search", "401")._value.get() > before  # counted, though refused before routing
        assert client.get("/v1/health").status_code == 200  # open without a key
        r = client.post("/v1/search", json={"user_id": "alice", "k": 1},
                        headers={"Authorization": f"Bearer {tenant_key}"})
        assert r.status_code == 200 and len(seen) == 1 and "alice" in seen[0].tenants
    finally:
        middleware.ApiKeyCheck.store = None
