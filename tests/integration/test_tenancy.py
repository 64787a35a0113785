"""Tenancy over HTTP on the running service: concurrent mixed traffic of many tenants never crosses
between them; deleting a user leaves nothing of it on disk; export -> import round-trips exactly.

Every text a tenant writes carries that tenant's own marker word, and every tenant uses the same memory
ids (``m0``, ``m1``, ...), so a leak shows either as a foreign marker in a result or as another tenant's
text under a shared id.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
import uuid
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import ADMIN_KEY, STORAGE, auth_headers

OPS = int(os.environ.get("TENANCY_OPS", "10000"))
TENANTS = 24
CONCURRENCY = 16
WORDS = ("harbor violin pepper meadow lantern copper willow candle saddle thunder orchard canvas marble "
         "pebble castle garden coffee river piano bicycle").split()


def wait_for_background(client: httpx.Client, timeout: float = 600) -> None:
    """Until the ingress has no summary left to write (they write to the router's log)."""
    deadline = time.time() + timeout
    while client.get("/v1/health").json()["background"]:
        assert time.time() < deadline, "background summaries did not finish"
        time.sleep(1)


# -- deleting a user ----------------------------------------------------------------------------------
def storage_bytes() -> bytes:
    return b"".join(p.read_bytes() for p in Path(STORAGE).rglob("*") if p.is_file())


def test_deleting_a_user_leaves_none_of_its_texts_or_ids_in_any_actor_storage(service):
    run = uuid.uuid4().hex[:8]
    victim, bystander = f"victim-{run}", f"bystander-{run}"
    secret, kept = f"zebraquartz{run}", f"okapiflint{run}"
    with httpx.Client(base_url=service, timeout=300, headers=auth_headers(ADMIN_KEY)) as client:
        for user, word in ((victim, secret), (bystander, kept)):
            for start in range(0, 24, 8):  # enough to close segments (160 tokens) on the assistants
                turns = [{"id": f"{word}-t{i}", "speaker": "user",
                          "text": f"{word} note {i}: the parcel for {word} goes to dock {i * 7 % 13}."}
                         for i in range(start, start + 8)]
                r = client.post("/v1/turns", json={"user_id": user, "turns": turns})
                assert r.status_code == 200, r.text
        wait_for_background(client)
        before = storage_bytes()
        assert secret.encode() in before and victim.encode() in before  # the scan can see it
        r = client.delete(f"/v1/users/{victim}")
        assert r.status_code == 200, r.text
        assert r.json()["memories"] == 24 and r.json()["turns"] > 0
        after = storage_bytes()
        for needle in (secret, victim, f"{secret}-t3"):
            assert needle.encode() not in after, f"{needle!r} is still on disk"
        assert kept.encode() in after  # the bystander is untouched
        assert client.get("/v1/memories", params={"user_id": victim}).json()["total"] == 0
        hits = client.post("/v1/search", json={"user_id": victim, "query": f"{secret} parcel"}).json()
        assert hits["memories"] == [] and hits["segments"] == []
        assert client.get("/v1/memories", params={"user_id": bystander}).json()["total"] == 24


# -- export / import ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def exported(service):
    user = f"exp-{uuid.uuid4().hex[:8]}"
    rng = random.Random(5)
    with httpx.Client(base_url=service, timeout=300, headers=auth_headers(ADMIN_KEY)) as client:
        for start in range(0, 30, 10):
            turns = [{"id": f"e{i}", "speaker": rng.choice(["Ann", "Bob"]),
                      "text": f"entry {i}: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))),
                      "timestamp": f"2024-03-{1 + i % 28:02d}T10:{i:02d}:00+02:00"} for i in range(start, start + 10)]
            assert client.post("/v1/turns", json={"user_id": user, "turns": turns}).status_code == 200
        assert client.delete("/v1/memories/e4", params={"user_id": user}).status_code == 200
        wait_for_background(client)
        r = client.get(f"/v1/users/{user}/export")
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
        yield client, user, r.text


def test_export_then_import_round_trips_exactly(exported):
    client, user, text = exported
    copy = f"{user}-copy"
    r = client.post(f"/v1/users/{copy}/import", content=text.encode(),
                    headers={"Content-Type": "application/x-ndjson"})
    assert r.status_code == 200, r.text
    assert r.json()["memories"] == 29 and r.json()["segments"] >= 3
    again = client.get(f"/v1/users/{copy}/export").text
    first, second = text.splitlines(), again.splitlines()
    assert json.loads(second[0])["user_id"] == copy
    assert second[1:] == first[1:]
    for q in ("piano by the river", "entry 12", "copper lantern"):
        a = client.post("/v1/search", json={"user_id": user, "query": q, "k": 8}).json()
        b = client.post("/v1/search", json={"user_id": copy, "query": q, "k": 8}).json()
        assert [(m["id"], m["score"]) for m in a["memories"]] == [(m["id"], m["score"]) for m in b["memories"]]
        assert [s["segment_id"] for s in a["segments"]] == [s["segment_id"] for s in b["segments"]]


def test_import_refuses_an_existing_user_and_a_broken_upload_without_writing(exported):
    client, user, text = exported
    r = client.post(f"/v1/users/{user}/import", content=text.encode())
    assert r.status_code == 409 and r.json()["error"]["code"] == "user_exists"
    target = f"{user}-broken"
    lines = text.splitlines()
    for body, message in ((b"", "empty upload"), (b"\xff\xfe not utf-8", "not an Engram export"),
                          ("\n".join(lines[:-2]).encode(), "truncated or padded"),
                          ("\n".join([lines[0], "{}", *lines[1:]]).encode(), "line 2")):
        r = client.post(f"/v1/users/{target}/import", content=body)
        assert r.status_code == 400, r.text
        assert message in r.json()["error"]["message"]
    assert client.get("/v1/memories", params={"user_id": target}).json()["total"] == 0
    assert client.get(f"/v1/users/{target}/export").text.count("\n") == 1  # a header only


# -- 10,000 concurrent operations (last: the segment summaries it leaves behind would delay the tests above,
# which wait for the service's background work) ---------------------------------------------------------
class Tenant:
    def __init__(self, run: str, i: int, rng: random.Random) -> None:
        self.user = f"iso-{run}-{i:02d}"
        self.marker = f"mk{run}{i:02d}"
        self.rng = rng
        self.memories: dict[str, str] = {}  # id -> text, as acknowledged
        self.next = 0

    def text(self) -> str:
        return f"{self.marker} " + " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(3, 8)))


async def run_mixed(url: str, tenants: list[Tenant], seed: int) -> tuple[Counter, list[str]]:
    rng = random.Random(seed)
    counts: Counter = Counter()
    leaks: list[str] = []
    markers = {t.marker for t in tenants}
    todo = iter(range(OPS))

    def foreign(text: str, t: Tenant) -> bool:
        return t.marker not in text or any(m in text for m in markers - {t.marker})

    async def one(client: httpx.AsyncClient) -> None:
        for _ in todo:
            t = rng.choice(tenants)
            other = rng.choice(tenants)
            op = rng.choices(["add", "search", "list", "get", "delete"], [2, 20, 31, 45, 2])[0]
            if op == "add" or not t.memories and op in ("get", "delete"):
                op = "add"
                mid = f"m{t.next}"
                t.next += 1
                text = t.text()
                r = await client.post("/v1/turns", json={"user_id": t.user, "turns": [
                    {"id": mid, "speaker": "user", "text": text}]})
                # NOTE: a turn the write dedup answers as a repeat (admitted: false) is not a memory
                if r.status_code == 200 and r.json()["results"][0]["admitted"]:
                    t.memories[mid] = text
            elif op == "search":  # half the queries name another tenant's marker
                q = other.marker + " " + rng.choice(WORDS) if rng.random() < 0.5 else t.text()
                r = await client.post("/v1/search", json={"user_id": t.user, "query": q, "k": 10})
                if r.status_code == 200:
                    body = r.json()
                    leaks.extend(f"search {t.user}: {m['text']!r}" for m in body["memories"] if foreign(m["text"], t))
                    for seg in body["segments"]:
                        ids = set(seg["turn_ids"]) - {f"m{k}" for k in range(t.next)}
                        if ids:
                            leaks.append(f"segment of {t.user} holds {sorted(ids)}")
            elif op == "list":
                r = await client.get("/v1/memories", params={"user_id": t.user, "limit": 1000})
                if r.status_code == 200:
                    leaks.extend(f"list {t.user}: {m['text']!r}" for m in r.json()["memories"] if foreign(m["text"], t))
            elif op == "get":  # an id another tenant holds: 404 unless this tenant has it too
                mid = rng.choice(sorted(other.memories) or ["m0"])
                # acknowledged before the request was sent, and no delete of it began while it was in flight
                # (an add acknowledged while the get is in flight may still be 404 to the get)
                held = mid in t.memories
                r = await client.get(f"/v1/memories/{mid}", params={"user_id": t.user})
                if r.status_code == 200 and foreign(r.json()["text"], t):
                    leaks.append(f"get {t.user}/{mid}: {r.json()['text']!r}")
                if r.status_code == 404 and held and mid in t.memories:
                    leaks.append(f"get {t.user}/{mid}: 404 for an acknowledged memory")
            else:
                mid = rng.choice(sorted(t.memories))
                text = t.memories.pop(mid)  # NOTE: out of the model while in flight: a concurrent get may 404
                r = await client.delete(f"/v1/memories/{mid}", params={"user_id": t.user})
                if r.status_code != 200:
                    t.memories[mid] = text
            counts[(op, r.status_code)] += 1

    headers = auth_headers(ADMIN_KEY)
    async with httpx.AsyncClient(base_url=url, timeout=300, headers=headers) as client:
        await asyncio.gather(*(one(client) for _ in range(CONCURRENCY)))
    return counts, leaks


def test_ten_thousand_concurrent_mixed_operations_never_cross_tenants(service):
    run = uuid.uuid4().hex[:6]
    rng = random.Random(11)
    tenants = [Tenant(run, i, rng) for i in range(TENANTS)]
    start = time.perf_counter()
    counts, leaks = asyncio.run(run_mixed(service, tenants, seed=12))
    elapsed = time.perf_counter() - start
    print(f"{OPS} ops in {elapsed:.1f} s ({OPS / elapsed:.0f}/s): {sorted(counts.items())}")
    assert sum(counts.values()) == OPS
    assert not leaks, leaks[:10]
    errors = {k: n for k, n in counts.items() if k[1] >= 500}
    assert not errors, errors
    assert {status for (op, status) in counts if op != "get"} == {200}
    with httpx.Client(base_url=service, timeout=300, headers=auth_headers(ADMIN_KEY)) as client:
        for t in tenants:  # the final state is exactly what was acknowledged, and holds no foreign text
            listed = client.get("/v1/memories", params={"user_id": t.user, "limit": 1000}).json()
            assert {m["id"]: m["text"] for m in listed["memories"]} == t.memories, t.user
            export = client.get(f"/v1/users/{t.user}/export")
            assert export.status_code == 200, export.text
            records = [json.loads(line) for line in export.text.splitlines()]
            texts = [r["text"] for r in records if r["kind"] == "memory"]
            texts += [turn["line"] for r in records if r["kind"] == "segment" for turn in r["turns"]]
            assert bool(texts) == bool(t.memories), t.user  # a tenant whose memories were all deleted has none
            assert all(t.marker in x and sum(m.marker in x for m in tenants) == 1 for x in texts), t.user
