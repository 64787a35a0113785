"""Export / import of one tenant (``cores/tenant_export.py``) on the plain cores, as the ingress joins them.

The round trip is checked three ways: the lines of a second export equal the first (header's user id
aside), searches and routes of the imported tenant equal the original's (same hits, same scores), and
the stream continues identically (the same next turns close the same segments on both).
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from core.config import EvictionConfig, TierConfig, TierMemoryConfig
from cores.tenant_assistants import TenantAssistants
from cores.tenant_episodes import TenantEpisodes
from cores.tenant_export import InvalidExport, export_lines, parse_import
from cores.tenant_tiers import TenantTiers
from tests.doubles import ScriptedEngine
from tests.unit.test_tenant_cores import DIM, ENC, ep_config, random_stream, vecs


class Node:
    """One tier shard, one router and one assistant actor's cores, joined as the ingress joins them."""

    def __init__(self, l1: int = 6, l2: int = 40) -> None:
        cfg = TierMemoryConfig(l1=TierConfig(capacity=l1), l2=TierConfig(capacity=l2),
                               eviction=EvictionConfig(batch_fraction=0.15))
        self.tiers = TenantTiers(cfg, DIM)
        self.episodes = TenantEpisodes(ep_config(), DIM)
        self.assistants = TenantAssistants(ScriptedEngine())

    def write(self, tenant: str, turns, admitted=None) -> None:
        admitted = admitted or [True] * len(turns)
        v = vecs(turns)
        keep = [i for i, a in enumerate(admitted) if a]
        self.tiers.add(tenant, [turns[i].turn_id for i in keep], [turns[i].text for i in keep], v[keep],
                       [0.3 + 0.1 * (i % 5) for i in keep], [{"speaker": turns[i].speaker} for i in keep])
        closed = self.episodes.append(tenant, turns, v, admitted)
        self.assistants.add(tenant, closed)
        self.episodes.delivered(tenant, [s.id for s in closed])

    def export(self, tenant: str) -> list[str]:
        held = {s.id: s for s in self.assistants.segments(tenant)}
        return list(export_lines(tenant, DIM, self.tiers.export_tenant(tenant), self.episodes.export_tenant(tenant),
                                 held))

    def load(self, tenant: str, lines: list[str]) -> None:
        plan = parse_import(lines, DIM)
        self.tiers.import_tenant(tenant, plan.memories)
        self.assistants.add(tenant, plan.segments)
        if plan.stream is not None:
            self.episodes.import_tenant(tenant, plan.stream)


@pytest.fixture
def source():
    node = Node()
    stream = random_stream(90, seed=7)
    rng = random.Random(3)
    admitted = [rng.random() < 0.8 for _ in stream]
    for start in range(0, 80, 9):
        node.write("alice", stream[start : start + 9], admitted[start : start + 9])
    for sid in node.episodes.segment_ids("alice")[:3]:  # summaries as the background job writes them
        text = f"summary of segment {sid}: coffee and the river"
        node.episodes.set_summary("alice", sid, text, ENC.encode([text])[0])
    node.tiers.search("alice", "piano castle", ENC.encode(["piano castle"])[0], 3)  # usage counters move
    gone = stream[10].turn_id  # a deleted memory leaves the tiers and its raw line everywhere
    node.tiers.delete("alice", [gone])
    changed = node.assistants.forget("alice", [gone]).segments  # as the ingress does: assistants, then router
    node.episodes.forget("alice", [gone], changed)
    return node, stream


def without_user(lines: list[str]) -> list[str]:
    head = json.loads(lines[0])
    head.pop("user_id")
    return [json.dumps(head), *lines[1:]]


def undated(lines: list[str]) -> list[dict]:
    records = [json.loads(line) for line in without_user(lines)]
    return [{k: v for k, v in r.items() if k != "created_at"} for r in records]


def test_export_import_export_is_identical_line_for_line(source):
    node, _ = source
    first = node.export("alice")
    kinds = [json.loads(line)["kind"] for line in first]
    assert kinds[0] == "header" and kinds[-1] == "stream" and "memory" in kinds and "segment" in kinds
    assert "summary of segment" in "".join(first)
    other = Node()
    other.load("alice-copy", first)
    second = other.export("alice-copy")
    assert json.loads(second[0])["user_id"] == "alice-copy"
    assert without_user(second) == without_user(first)
    third = Node()
    third.load("alice", second)
    assert third.export("alice") == first


def test_imported_tenant_searches_routes_and_continues_as_the_original(source):
    node, stream = source
    copy = Node()
    copy.load("bob", node.export("alice"))
    for q in ("piano castle", "coffee river", "thunder over the orchard"):
        v = ENC.encode([q])[0]
        a, b = node.tiers.search("alice", q, v, 5), copy.tiers.search("bob", q, v, 5)
        assert [(h.id, h.score, h.tier) for h in a] == [(h.id, h.score, h.tier) for h in b]
        ra, rb = node.episodes.route("alice", q, v), copy.episodes.route("bob", q, v)
        assert [(x.segment_id, x.score, x.paths) for x in ra.activations] == \
               [(x.segment_id, x.score, x.paths) for x in rb.activations]
        assert ra.open_segment == rb.open_segment
    rest = stream[80:]
    node.write("alice", rest)
    copy.write("bob", rest)
    assert node.episodes.segment_ids("alice") == copy.episodes.segment_ids("bob")
    assert undated(node.export("alice")) == undated(copy.export("bob"))  # the new turns' add times differ
    records = [json.loads(line) for line in copy.export("bob")]
    held = {r["id"] for r in records if r["kind"] == "memory"}
    held |= {t["id"] for r in records if r["kind"] == "segment" for t in r["turns"]}
    assert stream[10].turn_id not in held and stream[11].turn_id in held  # the deleted one stays deleted


def test_vectors_survive_bit_for_bit(source):
    node, _ = source
    lines = node.export("alice")
    copy = Node()
    copy.load("alice", lines)
    for m in node.tiers.export_tenant("alice"):
        got = copy.tiers._memories["alice"].get(m["id"])[1].vector
        assert np.array_equal(got, np.asarray(m["vector"], np.float32))


def test_import_refuses_an_existing_tenant_and_leaves_it_unchanged(source):
    node, _ = source
    lines = node.export("alice")
    with pytest.raises(ValueError, match="already has memories"):
        node.tiers.import_tenant("alice", parse_import(lines, DIM).memories)
    with pytest.raises(ValueError, match="already has an episodic stream"):
        node.episodes.import_tenant("alice", parse_import(lines, DIM).stream)
    assert node.export("alice") == lines


def test_empty_tenant_exports_a_header_only():
    node = Node()
    [line] = node.export("nobody")
    assert json.loads(line) == {"kind": "header", "format": "engram-export", "version": 1, "user_id": "nobody",
                                "dim": DIM, "memories": 0, "segments": 0}
    node.load("nobody", [line])
    assert node.export("nobody") == [line]


@pytest.mark.parametrize("mutate, message", [
    (lambda ls: ls[1:], "first record must be the header"),
    (lambda ls: ls[:-1], "without the stream record"),
    (lambda ls: [ls[0], *ls[2:]], "truncated or padded"),
    (lambda ls: [ls[0], "{not json", *ls[1:]], "line 2"),
    (lambda ls: [ls[0], json.dumps({**json.loads(ls[1]), "vector": [0.0] * 3}), *ls[2:]], "has 3 numbers"),
    (lambda ls: [ls[0], json.dumps({**json.loads(ls[1]), "tier": "l9"}), *ls[2:]], "line 2: memory.tier"),
    (lambda ls: [ls[0], json.dumps({**json.loads(ls[1]), "surprise": 1}), *ls[2:]], "surprise"),
    (lambda ls: [*ls, ls[-1]], "nothing may follow the stream record"),
    (lambda ls: [json.dumps({**json.loads(ls[0]), "dim": 5}), *ls[1:]], "5-dimensional"),
    (lambda ls: [], "empty upload"),
])
def test_bad_uploads_are_refused_with_the_line_named(source, mutate, message):
    node, _ = source
    with pytest.raises(InvalidExport, match=message):
        parse_import(mutate(node.export("alice")), DIM)


def test_a_deleted_memory_leaves_no_word_in_any_core_state():
    import pickle
    from dataclasses import replace as copy_turn

    node = Node()
    stream = random_stream(60, seed=9)
    stream[12] = copy_turn(stream[12], text=stream[12].text + " zebraquartz")
    for start in range(0, 60, 10):
        node.write("alice", stream[start : start + 10])
    gone = stream[12].turn_id
    assert any(gone in node.episodes._streams["alice"].meta[sid][2] for sid in node.episodes.segment_ids("alice"))
    for core in (node.tiers, node.episodes, node.assistants):
        assert b"zebraquartz" in pickle.dumps(getattr(core, core.durable_state))
    node.tiers.delete("alice", [gone])
    changed = node.assistants.forget("alice", [gone]).segments
    assert changed and node.episodes.forget("alice", [gone], changed) >= len(changed)
    for core in (node.tiers, node.episodes, node.assistants):
        assert b"zebraquartz" not in pickle.dumps(getattr(core, core.durable_state)), type(core).__name__
    v = ENC.encode(["zebraquartz"])[0]
    assert all("kw" not in a.paths for a in node.episodes.route("alice", "zebraquartz", v).activations)
