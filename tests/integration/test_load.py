"""A bounded load test, reduced for CI (the full 60 s at concurrency 16: ``python -m bench.load``):
8 clients for 10 s of mixed add / search / ask on the running service, with 0 errors."""

from __future__ import annotations

import asyncio

import httpx

from bench import load
from tests.integration.conftest import ADMIN_KEY, auth_headers

USERS = ["load-a", "load-b"]
FACTS = ["I keep my bike in the blue shed.", "My sister moved to Porto in March.", "I train for a marathon in May.",
         "Our cat is called Pixel.", "I work night shifts at the harbour."]


def test_mixed_load_gets_no_errors(service):
    with httpx.Client(base_url=service, timeout=300, headers=auth_headers(ADMIN_KEY)) as client:
        for user in USERS:
            r = client.post("/v1/turns", json={"user_id": user, "turns": [
                {"id": f"seed-{i}", "speaker": "user", "text": text} for i, text in enumerate(FACTS)]})
            assert r.status_code == 200, r.text
    asked = ("Where is the bike?", "Who moved to Porto?", "What is the cat called?")
    questions = [(u, q) for u in USERS for q in asked]
    result = asyncio.run(load.run(service, seconds=10, concurrency=8, mix=(0.45, 0.5, 0.05), users=USERS,
                                  questions=questions, api_key=ADMIN_KEY))
    print(f"\nload: {result}")
    assert result["errors"] == 0, result["statuses"]
    assert result["ops"]["add"]["requests"] > 0 and result["ops"]["search"]["requests"] > 0
