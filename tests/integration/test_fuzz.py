"""Fuzzing the running service from its own OpenAPI spec (schemathesis): valid (positive) and invalid
(negative) requests on every operation, with the admin key and without a valid key; not one may get a
5xx, every error must come in the API's error body, a refused request (4xx) must leave its user's state as it
was (the user's export before and after), and without a valid key every /v1 call is a 401.

schemathesis makes the cases (``APIOperation.as_strategy``); Hypothesis runs them here, since
schemathesis's pytest plugin does not run under pytest 9. Sizes: ``FUZZ_EXAMPLES`` cases per operation
and mode (default 20); ``/v1/ask`` answers every valid case with the small model, so it gets fewer.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from urllib.parse import quote

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from tests.integration.conftest import ADMIN_KEY, auth_headers

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "20"))
FEWER = {"POST /v1/ask": 4}  # each valid case is a small-model answer (seconds on a CPU)


@schemathesis.serializer("application/x-ndjson")
def _ndjson(ctx, value):  # the import body: whatever string the generator made
    return value if isinstance(value, bytes) else str(value).encode("utf-8", "surrogatepass")


@pytest.fixture(scope="module")
def operations(service):
    spec = httpx.get(f"{service}/openapi.json", timeout=60).json()
    ops = [result.ok() for result in schemathesis.openapi.from_dict(spec).get_all_operations()]
    assert len(ops) >= 10, [f"{op.method} {op.path}" for op in ops]
    return ops


def _label(op) -> str:
    return f"{op.method.upper()} {op.path}"


def _run(op, mode: GenerationMode, examples: int, call) -> None:
    @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=op.as_strategy(generation_mode=mode))
    def check(case) -> None:
        call(case)

    try:
        check()
    except Unsatisfiable:  # NOTE: nothing to make invalid (GET /v1/health takes no input): no negative case
        assert mode == GenerationMode.NEGATIVE, _label(op)


def _checked(case, response: httpx.Response | object, statuses: Counter) -> None:
    status = response.status_code
    statuses[status] += 1
    assert status < 500, (f"{case.method} {case.formatted_path} -> {status}: {response.text[:400]}\n"
                          f"query={case.query} body={str(case.body)[:400]}")
    if status >= 400:  # every error in the API's own shape
        assert set(response.json()) == {"error"}, response.text[:400]


USER_ID = re.compile(r"^[A-Za-z0-9._:@/+-]{1,128}$")
VOLATILE = {"summary", "summary_vector"}  # written in the background after earlier writes, not by the request


def _user_of(case) -> str | None:
    """The user a generated request names (body, query or path), if it is a valid user id."""
    for source in (case.body if isinstance(case.body, dict) else {}, case.query or {}, case.path_parameters or {}):
        user = source.get("user_id") if isinstance(source, dict) else None
        if isinstance(user, str) and USER_ID.match(user):
            return user
    return None


def _state(service: str, user: str) -> list[dict]:
    """The user's export with the fields background summaries may change left out."""
    r = httpx.get(f"{service}/v1/users/{quote(user, safe='')}/export", headers=auth_headers(ADMIN_KEY), timeout=60)
    assert r.status_code == 200, r.text[:300]
    # NOTE: JSON Lines split on "\n" only: str.splitlines also splits at U+2028 and the like, which JSON leaves raw
    return [{k: v for k, v in json.loads(line).items() if k not in VOLATILE} for line in r.text.split("\n") if line]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=lambda m: m.value)
def test_no_generated_request_gets_a_server_error(operations, service, mode):
    """Nor does a refused one change anything: every 4xx leaves its user's export as it was."""
    statuses: Counter = Counter()
    compared = Counter()

    def call(case) -> None:
        user = _user_of(case)
        before = _state(service, user) if user is not None else None
        response = case.call(base_url=service, headers=auth_headers(ADMIN_KEY), timeout=300)
        _checked(case, response, statuses)
        if before is not None and 400 <= response.status_code < 500:
            assert _state(service, user) == before, f"{case.method} {case.formatted_path} -> {response.status_code}"
            compared[response.status_code] += 1

    for op in operations:
        examples = FEWER.get(_label(op), EXAMPLES) if mode == GenerationMode.POSITIVE else EXAMPLES
        _run(op, mode, examples, call)
    print(f"{mode.value}: statuses {dict(sorted(statuses.items()))}; 4xx with the user's state compared: "
          f"{dict(sorted(compared.items()))}")
    assert sum(statuses.values()) >= len(operations)
    if mode == GenerationMode.NEGATIVE:
        assert sum(compared.values()) > 0  # the unchanged-state check ran


def test_without_a_valid_key_every_call_is_a_401(operations, service):
    statuses: Counter = Counter()

    def call(case) -> None:
        for headers in ({"Authorization": ""}, {"Authorization": "Bearer ek_00000000_not-a-key"}):
            response = case.call(base_url=service, headers=headers, timeout=60)
            _checked(case, response, statuses)
            if case.path != "/v1/health":  # the key is checked before the body
                assert response.status_code == 401, (case.formatted_path, response.status_code, response.text[:300])

    for op in operations:
        for mode in GenerationMode:
            _run(op, mode, max(EXAMPLES // 3, 3), call)
    print(f"no key: statuses {dict(sorted(statuses.items()))}")
