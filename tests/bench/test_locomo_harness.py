"""bench.locomo with a fake QA system on a tiny LoCoMo-format file: metrics, resume, --limit, JSON contract."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from bench import locomo
from core.config import load_config
from core.generation import TokenBill
from corpora.locomo import load_locomo

# (question, answer, category, evidence); category 5 items carry an adversarial answer instead.
CONV_A = [
    ("Who came to the party?", "Alice, Bob", 1, ["D1:1", "D1:2"]),
    ("When did Mel paint?", "7 May 2023", 2, ["D1:3"]),
    ("What food does Mel like?", "pizza", 4, ["D1:2"]),
    ("What did Mel's dog paint?", None, 5, ["D1:4"]),
    ("Would Mel enjoy a museum?", "likely yes", 3, []),
]
CONV_B = [
    ("What colour is the car?", "blue", 4, ["D1:1"]),
    ("What colour is the boat?", "green", 4, ["D1:2", "D1:3"]),
    ("What is the cat's job?", None, 5, []),
]
ABSTAIN = "No information available"  # official: 1 for category 5; E-mem: 0 (no overlap with "Not mentioned ...")
CONTRACT_KEYS = {"split", "system", "questions", "f1", "evidence_recall", "segments_per_question",
                 "tokens_per_question", "latency_p50_ms", "latency_p95_ms"}


def _sample(sample_id: str, n_turns: int, qa: list[tuple]) -> dict:
    turns = [{"speaker": "Mel" if i % 2 else "Jon", "dia_id": f"D1:{i}", "text": f"turn {i} of {sample_id}"}
             for i in range(1, n_turns + 1)]
    items = []
    for question, answer, category, evidence in qa:
        item = {"question": question, "category": category, "evidence": evidence}
        if category == 5:
            item["adversarial_answer"] = "a tempting lie"
        else:
            item["answer"] = answer
        items.append(item)
    conversation = {"speaker_a": "Jon", "speaker_b": "Mel", "session_1_date_time": "1:56 pm on 8 May, 2023",
                    "session_1": turns}
    return {"sample_id": sample_id, "conversation": conversation, "qa": items}


@dataclass
class Log:
    ingests: list[str] = field(default_factory=list)
    asks: list[str] = field(default_factory=list)
    hints: list = field(default_factory=list)  # the kind hint each ask was given


@dataclass
class FakeAnswer:
    text: str
    evidence_turn_ids: list[str]
    routed_turn_ids: list[str]
    segments: int
    assistant_bill: TokenBill
    master_bill: TokenBill


class FakeSystem:
    """Right on even question positions (gold, or an abstention for category 5), "zzz" on odd ones.

    Routes the 1st and 3rd ingested turns, cites the 1st; 2 segments; fixed token bills.
    """

    def __init__(self, name: str, gold: dict[str, tuple[int, str, int]], log: Log) -> None:
        self.name, self.gold, self.log = name, gold, log
        self.turns = None

    def ingest(self, turns) -> None:
        assert self.turns is None, "a system serves one conversation"
        self.turns = list(turns)
        self.log.ingests.append(turns[0].conv_id)

    def ask(self, question: str, *, kind=None) -> FakeAnswer:
        position, answer, category = self.gold[question]
        self.log.asks.append(question)
        self.log.hints.append(kind)
        right = ABSTAIN if category == 5 else answer
        ids = [t.dia_id for t in self.turns]
        return FakeAnswer(right if position % 2 == 0 else "zzz", [ids[0]], [ids[0], ids[2]], 2,
                          TokenBill(10, 2, 1), TokenBill(5, 1, 1))


@pytest.fixture
def bench_env(tmp_path, monkeypatch):
    """A 2-conversation test-split file, a private cache dir, a fake factory and its call log."""
    data = tmp_path / "locomo.json"
    data.write_text(json.dumps([_sample("conv-48", 4, CONV_A), _sample("conv-49", 3, CONV_B)]))
    monkeypatch.setenv("ENGRAM_PATHS__CACHE_DIR", str(tmp_path / "cache"))
    gold = {q: (i, a or "", c) for qa in (CONV_A, CONV_B) for i, (q, a, c, _) in enumerate(qa)}
    log = Log()

    def factory(name, config, *, encoder, engine):
        assert encoder is None and engine is None
        return FakeSystem(name, gold, log)

    def run(*flags: str, system: str = "rag") -> dict:  # LoCoMo's labels unless the flags say otherwise
        mode = [] if "--category" in flags else ["--category", "gold"]
        argv = ["--data", str(data), "--results-dir", str(tmp_path / "results"), "--system", system, *mode, *flags]
        return locomo.main(argv, factory=factory)

    return run, log, tmp_path


def test_metrics_match_hand_computation(bench_env, capsys):
    run, log, _ = bench_env
    out = run()
    assert log.ingests == ["conv-48", "conv-49"]
    assert out["questions"] == 8
    # official: right = A0, A2, A4, B0, B2 (B2 abstains, category 5)
    assert out["f1"] == pytest.approx({"1": 1.0, "2": 0.0, "3": 1.0, "4": 2 / 3, "5": 0.5,
                                       "overall": 5 / 8, "overall_no5": 4 / 6})
    # E-mem scores "No information available" against "Not mentioned in the conversation": 0
    assert out["f1_emem"] == pytest.approx({"1": 1.0, "2": 0.0, "3": 1.0, "4": 2 / 3, "5": 0.0,
                                            "overall": 4 / 8, "overall_no5": 4 / 6})
    # routed {1st, 3rd turn}: A0 1/2, A1 1, A2 0, B0 1, B1 1/2 (A3 is category 5, A4 and B2 have no evidence)
    assert out["evidence_recall"] == pytest.approx(3 / 5)
    assert out["evidence_recall_questions"] == 5
    # cited {1st turn}: A0 1/2, A1 0, A2 0, B0 1, B1 0
    assert out["answer_evidence_recall"] == pytest.approx(1.5 / 5)
    # grouped by that: all B0 (right); some A0 (right); none A1, B1 (wrong), A2 (right)
    assert out["f1_by_evidence_read"] == {"all": {"questions": 1, "f1": 1.0}, "some": {"questions": 1, "f1": 1.0},
                                          "none": {"questions": 3, "f1": pytest.approx(1 / 3)}}
    assert out["segments_per_question"] == 2.0
    assert out["tokens_per_question"] == {"assistants": 12.0, "master": 6.0, "total": 18.0}
    assert 0 <= out["latency_p50_ms"] <= out["latency_p95_ms"]
    assert out["ingest_s_per_conversation"].keys() == {"conv-48", "conv-49"}

    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert CONTRACT_KEYS <= last.keys()
    assert last["split"] == "test" and last["system"] == "rag"
    assert set(last["f1"]) == {"1", "2", "3", "4", "5", "overall", "overall_no5"}
    assert set(last["tokens_per_question"]) == {"assistants", "master", "total"}


def test_resume_skips_answered_and_reingests_partial_conversation(bench_env):
    run, log, tmp_path = bench_env
    first = run()
    [cache] = (tmp_path / "cache" / "locomo").glob("rag-*.jsonl")
    lines = cache.read_text().splitlines()
    # drop conv-49's last answer and leave a half-written line, as a crash mid-write would
    last_b = max(i for i, line in enumerate(lines) if '"conv-49"' in line and '"question"' in line)
    cache.write_text("\n".join(lines[:last_b] + lines[last_b + 1:]) + '\n{"kind": "question", "conv_')
    log.ingests.clear()
    log.asks.clear()

    second = run()
    assert log.ingests == ["conv-49"]  # conv-48 is fully answered: not ingested again
    assert log.asks == [CONV_B[2][0]]
    for key in ("f1", "f1_emem", "evidence_recall", "segments_per_question", "tokens_per_question"):
        assert second[key] == first[key]

    log.ingests.clear()
    log.asks.clear()
    run()
    assert log.ingests == [] and log.asks == []

    run("--no-resume")
    assert log.ingests == ["conv-48", "conv-49"] and len(log.asks) == 8


def test_limit_is_per_conversation_and_deterministic(bench_env):
    run, log, _ = bench_env
    out = run("--limit", "2", "--no-resume")
    first_asks = list(log.asks)
    assert first_asks == [CONV_A[0][0], CONV_A[1][0], CONV_B[0][0], CONV_B[1][0]]
    assert out["questions"] == 4 and out["limit"] == 2
    log.asks.clear()
    run("--limit", "2", "--no-resume")
    assert log.asks == first_asks

    # categories filter first, then the limit: category 4 is A2 (of A), B0 and B1 (of B)
    log.asks.clear()
    out = run("--limit", "1", "--categories", "4", "--no-resume")
    assert log.asks == [CONV_A[2][0], CONV_B[0][0]]
    assert out["f1"]["4"] == 1.0 and out["f1"]["1"] is None and out["evidence_recall"] == pytest.approx(0.5)

    # a larger limit later reuses the cached answers and asks only the new ones
    log.asks.clear()
    log.ingests.clear()
    run("--limit", "2", "--categories", "4")
    assert log.asks == [CONV_B[1][0]] and log.ingests == ["conv-49"]


def test_several_systems_report_and_files(bench_env, capsys):
    run, log, tmp_path = bench_env
    out = run(system="engram,direct_read")
    assert [s["system"] for s in out["systems"]] == ["engram", "direct_read"]
    assert out["split"] == "test"
    for s in out["systems"]:
        assert CONTRACT_KEYS <= s.keys() and s["questions"] == 8
    assert len(log.ingests) == 4  # a fresh system per (system, conversation)
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == out

    folder = tmp_path / "results" / "locomo"
    table = (folder / "locomo-test.md").read_text()
    assert "| engram | 8 | 1.000 | 0.000 | 1.000 | 0.667 | 0.500 | 0.625 | 0.667 |" in table
    assert "| direct_read | 8 |" in table
    assert (folder / "locomo-test.png").stat().st_size > 0
    rows = [json.loads(x) for x in (folder / "locomo-test-engram.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and {"f1", "f1_emem", "evidence_recall", "prediction", "gold"} <= rows[0].keys()


def test_cache_file_is_per_system_and_config(bench_env, monkeypatch):
    run, _, tmp_path = bench_env
    cfg = load_config()
    base = locomo.config_hash(cfg, "engram", data_digest="d")
    assert locomo.config_hash(cfg, "rag", data_digest="d") != base
    assert locomo.config_hash(cfg, "engram", data_digest="e") != base
    changed = cfg.model_copy(update={"router": cfg.router.model_copy(update={"k_vec": cfg.router.k_vec + 1})})
    assert locomo.config_hash(changed, "engram", data_digest="d") != base
    moved = cfg.model_copy(update={"paths": cfg.paths.model_copy(update={"results_dir": tmp_path / "elsewhere"})})
    assert locomo.config_hash(moved, "engram", data_digest="d") == base
    unread = cfg.model_copy(update={"admission": cfg.admission.model_copy(update={"threshold": 0.25})})
    assert locomo.config_hash(unread, "engram", data_digest="d") == base  # no system reads admission

    run()
    monkeypatch.setenv("ENGRAM_ROUTER__K_VEC", "7")
    run()
    assert len(list((tmp_path / "cache" / "locomo").glob("rag-*.jsonl"))) == 2


def test_a_baseline_is_keyed_by_the_config_and_code_it_reads():
    from bench.systems import build_system

    cfg = load_config()
    key = {name: locomo.cache_key(cfg, name, build_system, data_digest="d", with_models=False)
           for name in ("engram", "rag", "full_context")}
    router = cfg.model_copy(update={"router": cfg.router.model_copy(update={"k_vec": cfg.router.k_vec + 1})})
    assert locomo.cache_key(router, "engram", build_system, data_digest="d", with_models=False) != key["engram"]
    assert locomo.cache_key(router, "rag", build_system, data_digest="d", with_models=False) == key["rag"]
    bm25 = cfg.model_copy(update={"router": cfg.router.model_copy(update={"bm25_k1": cfg.router.bm25_k1 + 0.1})})
    assert locomo.cache_key(bm25, "rag", build_system, data_digest="d", with_models=False) != key["rag"]
    assert locomo.cache_key(bm25, "full_context", build_system, data_digest="d", with_models=False) == \
        key["full_context"]
    master = cfg.model_copy(update={"episodic": cfg.episodic.model_copy(update={"master_evidence": 3})})
    assert locomo.cache_key(master, "full_context", build_system, data_digest="d", with_models=False) != \
        key["full_context"]
    # the sources: rag's module and what it imports, not engram's router or read path
    rag_files = {str(p.relative_to(locomo.REPO_ROOT)) for p in locomo.source_files(build_system.__module__ + ".rag")}
    assert {"bench/systems/rag.py", "memory/bm25.py", "inference/master.py"} <= rag_files
    assert not rag_files & {"memory/routing.py", "pipeline/read_path.py", "bench/systems/engram.py"}


def test_answers_dir_keeps_the_answers_where_it_says(bench_env):
    run, log, tmp_path = bench_env
    out = run("--answers-dir", str(tmp_path / "kept"))
    assert out["cache"].startswith(str(tmp_path / "kept")) and len(log.ingests) == 2
    run("--answers-dir", str(tmp_path / "kept"))
    assert len(log.ingests) == 2  # resumed from there: nothing asked again


def test_select_questions_keeps_file_indices(bench_env):
    _, _, tmp_path = bench_env
    [conv, _] = load_locomo(tmp_path / "locomo.json")
    assert [i for i, _ in locomo.select_questions(conv, [3, 5], None)] == [3, 4]
    assert [i for i, _ in locomo.select_questions(conv, [1, 2, 3, 4, 5], 3)] == [0, 1, 2]
    [other] = [c for c in load_locomo(tmp_path / "locomo.json") if c is not conv and c.sample_id != conv.sample_id]
    cats = [q.category for q in other.questions]
    assert len(set(cats)) < len(cats)  # B repeats a category, so one per category drops questions
    picked = locomo.select_questions(other, [1, 2, 3, 4, 5], None, per_category=1)
    assert [i for i, _ in picked] == sorted({cats.index(c) for c in set(cats)})  # the first of each category
    assert len(locomo.select_questions(other, [1, 2, 3, 4, 5], 1, per_category=1)) == 1


@pytest.mark.parametrize("flags", [["--system", "gpt"], ["--categories", "6"], ["--limit", "0"],
                                   ["--per-category", "0"], ["--bogus"]])
def test_bad_flags_are_errors(bench_env, flags):
    run, _, _ = bench_env
    with pytest.raises(SystemExit):
        run(*flags)


def test_source_digest_covers_project_modules_only():
    digest = locomo.source_digest(locomo.main)  # bench/locomo.py and the project modules it imports from
    assert len(digest) == 64 and digest == locomo.source_digest(locomo.summarise)
    assert locomo.source_digest(len) == ""  # no project source behind a builtin


def test_source_digest_leaves_the_config_tree_out(monkeypatch):
    from bench.systems import build_system

    digest = locomo.source_digest(build_system)  # bench/systems/__init__.py imports core.config directly
    monkeypatch.setattr(locomo, "VALUES_ONLY_PREFIXES", ())
    assert locomo.source_digest(build_system) != digest


def test_source_files_follow_imports_through_the_project():
    from bench.systems import build_system

    files = {str(p.relative_to(locomo.REPO_ROOT)) for p in locomo.source_files(build_system)}
    # the read path the service runs, and what it imports in turn (master -> its prompts; shards -> cores)
    assert {"bench/systems/engram.py", "pipeline/read_path.py", "inference/master.py", "cores/tenant_assistants.py",
            "inference/assistant.py", "memory/segmenter.py", "core/evidence.py"} <= files
    assert not any(f.startswith("core/config/") for f in files)
    with_models = locomo.code_digest_of(build_system)
    assert with_models != locomo.code_digest_of(build_system, with_models=False)  # the engine's source counts


def test_predicted_categories_never_pass_gold_labels_to_the_system(bench_env):
    run, log, tmp_path = bench_env
    out = run("--category", "predicted")
    assert out["questions"] == 8 and out["category"] == "predicted"
    assert log.hints == [None] * 8  # no hint: the master reads the question
    run("--category", "gold")
    assert set(log.hints[8:]) == {"list", "temporal", "inference", "fact", None}  # category 5: no hint
    assert len(list((tmp_path / "cache" / "locomo").glob("rag-*.jsonl"))) == 2  # one cache per mode


def test_dev_split_is_train_conversations_with_five_questions_per_category(bench_env, tmp_path):
    _, log, _ = bench_env
    qa = [(f"Question {i}?", "x", 1 + i % 2, []) for i in range(14)]  # 7 of category 1, 7 of category 2
    data = tmp_path / "train.json"
    data.write_text(json.dumps([_sample("conv-26", 3, qa), _sample("conv-48", 3, qa)]))
    gold = {q: (i, a, c) for i, (q, a, c, _) in enumerate(qa)}

    def factory(name, config, *, encoder, engine):
        return FakeSystem(name, gold, log)

    out = locomo.main(["--data", str(data), "--results-dir", str(tmp_path / "results"), "--system", "rag",
                       "--split", "dev"], factory=factory)
    assert log.ingests == ["conv-26"]  # the test split's conversation is never read
    assert log.asks == [q for q, *_ in qa[:10]]  # file order: the first five of each category
    assert out["questions"] == 10 and out["per_category"] == locomo.DEV_PER_CATEGORY == 5


def test_systems_with_the_same_ingest_key_ingest_each_conversation_once(tmp_path, monkeypatch) -> None:
    data = tmp_path / "locomo.json"
    data.write_text(json.dumps([_sample("conv-48", 4, CONV_A), _sample("conv-49", 3, CONV_B)]))
    monkeypatch.setenv("ENGRAM_PATHS__CACHE_DIR", str(tmp_path / "cache"))
    gold = {q: (i, a or "", c) for qa in (CONV_A, CONV_B) for i, (q, a, c, _) in enumerate(qa)}
    log = Log()

    class Sharing(FakeSystem):
        ingest_key = "same-write-path"

        def share_ingest(self, other: FakeSystem) -> None:
            self.turns = other.turns

    def factory(name, config, *, encoder, engine):
        return (Sharing if name in ("engram", "direct_read") else FakeSystem)(name, gold, log)

    out = locomo.main(["--data", str(data), "--results-dir", str(tmp_path / "results"), "--category", "gold",
                       "--system", "engram,direct_read,rag"], factory=factory)
    assert log.ingests == ["conv-48", "conv-49", "conv-48", "conv-49"]  # engram's two, then rag's own two
    by_name = {s["system"]: s for s in out["systems"]}
    assert by_name["direct_read"]["f1"] == by_name["engram"]["f1"]  # it read what engram ingested
    assert by_name["direct_read"]["ingest_s"] == pytest.approx(by_name["engram"]["ingest_s"])


def test_models_load_only_the_engines_of_the_roles_a_system_calls(monkeypatch):
    import serve.embedder
    import serve.engine
    from bench.systems import build_system

    built = []
    monkeypatch.setattr(serve.engine, "build_engine", lambda ecfg: built.append(ecfg.model) or ecfg.model)
    monkeypatch.setattr(serve.embedder, "Embedder", lambda cfg: "encoder")
    cfg = load_config("cpu-quality")  # three models: assistant, master, summary
    models = locomo._Models(cfg, None, None, load=True)
    assert locomo.system_roles(build_system, "full_context") == ("master",)
    _, engine = models.get(locomo.system_roles(build_system, "full_context"))
    assert built == [cfg.model_for("master")] and set(engine) == {"master"}
    _, engine = models.get(locomo.system_roles(build_system, "engram"))
    assert sorted(built) == sorted({cfg.model_for(r) for r in ("assistant", "master", "summary")})  # once each
    assert engine["master"] == cfg.model_for("master") and set(engine) >= {"assistant", "master", "summary"}
