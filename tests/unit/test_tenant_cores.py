"""Plain cores of the cluster's actors (no Ray): TenantTiers, TenantEpisodes, TenantAssistants.

References: the batch segmenter (:func:`segment_turns`) for the incremental stream, FIFO eviction arithmetic
for the tiers (equal importance, no reads), and the segments' own lines for the assistants' evidence.
"""

from __future__ import annotations

import random
import re
from datetime import datetime, timedelta

import numpy as np
import pytest

from core.config import EvictionConfig, TierConfig, TierMemoryConfig, load_config
from core.generation import TokenBill
from cores.tenant_assistants import TenantAssistants
from cores.tenant_episodes import TenantEpisodes, TurnRecord
from cores.tenant_tiers import TenantTiers
from inference.assistant import AssistantHost
from memory.segmenter import Segment, Segmenter, segment_turns
from tests.doubles import HashingEncoder, ScriptedEngine

DIM = 64
ENC = HashingEncoder(DIM)
T0 = datetime(2023, 5, 8, 13, 56)
VOCAB = ("garden coffee river piano bicycle lantern meadow violin harbor pepper castle orchard "
         "canvas marble thunder pebble candle saddle copper willow").split()


def turn(tid: str, text: str, i: int = 0, speaker: str = "Ann") -> TurnRecord:
    ts = T0 + timedelta(minutes=i)
    return TurnRecord(tid, speaker, text, f"{ts.day} May {ts.hour}:{ts.minute:02d}", ts)


def vecs(turns) -> np.ndarray:
    return ENC.encode([t.line for t in turns])


def words(line: str) -> int:
    return len(line.split())


# ---------------------------------------------------------------------------------------------------------
# TenantTiers
# ---------------------------------------------------------------------------------------------------------


def small_tiers(l1: int = 4, l2: int = 20) -> TenantTiers:
    cfg = TierMemoryConfig(l1=TierConfig(capacity=l1), l2=TierConfig(capacity=l2),
                           eviction=EvictionConfig(batch_fraction=0.15))
    return TenantTiers(cfg, DIM)


def add_texts(tt: TenantTiers, tenant: str, ids: list[str], texts: list[str], owner: str | None = None):
    meta = [{"owner": owner or tenant, "n": i} for i in range(len(ids))]
    return tt.add(tenant, ids, texts, ENC.encode(texts), [0.5] * len(ids), meta)


def test_tiers_take_the_passed_vectors():
    tt = small_tiers()
    report = add_texts(tt, "a", ["m0"], ["coffee by the river"])
    assert (report.stored, report.evicted) == (1, 0)
    [hit] = tt.search("a", "coffee river", ENC.encode(["coffee river"])[0], 3)
    assert hit.id == "m0"
    assert tt.add("a", [], [], np.zeros((0, DIM), np.float32), [], []).stored == 0


def test_tiers_tenant_isolation():
    tt = small_tiers()
    shared = ["coffee by the river", "piano in the castle", "violin at the harbor"]
    add_texts(tt, "A", ["m0", "m1", "m2", "secret"], [*shared, "thunder over the copper orchard"])
    add_texts(tt, "B", ["m0", "m1", "m2"], shared)  # same ids and texts: must not replace A's
    assert tt.tenants() == ["A", "B"]

    for tenant in ("A", "B"):
        q = "piano castle"
        hits = tt.search(tenant, q, ENC.encode([q])[0], 10)
        assert hits[0].id == "m1"
        assert {h.metadata["owner"] for h in hits} == {tenant}
        assert tt.get(tenant, "m1").metadata["owner"] == tenant
        items, total = tt.list(tenant)
        assert {m.metadata["owner"] for m in items} == {tenant}
        assert total == len(items) == (4 if tenant == "A" else 3)

    q = "thunder over the copper orchard"  # A's item, exact vector: B must still not see it
    assert "secret" not in [h.id for h in tt.search("B", q, ENC.encode([q])[0], 10)]
    assert tt.get("B", "secret") is None
    assert tt.search("A", q, ENC.encode([q])[0], 1)[0].id == "secret"

    assert tt.delete("B", ["m1", "secret"]) == 1  # only B's m1
    assert tt.get("B", "m1") is None
    assert tt.get("A", "m1").metadata["owner"] == "A" and tt.get("A", "secret") is not None
    assert tt.list("A")[1] == 4

    assert tt.drop_tenant("B") == 2
    assert tt.tenants() == ["A"]
    assert tt.list("A")[1] == 4 and tt.get("A", "m0").metadata["owner"] == "A"
    assert tt.search("B", "coffee", ENC.encode(["coffee"])[0], 5) == []
    assert tt.get("B", "m0") is None and tt.list("B") == ([], 0) and tt.delete("B", ["m0"]) == 0
    assert tt.drop_tenant("B") == 0 and tt.drop_tenant("nobody") == 0


def test_tiers_list_pages_across_l1_and_l2_and_eviction_count():
    tt = small_tiers(l1=4, l2=20)
    n = 30
    ids = [f"m{i:02d}" for i in range(n)]
    texts = [f"{VOCAB[i % len(VOCAB)]} note number {i}" for i in range(n)]
    reports = [add_texts(tt, "t", [ids[i]], [texts[i]]) for i in range(n)]
    # L1 (4) hands its oldest to L2 one at a time (batch max(1, int(0.15 * 4)) = 1); moves are not evictions.
    # L2 (20) deletes its 3 oldest (int(0.15 * 20)) when full: at the 25th and the 28th write.
    assert [r.evicted for r in reports] == [0] * 24 + [3, 0, 0, 3, 0, 0]
    assert all(r.stored == 1 for r in reports)
    gone = sum(r.evicted for r in reports)
    alive = ids[gone:]
    for i in ids[:gone]:
        assert tt.get("t", i) is None

    # A page listing is L1 (oldest first) then L2 (oldest first).
    expected = alive[-4:] + alive[:-4]
    pages, seen_totals = [], set()
    for offset in range(0, 30, 7):
        page, total = tt.list("t", offset=offset, limit=7)
        seen_totals.add(total)
        pages.append(page)
    assert seen_totals == {len(alive)} == {24}
    assert [len(p) for p in pages] == [7, 7, 7, 3, 0]
    flat = [m for p in pages for m in p]
    assert [m.id for m in flat] == expected
    assert [m.tier for m in flat] == ["l1"] * 4 + ["l2"] * 20
    for m in flat:
        i = ids.index(m.id)
        assert m.text == texts[i] and m.importance == 0.5 and m.metadata == {"owner": "t", "n": 0}
    # A page that starts inside L1 and ends inside L2.
    page, _ = tt.list("t", offset=2, limit=5)
    assert [m.id for m in page] == expected[2:7] and [m.tier for m in page] == ["l1", "l1", "l2", "l2", "l2"]
    assert tt.list("t", offset=4, limit=2)[0][0].id == expected[4]
    assert tt.stats()["t"]["pruned"] == gone


# ---------------------------------------------------------------------------------------------------------
# Segment.drop_turns, Segmenter.forget, AssistantHost.forget / segment_ids
# ---------------------------------------------------------------------------------------------------------


def test_segment_drop_turns_keeps_columns_aligned():
    seg = Segment(7, ["a", "b", "c", "d"], ["la", "lb", "lc", "ld"], [T0 + timedelta(minutes=i) for i in range(4)],
                  [3, 4, 5, 6], overlap=2)
    assert seg.drop_turns({"zzz"}) == 0 and seg.turn_ids == ["a", "b", "c", "d"] and seg.overlap == 2
    assert seg.drop_turns({"b", "c"}) == 2
    assert (seg.turn_ids, seg.lines, seg.token_counts) == (["a", "d"], ["la", "ld"], [3, 6])
    assert seg.timestamps == [T0, T0 + timedelta(minutes=3)]
    assert seg.overlap == 1 and seg.new_turn_ids == ["d"] and seg.tokens == 9


def test_segmenter_forget_open_segment_and_pending_overlap():
    # Rendered "[d] S: x .." has 2 + len(text) words; max 20, overlap budget int(20 * 0.25) = 5.
    def t(tid: str, size: int) -> TurnRecord:
        return TurnRecord(tid, "S", " ".join([tid] * (size - 2)), "d", T0)

    sg = Segmenter(20, 0.25, words)
    assert sg.forget(["x"]) == 0
    sg.extend([t("a", 8), t("b", 8)])
    [closed] = sg.add(t("c", 4))  # exactly 20: closes at once, c waits as overlap
    assert closed.turn_ids == ["a", "b", "c"] and sg.current() is None
    assert sg.forget(["c", "a"]) == 1  # only c is still pending; closed segments are not touched
    assert closed.turn_ids == ["a", "b", "c"]
    sg.add(t("d", 4))
    assert sg.current().turn_ids == ["d"] and sg.current().overlap == 0  # c was not replayed
    sg.add(t("e", 4))
    assert sg.forget(["d"]) == 1 and sg.current().turn_ids == ["e"]
    assert [s.turn_ids for s in sg.extend([t("f", 14), t("g", 4)])] == [["e", "f"]]
    assert sg.flush().turn_ids == ["g"]


def test_segmenter_forget_of_every_open_turn_leaves_no_empty_segment():
    sg = Segmenter(64, 0.1)
    sg.add(turn("a", "coffee river"))
    assert sg.forget(["a"]) == 1
    assert sg.current() is None and sg.flush() is None
    # A turn longer than a segment used to close the emptied open segment first (an empty Segment whose
    # .start raises and whose text the router cannot embed).
    closed = sg.add(turn("long", " ".join(VOCAB * 5)))
    assert [s.turn_ids for s in closed] == [["long"]]


def test_assistant_host_forget_and_segment_ids():
    stream = [TurnRecord(f"t{i}", "S", " ".join([VOCAB[i]] * 4), "d", T0) for i in range(8)]
    segs = segment_turns(stream, 20, 0.4, words)  # 6-word turns; overlap budget 8 -> one replayed turn
    assert any(s.overlap for s in segs)
    host = AssistantHost(ScriptedEngine())
    host.add(segs)
    assert host.segment_ids == {s.id for s in segs} and len(host) == len(segs)
    replayed = segs[1].turn_ids[0]  # held by two segments
    holders = [s.id for s in segs if replayed in s.turn_ids]
    assert len(holders) == 2
    assert host.forget([replayed, "unknown"]) == 2
    assert all(replayed not in host.segment(i).turn_ids for i in host.segment_ids)
    assert host.forget([replayed]) == 0


# ---------------------------------------------------------------------------------------------------------
# TenantEpisodes
# ---------------------------------------------------------------------------------------------------------


def ep_config(**router):
    return load_config("cpu", {"episodic": {"segment_tokens": 64, "overlap_ratio": 0.4}, "router": router})


def random_stream(n: int, seed: int, prefix: str = "D") -> list[TurnRecord]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        size = 60 if i == n // 2 else rng.randint(1, 9)  # one turn longer than a segment
        out.append(turn(f"{prefix}:{i}", " ".join(rng.choice(VOCAB) for _ in range(size)), i,
                        rng.choice(["Ann", "Bob"])))
    return out


def test_tenant_episodes_requires_turn_chunking():
    with pytest.raises(ValueError, match="chunking"):
        TenantEpisodes(ep_config(chunking="chars"), DIM)


def test_episodes_segments_match_batch_segmenter_on_admitted_turns_only():
    cfg = ep_config()
    te = TenantEpisodes(cfg, DIM)
    stream = random_stream(120, seed=1)
    rng = random.Random(2)
    admitted = [rng.random() < 0.7 for _ in stream]
    v = vecs(stream)

    closed, pos, last_closed = [], 0, None
    max_known = 0
    for size in [1, 3, 7, 2, 11, 5] * 10:
        if pos >= len(stream):
            break
        sl = slice(pos, pos + size)
        got = te.append("u", stream[sl], v[sl], admitted[sl])
        te.delivered("u", [g.id for g in got])  # as the ingress does once the assistants hold them
        closed += got
        last_closed = got[-1] if got else last_closed
        pos += size
        # Only lines a future segment can still hold keep a vector: the open segment and the carry.
        cur = te._streams["u"].segmenter.current()
        needed = set(last_closed.lines if last_closed else []) | set(cur.lines if cur else [])
        known = te._streams["u"].known
        if got:
            assert set(known) <= needed
        max_known = max(max_known, len(known))
        # The admission context: the last max_turns - 1 vectors of the stream, admitted or not.
        end = min(pos, len(stream))
        want = v[max(0, end - (cfg.admission.max_turns - 1)) : end]
        ctx = te.context("u")
        assert len(ctx) == len(want) and all(np.array_equal(a, b) for a, b in zip(ctx, want, strict=True))

    keep = [t for t, a in zip(stream, admitted, strict=True) if a]
    ref = segment_turns(keep, cfg.episodic.segment_tokens, cfg.episodic.overlap_ratio)
    cur = te._streams["u"].segmenter.current()
    mine = closed + ([cur] if cur is not None else [])
    assert len(closed) >= 10
    assert [s.turn_ids for s in mine] == [s.turn_ids for s in ref]
    assert [(s.id, s.overlap, s.lines) for s in mine] == [(s.id, s.overlap, s.lines) for s in ref]
    dropped = {t.turn_id for t, a in zip(stream, admitted, strict=True) if not a}
    assert dropped and not dropped & {i for s in mine for i in s.turn_ids}
    assert max_known < 40  # bounded by two segments' lines, not by the 80-odd admitted turns
    assert len(te._streams["u"].router) == len(closed)


def test_episodes_route_kw_open_segment_and_isolation():
    te = TenantEpisodes(ep_config(), DIM)
    a = random_stream(40, seed=3, prefix="A")
    a[5] = turn("A:5", "we sailed to zanzibar last spring", 5)
    a[-1] = turn("A:39", "the quokka smiled at me", 39)
    closed = te.append("A", a, vecs(a), [True] * len(a))
    holders = {s.id for s in closed if "A:5" in s.turn_ids}
    assert holders and holders < {s.id for s in closed}  # a closed segment, not every one

    q = "Who talked about Zanzibar?"
    res = te.route("A", q, ENC.encode([q])[0])
    kw = {act.segment_id for act in res.activations if "kw" in act.paths}
    assert kw == holders
    for act in res.activations:
        assert res.segments[act.segment_id][2] == next(s.turn_ids for s in closed if s.id == act.segment_id)
        assert "global" not in act.scores  # no summaries yet
    # The open segment is returned (a copy) and never indexed.
    cur = te._streams["A"].segmenter.current()
    assert res.open_segment is not None and res.open_segment.turn_ids == cur.turn_ids
    assert "A:39" in res.open_segment.turn_ids
    res.open_segment.turn_ids.clear()
    assert te._streams["A"].segmenter.current().turn_ids == cur.turn_ids
    q2 = "quokka"
    res2 = te.route("A", q2, ENC.encode([q2])[0])
    assert cur.id not in {act.segment_id for act in res2.activations} | set(res2.segments)
    assert not any("kw" in act.paths for act in res2.activations)
    assert "A:39" in res2.open_segment.turn_ids

    # Tenant B: same segment ids, other turns; A's segments never come back to B.
    b = random_stream(40, seed=4, prefix="B")
    te.append("B", b, vecs(b), [True] * len(b))
    assert te.tenants() == ["A", "B"]
    res_b = te.route("B", q, ENC.encode([q])[0])
    assert res_b.activations and not any("kw" in act.paths for act in res_b.activations)
    b_ids = {t.turn_id for t in b}
    assert all(set(ids) <= b_ids for _, _, ids in res_b.segments.values())
    assert set(res_b.open_segment.turn_ids) <= b_ids
    assert all(np.array_equal(x, y) for x, y in zip(te.context("B"), vecs(b)[-4:], strict=True))
    empty = te.route("C", q, ENC.encode([q])[0])
    assert (empty.activations, empty.segments, empty.open_segment) == ([], {}, None)
    assert te.context("C") == [] and te.forget("C", ["A:5"]) == 0

    n_a = len(te._streams["A"].router) + 1
    assert te.drop_tenant("A") == n_a and te.drop_tenant("A") == 0
    assert te.tenants() == ["B"] and te.route("A", q, ENC.encode([q])[0]).activations == []
    assert te.route("B", q, ENC.encode([q])[0]).activations == res_b.activations


def test_episodes_open_segment_not_returned_without_include_newest():
    te = TenantEpisodes(ep_config(include_newest=False), DIM)
    a = random_stream(6, seed=5)
    te.append("u", a, vecs(a), [True] * len(a))
    res = te.route("u", "garden", ENC.encode(["garden"])[0])
    assert res.open_segment is None and te._streams["u"].segmenter.current() is not None


def test_episodes_router_uses_the_passed_vectors():
    te = TenantEpisodes(ep_config(mode="union", k_vec=1), DIM)
    a = random_stream(40, seed=6)
    v = vecs(a)
    closed = te.append("u", a, v, [True] * len(a))
    target = closed[1]
    i = next(k for k, t in enumerate(a) if t.turn_id == target.new_turn_ids[0])
    res = te.route("u", "an unrelated string", v[i])  # the vector, not the text, decides the vec path
    [best] = [act for act in res.activations if "vec" in act.paths]
    assert best.segment_id == target.id and best.scores["vec"] == pytest.approx(1.0, abs=1e-5)
    assert "an unrelated string" not in te._streams["u"].known


def test_episodes_route_by_lines_cuts_segments_to_their_routed_lines():
    te = TenantEpisodes(ep_config(mode="lines", line_window=1, line_budget=40), DIM)
    a = random_stream(40, seed=3, prefix="A")
    a[12] = turn("A:12", "we sailed to zanzibar last spring", 12)
    closed = te.append("A", a, vecs(a), [True] * len(a))
    q = "Who sailed to Zanzibar?"
    res = te.route("A", q, ENC.encode([q])[0])
    cut = [a for a in res.activations if a.lines]
    assert cut and cut[0].segment_id in {s.id for s in closed if "A:12" in s.turn_ids}
    routed = [t for _, _, ids in res.segments.values() for t in ids]
    assert "A:12" in routed and "A:11" in routed and "A:13" in routed  # the best line and its neighbours
    by_id = {s.id: s for s in closed}
    for act in cut:
        assert res.segments[act.segment_id][2] == [by_id[act.segment_id].turn_ids[i] for i in act.lines]
    # Readers see the routed lines and the open segment's, nothing else.
    assert res.allowed == frozenset(routed) | frozenset(res.open_segment.turn_ids)
    assert len(routed) < sum(len(by_id[act.segment_id].turn_ids) for act in res.activations)


def test_episodes_set_summary():
    te = TenantEpisodes(ep_config(), DIM)
    a = random_stream(40, seed=7)
    a[3] = turn("D:3", "the zanzibar ferry was late", 3)
    closed = te.append("u", a, vecs(a), [True] * len(a))
    sid = next(s.id for s in closed if "D:3" in s.turn_ids)
    summary = "Ann took a late ferry to zanzibar"
    sv = ENC.encode([summary])[0]
    assert te.set_summary("u", 999, summary, sv) is False
    assert te.set_summary("nobody", sid, summary, sv) is False
    q = "zanzibar ferry"
    qv = ENC.encode([q])[0]
    before = {act.segment_id: act for act in te.route("u", q, qv).activations}
    assert "global" not in before[sid].scores
    assert te.set_summary("u", sid, summary, sv) is True
    assert summary not in te._streams["u"].known  # passed to the router, not kept by line
    after = {act.segment_id: act for act in te.route("u", q, qv).activations}
    assert after[sid].scores["global"] == pytest.approx(float(qv @ sv), abs=1e-5)
    assert all("global" not in act.scores for s, act in after.items() if s != sid)


def test_episodes_question_equal_to_a_stored_line_keeps_its_vector():
    te = TenantEpisodes(ep_config(mode="union", k_vec=1), DIM)
    a = random_stream(40, seed=8)
    v = vecs(a)
    te.append("u", a[:30], v[:30], [True] * 30)
    cur = te._streams["u"].segmenter.current()
    line = cur.lines[-1]
    i = next(k for k, t in enumerate(a) if t.line == line)
    other = ENC.encode(["something else entirely"])[0]
    te.route("u", line, other)
    assert np.array_equal(te._streams["u"].known[line], v[i])
    closed = []
    for k in range(30, 40):  # close the segment that holds the line: its vector must still be known
        got = te.append("u", a[k : k + 1], v[k : k + 1], [True])
        te.delivered("u", [g.id for g in got])
        closed += got
    holder = next(s for s in closed if a[i].turn_id in s.turn_ids)
    [best] = [act for act in te.route("u", "x", v[i]).activations if "vec" in act.paths]
    assert best.segment_id == holder.id and best.scores["vec"] == pytest.approx(1.0, abs=1e-5)


def test_episodes_forget_open_segment_and_pending_overlap():
    # Word-counted tokens: "[d] S: x .." has 2 + len(text) words; segment 64, overlap budget int(64 * 0.4) = 25.
    def t(tid: str, size: int) -> TurnRecord:
        return TurnRecord(tid, "S", " ".join([tid] * (size - 2)), "d", T0)

    te = TenantEpisodes(ep_config(), DIM, count_tokens=words)

    def add(*turns):
        got = te.append("u", list(turns), vecs(turns), [True] * len(turns))
        te.delivered("u", [g.id for g in got])
        return got

    seen: list[str] = []
    [first] = add(t("a", 30), t("b", 30), t("c", 4))  # exactly 64: closes, c waits as overlap
    assert first.turn_ids == ["a", "b", "c"]
    assert te.route("u", "c", ENC.encode(["c"])[0]).open_segment is None
    assert te.forget("u", ["c"]) == 1
    assert add(t("d", 10), t("e", 10)) == []
    assert te.forget("u", ["d", "zzz"]) == 1
    assert te.route("u", "e", ENC.encode(["e"])[0]).open_segment.turn_ids == ["e"]
    for tid, size in [("f", 40), ("g", 20), ("h", 30), ("i", 30)]:
        seen += [i for s in add(t(tid, size)) for i in s.turn_ids]
    seen += te._streams["u"].segmenter.current().turn_ids
    assert seen[:2] == ["e", "f"] and "c" not in seen and "d" not in seen
    # Every open turn forgotten, then a turn longer than a segment: one segment, no empty one.
    add(t("j", 10))
    assert te.forget("u", ["j", "i"]) == 2
    n = len(te._streams["u"].router)
    [long] = add(t("k", 80))
    assert long.turn_ids == ["k"] and len(te._streams["u"].router) == n + 1
    assert te.drop_tenant("u") == n + 1


# ---------------------------------------------------------------------------------------------------------
# TenantAssistants
# ---------------------------------------------------------------------------------------------------------


def keyword_reply(request) -> str:
    """A scripted assistant: the numbers of the lines holding the question's last word; summaries name the first
    turn. Replies are checked against the request's constraint."""
    prompt = request.messages[-1].content
    if request.regex is None:
        return "about " + prompt.split("] ")[1].split(":")[0]  # the first line's speaker
    word = re.search(r"Question: .*?(\w+)\?", prompt).group(1).lower()
    lines = re.findall(r"^\[(\d+)\] (.*)$", prompt, flags=re.M)
    picked = [n for n, line in lines if word in line.lower().split()]
    out = ", ".join(picked) if picked else "none"
    assert re.fullmatch(request.regex, out)
    return out


def assistant_segments(prefix: str) -> list[Segment]:
    texts = ["apple pie recipe", "kiwi smoothie", "apple orchard visit", "river walk", "kiwi farm", "piano lesson",
             "apple cider", "castle tour"]
    stream = [TurnRecord(f"{prefix}{i}", "Ann" if i % 2 else "Bob", x, f"d{i}", T0 + timedelta(hours=i))
              for i, x in enumerate(texts)]
    return segment_turns(stream, 18, 0.4, words)  # 5-word lines: 3 per segment, one replayed


def test_assistants_extract_verbatim_in_pair_order():
    engine = ScriptedEngine(keyword_reply)
    ta = TenantAssistants(engine, method="choose")
    segs = assistant_segments("A")
    assert ta.add("a", segs) == len(segs)
    s0, s1 = segs[0], segs[1]
    pairs = [(s1.id, "What about kiwi?"), (s0.id, "Any apple?"), (s0.id, "Any castle?")]
    found, bill = ta.extract("a", pairs)
    assert len(engine.batches) == 1 and len(engine.batches[0]) == 3
    for evidence, (sid, question) in zip(found, pairs, strict=True):
        seg = next(s for s in segs if s.id == sid)
        word = question.split()[-1].rstrip("?")
        want = [k for k, line in enumerate(seg.lines) if word in line]
        assert [e.content for e in evidence] == [seg.lines[k] for k in want]
        assert [e.turn_id for e in evidence] == [seg.turn_ids[k] for k in want]
        assert [e.timestamp for e in evidence] == [seg.timestamps[k] for k in want]
        assert {e.segment_id for e in evidence} <= {sid}
    assert found[0] and found[1] and found[2] == []
    assert len(found[1]) == 2  # two apple lines in segment 0
    assert bill.calls == 3 and bill.prompt_tokens > 0

    # Forget one apple line: numbering shifts, evidence stays verbatim and never holds the forgotten turn.
    gone = found[1][0].turn_id
    holders = sum(1 for s in segs if gone in s.turn_ids)
    assert holders >= 1 and ta.forget("a", [gone]).lines == holders
    [ev], _ = ta.extract("a", [(s0.id, "Any apple?")])
    assert gone not in [e.turn_id for e in ev] and [e.content for e in ev] == [found[1][1].content]


def test_assistants_skip_segments_whose_lines_were_all_forgotten():
    engine = ScriptedEngine(keyword_reply)
    ta = TenantAssistants(engine, method="choose")
    segs = assistant_segments("A")
    ta.add("a", segs)
    s0, s1 = segs[0], segs[1]
    assert ta.forget("a", s0.turn_ids).lines >= len(s0.turn_ids)
    assert not ta._hosts["a"].segment(s0.id).lines and ta.has("a", s0.id)
    found, bill = ta.extract("a", [(s0.id, "Any apple?"), (s1.id, "What about kiwi?")])
    assert found[0] == [] and found[1]
    assert len(engine.batches) == 1 and len(engine.batches[0]) == 1 and bill.calls == 1
    found, bill = ta.extract("a", [(s0.id, "Any apple?")])
    assert found == [[]] and bill.calls == 0 and len(engine.batches) == 1
    assert ta.summarise({"a": [s0.id]}) == ({}, bill) and len(engine.batches) == 1


def test_assistants_tenant_isolation():
    engine = ScriptedEngine(keyword_reply)
    ta = TenantAssistants(engine, method="choose")
    segs_a = assistant_segments("A")
    ta.add("a", segs_a[:2])
    ta.add("b", [segs_a[2]])  # B holds only segment id 2 (segment ids repeat across tenants)
    assert ta.tenants() == ["a", "b"]
    found, bill = ta.extract("b", [(segs_a[0].id, "Any apple?")])
    assert found == [[]] and bill.calls == 0 and engine.batches == []
    assert ta.extract("nobody", [(0, "Any apple?")])[0] == [[]] and engine.batches == []
    found, _ = ta.extract("b", [(segs_a[0].id, "Any apple?"), (segs_a[2].id, "Any apple?")])
    assert found[0] == [] and found[1] and len(engine.batches[0]) == 1
    assert not ta.has("b", segs_a[0].id) and ta.has("a", segs_a[0].id)
    a_lines = [list(s.lines) for s in segs_a[:2]]
    assert not ta.forget("b", segs_a[0].turn_ids) and [s.lines for s in segs_a[:2]] == a_lines
    assert ta.summarise({"b": [segs_a[0].id]}) == ({}, TokenBill())
    b_lines = len(segs_a[2].lines)
    assert ta.drop_tenant("b") == b_lines and ta.tenants() == ["a"]
    assert ta.extract("a", [(segs_a[0].id, "Any apple?")])[0][0]


def test_assistants_summarise_read_by_value_and_drop_tenant():
    engine = ScriptedEngine(keyword_reply)
    ta = TenantAssistants(engine, summary_max_tokens=20, method="choose")
    segs = assistant_segments("A")
    ta.add("a", segs)
    ids = [segs[0].id, segs[2].id, 999]
    summaries, bill = ta.summarise({"a": ids})
    speaker = {s.id: s.lines[0].split("] ")[1].split(":")[0] for s in segs}
    assert summaries == {"a": {i: f"about {speaker[i]}" for i in ids[:2]}}
    summaries = summaries["a"]
    assert segs[0].summary == summaries[segs[0].id] and segs[2].summary == summaries[segs[2].id]
    assert segs[1].summary is None
    [batch] = engine.batches
    assert [r.max_tokens for r in batch] == [20, 20]
    assert [segs[0].text in batch[0].messages[0].content, segs[2].text in batch[1].messages[0].content] == [True] * 2
    prompts = [" ".join(m.content for m in r.messages) for r in batch]
    assert bill.calls == 2 and bill.prompt_tokens == sum(len(p.split()) for p in prompts)
    assert bill.completion_tokens == sum(len(s.split()) + 1 for s in summaries.values())

    # By value: segments no tenant holds (the open one); empty ones are skipped.
    loose = Segment(50, ["x1", "x2"], ["[d] Ann: kiwi jam", "[d] Bob: fig tart"], [T0, T0], [4, 4])
    empty = Segment(51, [], [], [], [])
    found, bill = ta.candidates_from([empty, loose], "Any kiwi?")
    assert [[(e.turn_id, e.content, e.segment_id) for e in ev] for ev in found] == [[("x1", loose.lines[0], 50)]]
    assert bill.calls == 1 and not ta.has("a", 50)
    assert ta.candidates_from([empty], "Any kiwi?") == ([], TokenBill()) and len(engine.batches) == 2

    removed = ta.forget("a", [segs[0].turn_ids[0]])
    assert removed.lines == 1 and [s.id for s in removed.segments] == [segs[0].id]
    assert removed.segments[0].turn_ids == segs[0].turn_ids and removed.segments[0].summary is None
    assert ta.drop_tenant("a") == sum(len(s.lines) for s in segs) and ta.drop_tenant("a") == 0
    assert ta.tenants() == [] and ta.extract("a", [(segs[0].id, "Any apple?")])[0] == [[]]
