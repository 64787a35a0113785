"""Assistants, master and the episodic systems with a scripted engine and the hashing encoder (no models)."""

import re
from datetime import datetime, timedelta

import numpy as np
import pytest

from bench.systems import TENANT, build_system
from core.config import EngramConfig, EpisodicConfig
from core.evidence import Evidence, by_score
from inference.assistant import AssistantHost, SegmentQuery, fuse, line_regex, words
from inference.master import Master, clean_answer, format_date
from inference.question_kind import FACT, INFERENCE, LIST, TEMPORAL
from inference.question_kind import QuestionKind as K
from memory.segmenter import segment_turns
from tests.doubles import HashingEncoder, ScriptedEngine


class T:
    """A turn as the LoCoMo loader gives it."""

    def __init__(self, i, speaker, text):
        self.turn_id, self.speaker, self.text = f"D1:{i}", speaker, text
        self.dia_id, self.session = self.turn_id, 1 + i // 20
        self.timestamp = datetime(2023, 5, 7, 13, 0) + timedelta(days=i)
        ts = self.timestamp
        self.date_time = f"{ts:%-I:%M %p} on {ts.day} {ts:%B}, {ts.year}"


TURNS = [T(i, "Ann" if i % 2 else "Bob", f"line {i} about topic{i % 7} and the number {1000 + i}")
         for i in range(1, 61)]


def segments(max_tokens=120):
    return segment_turns(TURNS, max_tokens, 0.1)


def test_line_regex_accepts_only_valid_line_lists():
    rx = re.compile(line_regex(12, 3))
    for ok in ("none", "1", "12", "3, 7", "1, 2, 12"):
        assert rx.fullmatch(ok), ok
    for bad in ("0", "13", "1, 2, 3, 4", "1,2", "", "one"):
        assert not rx.fullmatch(bad), bad


def test_assistant_returns_verbatim_lines_of_its_own_segment():
    segs = segments()
    host = AssistantHost(ScriptedEngine(lambda r: "2, 1, 99"), evidence_per_segment=5, method="choose")
    host.add(segs)
    found, bill = host.extract([(segs[0].id, "q?"), (segs[1].id, "q?")])
    for seg, evidence in zip(segs[:2], found, strict=True):
        assert [e.turn_id for e in evidence] == seg.turn_ids[:2]  # 99 is out of range: dropped
        assert [e.content for e in evidence] == seg.lines[:2]
        assert all(e.segment_id == seg.id for e in evidence)
    assert bill.calls == 2 and bill.prompt_tokens > 0


def test_assistant_batches_all_pairs_in_one_engine_call():
    segs = segments()
    engine = ScriptedEngine()
    host = AssistantHost(engine, method="choose")
    host.add(segs)
    host.extract([(s.id, "q?") for s in segs[:4]])
    assert len(engine.batches) == 1 and len(engine.batches[0]) == 4
    assert all(r.regex is not None for r in engine.batches[0])


def test_assistant_with_scored_choices_takes_lines_ranked_above_none():
    from core.generation import GenerationResult

    class ChoiceEngine(ScriptedEngine):
        supports_regex = False

        def generate(self, requests):
            self.batches.append(list(requests))
            return [GenerationResult("3", 10, 2, "stop", {"3": -0.1, "1": -0.5, "none": -0.9, "2": -2.0})
                    for _ in requests]

    segs = segments()
    host = AssistantHost(ChoiceEngine(), evidence_per_segment=5, method="choose")
    host.add(segs)
    [evidence], _ = host.extract([(segs[0].id, "q?")])
    assert [e.turn_id for e in evidence] == [segs[0].turn_ids[0], segs[0].turn_ids[2]]
    assert host.engine.batches[0][0].choice[0] == "none"


def test_master_orders_evidence_by_time_and_cleans_the_answer():
    engine = ScriptedEngine(lambda r: "Answer: Ann: a pottery class.\nmore")
    master = Master(engine, EpisodicConfig())
    late = Evidence("D1:9", "[late] Ann: x", datetime(2023, 6, 1), 0)
    early = Evidence("D1:2", "[early] Bob: y", datetime(2023, 5, 1), 0)
    ans = master.answer("What class?", [late, early], kind=K.FACT)
    assert ans.text == "a pottery class" and [e.turn_id for e in ans.evidence] == ["D1:2", "D1:9"]
    prompt = engine.batches[0][0].messages[-1].content
    assert prompt.index("[early]") < prompt.index("[late]")


def test_master_keeps_dialogue_order_among_turns_of_one_time():
    """LoCoMo turns of a session share one time: their ids order them, numbers compared as numbers."""
    engine = ScriptedEngine(lambda r: "x")
    when = datetime(2023, 5, 1)
    ids = ["D2:1", "D1:10", "D1:9", "D1:2", "t11", "t2"]
    ans = Master(engine, EpisodicConfig()).answer("q?", [Evidence(t, t, when, 0) for t in ids], kind=K.FACT)
    assert [e.turn_id for e in ans.evidence] == ["D1:2", "D1:9", "D1:10", "D2:1", "t2", "t11"]


def test_master_temporal_answer_is_the_chosen_lines_date():
    master = Master(ScriptedEngine(lambda r: r.choice[-1]), EpisodicConfig())
    ev = [Evidence("D1:1", "a", datetime(2023, 5, 7), 0), Evidence("D1:2", "b", datetime(2023, 7, 15), 0)]
    assert master.answer("When did it happen?", ev, kind=K.TEMPORAL).text == "15 July 2023"


def test_master_temporal_answer_is_the_date_grounded_in_the_chosen_line():
    master = Master(ScriptedEngine(lambda r: r.choice[-1]), EpisodicConfig())
    line = "[1:56 pm on 8 May, 2023] Ann: We went hiking last weekend [the weekend before 8 May 2023]."
    ev = [Evidence("D1:1", "a", datetime(2023, 5, 1), 0), Evidence("D1:2", line, datetime(2023, 5, 8), 0)]
    assert master.answer("When did Ann go hiking?", ev, kind=K.TEMPORAL).text == "the weekend before 8 May 2023"


def test_master_reads_the_kind_of_a_question_sent_without_a_hint():
    seen = []
    master = Master(ScriptedEngine(lambda r: seen.append(r) or (r.choice[-1] if r.choice else "x")), EpisodicConfig())
    ev = [Evidence("D1:1", "a", datetime(2023, 5, 7), 0), Evidence("D1:2", "b", datetime(2023, 7, 15), 0)]
    assert master.answer("When did it happen?", ev).text == "15 July 2023"  # temporal: a date
    assert seen[-1].choice == ["1", "2"]
    master.answer("Would Ann likely enjoy a concert?", ev)  # inference: "Likely yes / no"
    assert "Likely yes" in seen[-1].messages[-1].content
    master.answer("What did Ann bake?", ev)  # a fact: a free phrase
    assert seen[-1].choice is None


def test_master_shows_one_worked_example_of_the_kind_and_takes_its_tokens_off_the_budget():
    from inference.master import EXAMPLES

    seen = []
    engine = ScriptedEngine(lambda r: seen.append(r) or (r.choice[0] if r.choice else "x"))
    master = Master(engine, EpisodicConfig())
    plain = Master(engine, EpisodicConfig(answer_examples=False))
    ev = [Evidence("D1:1", "a", datetime(2023, 5, 7), 0)]
    asked = ((LIST, "What did Ann bake?", LIST), (INFERENCE, "Would Ann bake?", INFERENCE),
             (FACT, "What did Ann bake?", FACT),
             (INFERENCE, "What would Ann bake?", FACT))  # an inference asked as a phrase is shown the phrase example
    for kind, asked_question, shown in asked:
        master.answer(asked_question, ev, kind)
        roles = [m.role for m in seen[-1].messages]
        assert roles == ["system", "user", "assistant", "user"], kind
        lines, question, answer = EXAMPLES[shown]
        assert question in seen[-1].messages[1].content and seen[-1].messages[2].content == answer
        assert all(line in seen[-1].messages[1].content for line in lines)
    master.answer("When did Ann bake?", ev, TEMPORAL)  # a constrained choice: no free answer to show
    assert [m.role for m in seen[-1].messages] == ["system", "user"]
    plain.answer("What did Ann bake?", ev, kind=K.FACT)
    assert [m.role for m in seen[-1].messages] == ["system", "user"]
    assert 0 < plain.budget - master.budget < 200


def test_master_dates_by_day_heads_each_days_lines_once_and_fits_what_it_shows():
    from inference.master import fit_evidence

    lines = [("D1:1", "[1:56 pm on 8 May, 2023] Ann: We met yesterday [7 May 2023].", datetime(2023, 5, 8, 13, 56)),
             ("D1:2", "[1:56 pm on 8 May, 2023] Bob: Nice!", datetime(2023, 5, 8, 13, 56)),
             ("D2:1", "[9:00 am on 25 May, 2023] Ann: Back home.", datetime(2023, 5, 25, 9))]
    ev = [Evidence(t, c, when, 0) for t, c, when in lines]
    engine = ScriptedEngine(lambda r: r.choice[-1] if r.choice else "8 May 2023: Ann: the museum.")
    master = Master(engine, EpisodicConfig(master_dates="day"))
    assert master.answer("What did Ann visit?", ev[::-1], kind=K.FACT).text == "the museum"
    prompt = engine.batches[-1][0].messages[-1].content
    assert ("8 May 2023:\n[1] Ann: We met yesterday [7 May 2023].\n[2] Bob: Nice!\n25 May 2023:\n[3] Ann: Back home."
            in prompt) and "pm on" not in prompt
    # dates unchanged
    assert master.answer("When did Ann get back home?", ev, kind=K.TEMPORAL).text == "25 May 2023"
    shown = Master(ScriptedEngine(), EpisodicConfig()).prompt("q?", ev, FACT)
    assert "[1] [1:56 pm on 8 May, 2023] Ann:" in shown  # 'line' (the default) shows lines as stored
    words = lambda text: len(text.split())  # noqa: E731
    # a header costs 5 words, a day's heading 3 (+2): a budget that fits the lines as shown by day holds all three
    budget = words("q?") + sum(words(c) - 5 + 6 for _, c, _ in lines) + 2 * (3 + 2)
    assert len(fit_evidence(ev, "q?", budget, words, by_day=True)) == 3
    assert len(fit_evidence(ev, "q?", budget, words)) == 2


def test_clean_answer_keeps_the_answer_and_drops_what_small_models_wrap_it_in():
    assert clean_answer("[2] [9:48 am on 4 February, 2023] Jolene: Bogota. I loved it") == "Bogota"
    assert clean_answer("Likely yes: Evan: Hey Sam! Good to see you") == "Likely yes"
    assert clean_answer("She is a cat, a cat. She is a cat. She is a cat. She") == "She is a cat, a cat"
    assert clean_answer("Paris. Rome", sentence=False) == "Paris. Rome"
    assert clean_answer("Dr. Lee helped her.") == "Dr. Lee helped her"
    assert clean_answer("Evidence, oldest first:\n") == ""


def test_a_restated_question_is_dropped_from_the_answer():
    from inference.master import drop_restated

    question = "What did Melanie realize after the charity race?"
    assert drop_restated("Melanie realized that self-care is important", question) == "self-care is important"
    assert drop_restated("a pottery class", "What class?") == "a pottery class"  # only link words: kept
    assert drop_restated("Melanie", "Who is Melanie?") == "Melanie"  # nothing would be left
    assert drop_restated("Melanie's race was the first", "What was Melanie's race?") == "the first"
    seen = ScriptedEngine(lambda r: "Melanie realized that self-care is important. She runs.")
    ev = [Evidence("D1:1", "a", datetime(2023, 5, 7), 0)]
    answer = Master(seen, EpisodicConfig()).answer(question, ev, kind=K.FACT)
    assert answer.text == "self-care is important" and answer.raw.startswith("Melanie realized")
    likely = Master(ScriptedEngine(lambda r: "Likely yes: she said so"), EpisodicConfig())
    # never cut to "yes"
    assert likely.answer("Would Ann likely enjoy it?", ev, kind=K.INFERENCE).text == "Likely yes"


def test_master_says_not_mentioned_without_evidence_and_asks_no_model():
    engine = ScriptedEngine()
    master = Master(engine, EpisodicConfig())
    assert master.answer("Anything?", [], kind=K.FACT).text == "Not mentioned in the conversation"
    assert engine.batches == []


def test_format_and_clean():
    assert format_date(datetime(2023, 5, 7)) == "7 May 2023"
    assert clean_answer('"Paris".') == "Paris"


@pytest.fixture
def config():
    cfg = EngramConfig()
    cfg.episodic.segment_tokens = 120
    cfg.router.chunking = "turn"  # as every profile sets it: the service's router indexes turn lines
    return cfg


@pytest.mark.parametrize("name", ["engram", "direct_read", "rag", "full_context"])
def test_every_system_answers_with_evidence_and_bills(config, name):
    engine = ScriptedEngine()
    system = build_system(name, config, encoder=HashingEncoder(), engine=engine)
    system.ingest(TURNS)
    ans = system.ask("What about topic3 and the number 1010?", kind=K.FACT)
    assert ans.text == "a short answer"
    assert ans.evidence_turn_ids and set(ans.evidence_turn_ids) <= {t.turn_id for t in TURNS}
    assert set(ans.evidence_turn_ids) <= set(ans.routed_turn_ids)
    assert ans.master_bill.calls == 1
    assert (ans.assistant_bill.calls > 0) == (name == "engram")
    assert (ans.segments > 0) == (name in ("engram", "direct_read"))


def test_engram_summarises_every_closed_segment_for_the_router(config):
    engine = ScriptedEngine(lambda r: "summary of a part")
    system = build_system("engram", config, encoder=HashingEncoder(), engine=engine)
    system.ingest(TURNS)
    held = [seg for core in system.shards.cores["assistants"] for seg in core.segments(TENANT)]
    assert len(held) > 3 and all(s.summary == "summary of a part" for s in held)
    # the service's batches: at most cluster.summary_batch segments per engine call
    assert len(engine.batches) == -(-len(held) // config.cluster.summary_batch)
    assert all(len(b) <= config.cluster.summary_batch for b in engine.batches)


def test_rag_finds_the_turn_with_the_exact_number(config):
    system = build_system("rag", config, encoder=HashingEncoder(), engine=ScriptedEngine())
    system.ingest(TURNS)
    assert "D1:37" in system.ask("the number 1037", kind=K.FACT).routed_turn_ids


def test_full_context_keeps_the_most_recent_turns_within_the_window(config):
    engine = ScriptedEngine()
    engine.max_model_len = 400
    system = build_system("full_context", config, encoder=HashingEncoder(), engine=engine)
    system.ingest(TURNS)
    ans = system.ask("q?", kind=K.FACT)
    assert "D1:60" in ans.routed_turn_ids and "D1:1" not in ans.routed_turn_ids


def test_unknown_system_is_an_error(config):
    with pytest.raises(ValueError, match="unknown system"):
        build_system("oracle", config, encoder=HashingEncoder(), engine=ScriptedEngine())


def favour(word):
    """Scripted likelihood: the question is likely (0 per token) after a line holding ``word``, else -3."""
    return lambda prompt, continuation: [0.0 if word in prompt else -3.0] * len(continuation.split())


def test_likelihood_extraction_shortlists_then_lets_the_model_score_in_one_batch():
    segs = segments()
    engine = ScriptedEngine(likelihood=favour("number 1003"))
    host = AssistantHost(engine, evidence_per_segment=5, shortlist=3)
    host.add(segs)
    question = "What about topic3?"  # lexical match: the topic3 lines (3, 10, ... ) in each segment
    found, bill = host.extract([(s.id, question) for s in segs[:2]])
    [batch] = engine.batches
    assert len(batch) == 6 and bill.calls == 6  # shortlist 3 per segment, one engine call
    assert all(r.continuation == f" {question}" and r.constraint is None and r.prompt for r in batch)
    for seg, evidence in zip(segs[:2], found, strict=True):
        assert 0 < len(evidence) <= 3
        idx = [seg.turn_ids.index(e.turn_id) for e in evidence]
        assert idx == sorted(idx)  # in the segment's order, verbatim
        for e, i in zip(evidence, idx, strict=True):
            assert e.content == seg.lines[i] and e.timestamp == seg.timestamps[i]
    best = by_score([e for group in found for e in group])[0]
    assert "number 1003" in best.content  # topic3 by words, and the model's favourite


def test_likelihood_extraction_takes_the_routers_line_scores_into_the_shortlist():
    segs = segments()
    seg = segs[0]
    host = AssistantHost(ScriptedEngine(), shortlist=1)
    host.add(segs)
    question = "Which line?"  # no word of it is in any line: the lexical signal is flat
    hint = [0.0] * len(seg.lines)
    hint[4] = 0.9
    [[only]], _ = host.extract([SegmentQuery(seg.id, question, hint)])
    assert only.turn_id == seg.turn_ids[4]
    [[first]], _ = host.extract([(seg.id, question)])  # no hint: ties keep the segment's order
    assert first.turn_id == seg.turn_ids[0]
    wrong_length = [1.0, 0.0]  # not one score per line: ignored rather than misapplied
    [[again]], _ = host.extract([SegmentQuery(seg.id, question, wrong_length)])
    assert again.turn_id == seg.turn_ids[0]


def test_fuse_standardises_each_signal_over_every_group_and_keeps_the_best_lines_in_line_order():
    def ev(turn, rank, lik):
        return Evidence(turn, f"line {turn}", datetime(2023, 5, 7), 0, signals=(rank, lik))

    groups = [[ev("a1", 1.0, -1.0), ev("a2", 0.0, -3.0), ev("a3", 2.0, -2.0)], [ev("b1", 3.0, -1.0)], []]
    out = fuse(groups, most=2)
    ranks, liks = np.array([1.0, 0.0, 2.0, 3.0]), np.array([-1.0, -3.0, -2.0, -1.0])
    expected = (ranks - ranks.mean()) / ranks.std() + (liks - liks.mean()) / liks.std()
    assert [e.turn_id for e in out[0]] == ["a1", "a3"] and [e.turn_id for e in out[1]] == ["b1"] and out[2] == []
    assert [e.score for g in out for e in g] == pytest.approx([expected[0], expected[2], expected[3]])
    assert all(e.signals == () for g in out for e in g)
    # The first group alone is standardised differently: fusing per actor would change the scores.
    alone = fuse(groups[:1], most=2)[0]
    assert [e.score for e in alone] != pytest.approx([e.score for e in out[0]])
    # Evidence without signals (the choose method's) passes as it is.
    chosen = [[Evidence("c1", "x", datetime(2023, 5, 7), 1)]]
    assert fuse(chosen, most=1) == chosen


def test_a_querys_idf_replaces_the_held_lines_own():
    segs = segments()
    host = AssistantHost(ScriptedEngine())
    host.add(segs)
    seg, question = segs[0], "What about topic3 and 1003?"
    own = host.rank_lines(SegmentQuery(seg.id, question))
    flat = host.rank_lines(SegmentQuery(seg.id, question, (), dict.fromkeys(words(question), 1.0)))
    assert not np.allclose(own, flat)
    only_topic = host.rank_lines(SegmentQuery(seg.id, question, (), {"topic3": 2.0}))
    assert set(np.unique(only_topic)) <= {0.0, 1.0}  # a line holds all of the idf mass or none of it


def test_speaker_prior_lowers_only_the_other_speakers_lines_when_one_is_named():
    segs = segments()
    seg = segs[0]
    def terms(text):  # NOTE: without the names, so the lexical signal does not favour the named speaker itself
        return [w for w in words(text) if w not in {"ann", "bob"}]

    plain = AssistantHost(ScriptedEngine(), shortlist=1, terms=terms)
    biased = AssistantHost(ScriptedEngine(), shortlist=1, terms=terms, speaker_prior=0.3)
    plain.add(segs)
    biased.add(segs)
    bob = [line.split("] ", 1)[1].startswith("Bob:") for line in seg.lines]
    for question, lowered in (("What did Ann say about topic3?", bob), ("What did Bob say?", [not b for b in bob]),
                              ("What did Ann tell Bob?", [False] * len(bob)), ("Which topic?", [False] * len(bob))):
        diff = biased.rank_lines(SegmentQuery(seg.id, question)) - plain.rank_lines(SegmentQuery(seg.id, question))
        assert np.allclose(diff, [-0.3 if low else 0.0 for low in lowered]), question
    hint = [0.0] * len(seg.lines)
    first_bob, first_ann = bob.index(True), bob.index(False)
    hint[first_bob], hint[first_ann] = 0.9, 0.7  # the router prefers Bob's line by less than the prior
    query = SegmentQuery(seg.id, "Which line did Ann write?", hint)
    assert plain.extract([query])[0][0][0].turn_id == seg.turn_ids[first_bob]
    assert biased.extract([query])[0][0][0].turn_id == seg.turn_ids[first_ann]


def test_likelihood_idf_follows_added_and_forgotten_lines():
    segs = segments()
    host = AssistantHost(ScriptedEngine())
    host.add(segs[:1])
    assert "1001" in host.idf() and "1050" not in host.idf()
    host.add(segs[1:])
    assert "1050" in host.idf()
    gone = [t for s in segs for t, line in zip(s.turn_ids, s.lines, strict=True) if "number 1001" in line]
    host.forget(gone)
    assert "1001" not in host.idf()


def test_host_snapshots_from_before_the_extraction_settings_load_with_the_defaults():
    import pickle

    host = AssistantHost(ScriptedEngine(), evidence_per_segment=2)
    host.add(segments())
    for name in ("method", "shortlist", "terms", "_idf"):
        del host.__dict__[name]  # as pickled by the earlier code
    loaded = pickle.loads(pickle.dumps(host))
    loaded.engine = ScriptedEngine()
    assert loaded.method == "likelihood" and loaded.shortlist == 5
    [evidence], _ = loaded.extract([(segments()[0].id, "topic1?")])
    assert 0 < len(evidence) <= 2


def test_scored_request_takes_no_constraint():
    from core.generation import GenerationRequest

    with pytest.raises(ValueError, match="no output constraint"):
        GenerationRequest(prompt="a", continuation=" b", choice=["x"])
