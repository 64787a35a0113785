"""bench.admission_downstream with a fake QA system and a fake classifier on a tiny LoCoMo-format file."""

from __future__ import annotations

import json

import pytest

from bench import admission_downstream as ad
from bench import locomo
from core.generation import TokenBill
from corpora.locomo import load_locomo
from tests.bench.test_locomo_harness import CONV_A, CONV_B, FakeAnswer, _sample


class ReadsAll:
    """Answers right when it holds a question's first evidence turn, "zzz" otherwise; routes every turn."""

    def __init__(self, evidence: dict[str, tuple[str, list[str]]]) -> None:
        self.evidence, self.turns = evidence, None
        self.asked: list = []  # the kind hint of each question

    def ingest(self, turns) -> None:
        self.turns = list(turns)

    def ask(self, question: str, *, kind=None) -> FakeAnswer:
        self.asked.append(kind)
        answer, evidence = self.evidence[question]
        ids = [t.dia_id for t in self.turns]
        right = evidence and evidence[0] in ids
        return FakeAnswer(answer if right else "zzz", ids[:1], ids, 1, TokenBill(), TokenBill())


@pytest.fixture
def env(tmp_path, monkeypatch):
    data = tmp_path / "locomo.json"
    data.write_text(json.dumps([_sample("conv-48", 4, CONV_A), _sample("conv-49", 3, CONV_B)]))
    monkeypatch.setenv("ENGRAM_PATHS__CACHE_DIR", str(tmp_path / "cache"))
    evidence = {q: (a or "", ev) for qa in (CONV_A, CONV_B) for q, a, _, ev in qa}
    systems: list[ReadsAll] = []

    def factory(name, config, *, encoder, engine):
        systems.append(ReadsAll(evidence))
        return systems[-1]

    def decide(convs, cfg):  # the "classifier": D1:1 and D1:2 of conv-48, D1:3 of conv-49
        return {"conv-48": {"D1:1", "D1:2"}, "conv-49": {"D1:3"}}

    def run(*flags: str, decide=decide) -> dict:
        argv = ["--data", str(data), "--results-dir", str(tmp_path / "results"), *flags]
        return ad.main(argv, factory=factory, decide=decide)

    run.factory = factory
    return run, systems, data, tmp_path


def test_every_policy_stores_the_classifiers_budget_and_the_system_sees_only_stored_turns(env, capsys):
    run, systems, _, tmp_path = env
    out = run()
    assert [r["policy"] for r in out["results"]] == list(ad.POLICIES)
    shares = {r["policy"]: r["stored_share"] for r in out["results"]}
    assert shares["store_all"] == 1.0 and out["budget"] == shares["classifier"] == 3 / 7
    assert shares["random"] == shares["keyword"] == 3 / 7
    ingested = [sorted(t.dia_id for t in s.turns) for s in systems]  # 5 policies x 2 conversations, in order
    assert ingested[:2] == [["D1:1", "D1:2", "D1:3", "D1:4"], ["D1:1", "D1:2", "D1:3"]]
    assert ingested[2:4] == [["D1:1", "D1:2"], ["D1:3"]]
    assert all(len(a) == 2 for a in ingested[4:8:2]) and all(len(b) == 1 for b in ingested[5:8:2])
    assert ingested[8:] == [[], []]  # keyword_rule: "turn 1 of conv-48" holds no memory keyword
    assert shares["keyword_rule"] == 0.0
    # evidence of categories 1-4: conv-48 D1:1, D1:2, D1:3, D1:2 and conv-49 D1:1, D1:2, D1:3 -> 4 of 7 kept
    classifier = next(r for r in out["results"] if r["policy"] == "classifier")
    assert classifier["evidence_stored"] == pytest.approx(4 / 7)
    assert classifier["evidence_recall"] < 1.0 == next(r for r in out["results"] if r["policy"] == "store_all")[
        "evidence_recall"]
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == json.loads(json.dumps(out))
    table = (tmp_path / "results" / "admission" / "downstream-test-rag.md").read_text()
    assert table.startswith("| policy |")
    by_read = next(r for r in out["results"] if r["policy"] == "store_all")["f1_by_evidence_read"]
    assert sum(g["questions"] for g in by_read.values()) == 5  # categories 1-4 with evidence
    row = next(line for line in table.splitlines() if line.startswith("| store_all |"))
    assert f"| {by_read['all']['f1']:.3f} ({by_read['all']['questions']}) |" in row


def test_answers_are_cached_per_policy(env):
    run, systems, _, _ = env
    run()
    first = len(systems)
    run()
    assert len(systems) == first  # everything answered: no system built again


def test_store_all_shares_the_answers_of_the_harness_system(env):
    run, systems, data, tmp_path = env
    harness = locomo.main(["--data", str(data), "--results-dir", str(tmp_path / "results"), "--system", "rag",
                           "--category", "predicted"], factory=run.factory)
    built = len(systems)
    out = run("--policies", "store_all")
    assert len(systems) == built  # every store-all answer came from bench.locomo's rag file
    store_all = out["results"][0]
    assert store_all["cache"] == harness["cache"]
    assert store_all["f1"] == harness["f1"]
    run("--policies", "classifier")
    assert len(systems) == built + 2  # a policy that drops turns answers on its own (two conversations)


def test_questions_go_without_their_category_unless_gold_is_asked_for(env):
    run, systems, _, _ = env
    out = run()
    assert out["category"] == "predicted"
    assert {a for s in systems for a in s.asked} == {None}  # as /v1/ask: no hint
    first = len(systems)
    run("--category", "gold")  # another cache: every policy answered again, with the labels
    gold = [a for s in systems[first:] for a in s.asked]
    assert set(gold) == {"list", "temporal", "inference", "fact", None}  # category 5: no hint


def test_per_category_keeps_the_first_questions_of_each_category(env):
    run, systems, _, _ = env
    assert run()["results"][0]["questions"] == 8
    out = run("--per-category", "1", "--categories", "1,4")  # conv-48: one of each; conv-49: its first car question
    assert out["per_category"] == 1
    assert [r["questions"] for r in out["results"]] == [3] * len(ad.POLICIES)
    asked = len(systems)
    run("--per-category", "1", "--categories", "1,4")
    assert len(systems) == asked  # the sample's answers are cached too
    with pytest.raises(SystemExit):
        run("--per-category", "0")


def test_random_is_seeded_and_keyword_prefers_memory_words():
    convs = load_locomo_sample()
    classifier = {c.sample_id: {c.turns[0].dia_id} for c in convs}
    a = ad.budget_policies(convs, classifier, seed=3)
    assert a["random"] == ad.budget_policies(convs, classifier, seed=3)["random"]
    assert a["keyword"] == {"c": {"D1:2"}}  # "I love my new job" beats "ok" and "hm"
    assert a["keyword_rule"] == {"c": {"D1:2"}}  # the online rule: only turns with a memory keyword
    assert ad.budget_policies(convs, classifier, seed=3, keyword_min=5)["keyword_rule"] == {"c": set()}


def load_locomo_sample():
    from corpora.locomo import Conversation, Turn

    texts = ["ok", "I love my new job and I feel happy", "hm"]
    from datetime import datetime

    turns = [Turn("c", f"D1:{i + 1}", 1, i, "A", t, "1:56 pm on 8 May, 2023", datetime(2023, 5, 8))
             for i, t in enumerate(texts)]
    return [Conversation("c", ("A", "B"), turns, [])]


def test_cut_keeps_questions_and_order(env):
    _, _, data, _ = env
    conv = load_locomo(data)[0]
    short = ad.cut(conv, {"D1:3", "D1:1"})
    assert [t.dia_id for t in short.turns] == ["D1:1", "D1:3"] and short.questions == conv.questions


def test_threshold_reaches_the_classifier_and_names_its_own_table(env):
    run_with, _, _, tmp_path = env
    seen: list[float | None] = []

    def decide(convs, cfg):  # stores more turns the lower the configured cut, as the classifier does
        seen.append(cfg.admission.threshold)
        n = 1 if cfg.admission.threshold is None else 3
        return {c.sample_id: {t.dia_id for t in c.turns[:n]} for c in convs}

    def run(*flags: str) -> dict:
        return run_with(*flags, decide=decide)

    trained, lower = run(), run("--threshold", "0.1")
    assert seen == [None, 0.1] and (trained["threshold"], lower["threshold"]) == (None, 0.1)
    assert trained["budget"] == pytest.approx(2 / 7) and lower["budget"] == pytest.approx(6 / 7)
    tables = tmp_path / "results" / "admission"
    assert "classifier threshold trained" in (tables / "downstream-test-rag.md").read_text()
    assert "classifier threshold 0.1" in (tables / "downstream-test-rag-t0.1.md").read_text()
    for bad in ("0", "1", "1.5"):
        with pytest.raises(SystemExit):
            run("--threshold", bad)


def test_policies_runs_a_subset_and_leaves_the_missing_differences_null(env):
    run, systems, _, _ = env
    out = run("--policies", "classifier,keyword_rule")
    assert [r["policy"] for r in out["results"]] == ["classifier", "keyword_rule"]
    assert out["f1_classifier_minus_random"] is None and out["f1_classifier_minus_store_all"] is None
    assert out["budget"] == 3 / 7 and len(systems) == 4
    for bad in ("", "classifier,everything"):
        with pytest.raises(SystemExit):
            run("--policies", bad)
