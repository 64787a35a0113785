"""Episodic memory on LoCoMo: engram, RAG, full context and direct read in one harness.

For each conversation of the split a fresh system is built by the factory (one encoder and one
engine shared by the whole run), the conversation's turns are ingested (timed) and every selected
question is asked (each ``ask`` timed). Answers are scored with the official LoCoMo scorer and,
as a second column, with E-mem's variant (``bench.locomo_score``).

Selection: ``--categories`` first, then ``--per-category N`` keeps the first N questions of each category of each
conversation, then ``--limit N`` keeps the first N remaining questions of *each* conversation in file order (so
every conversation of the split contributes, and the same flags always pick the same questions). A question is
keyed by its index in its conversation's ``qa`` list, which does not depend on the flags. ``--split dev`` is the dev
set: the train conversations with ``--per-category 5`` (:data:`DEV_PER_CATEGORY`), the questions read-path changes are
tuned on (its answers share the train split's cache).

Categories: ``--category predicted`` (the default; the headline tables) asks every question without a kind hint,
as a user of ``/v1/ask`` would: the master reads the kind from the question (``inference.question_kind``).
``--category gold`` sends LoCoMo's category as the kind hint (``bench.common.LOCOMO_KINDS``; category 5 gets
none). The mode is part of the cache key.

Resume: every answer is appended (and flushed) to
``<cache_dir>/locomo/<system>-<hash>.jsonl``; a rerun skips answered questions. Systems are
in-memory, so a conversation with any unanswered question is ingested again from scratch; a
fully answered one is not. The hash (:func:`cache_key`) covers the config values the system reads (engram: the
tree but :data:`UNREAD_SECTIONS`; a baseline: the sections and fields its class names), the engine config, the
system and model names, the data file's bytes and the source of the system's module, of the engine and embedder
modules, and of every project module those import, directly or not (:func:`source_digest`). The config tree's
source is left out (its effect is the values), so edits there, and edits to code or settings a system does not
read, keep its cache. ``--answers-dir bench/answers`` keeps the answers with the repository (a whole-split run of
a baseline takes hours on a laptop's CPU: it resumes on the next machine from the committed rows).

Metrics (:func:`summarise`): official F1 per category, overall (micro) and without category 5;
``f1_emem`` the same with E-mem's scorer; ``evidence_recall`` = mean over questions of categories
1–4 with non-empty evidence of |evidence ∩ routed_turn_ids| / |evidence| (category 5 is left out:
its evidence supports the adversarial premise, not an answer); ``segments_per_question``;
``tokens_per_question`` (prompt + completion, assistants and master, mean per question);
``latency_p50_ms`` / ``latency_p95_ms`` per ``ask``. Cached rows from earlier runs count too:
their numbers were measured when they were answered.

    python -m bench.locomo --system engram --limit 20            # test split, 20 questions per conversation
    python -m bench.locomo --system engram,rag,full_context,direct_read --split train --categories 1,2,4
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import inspect
import json
import math
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from tqdm import tqdm

from bench.common import emit_json, locomo_kind, parse_int_list, percentiles_ms, read_jsonl, setup_logging
from bench.locomo_report import write_report
from bench.locomo_score import CATEGORIES, aggregate, emem_f1, official_f1
from core.config import REPO_ROOT, ROLES, EngramConfig, load_config
from core.generation import TokenBill
from corpora.locomo import (
    DEV_PER_CATEGORY,
    SPLITS,
    Conversation,
    Question,
    Turn,
    load_locomo,
    select_questions,
    split,
)
from inference.question_kind import QuestionKind

SYSTEMS = ("engram", "rag", "full_context", "direct_read")
RECALL_CATEGORIES = (1, 2, 3, 4)  # evidence recall leaves category 5 (adversarial) out
HASH_LENGTH = 12
PACKAGES = ("core", "memory", "inference", "cores", "pipeline", "actors", "serve", "corpora", "cluster", "training",
            "bench", "tests")  # whose sources the cache key may cover
# Config sections no system of this harness reads (nor where outputs go): out of the key, so cached answers
# survive edits there. NOTE: a system that starts reading one of them must take it out of this set.
UNREAD_SECTIONS = frozenset({"paths", "profile", "data", "admission", "tiers", "auth"})
# Project modules that act on answers only through values config_hash already covers (the config tree).
VALUES_ONLY_PREFIXES = ("core/config/",)


class AnswerLike(Protocol):
    """What ``ask`` returns (``bench.systems.Answer``); turn ids are LoCoMo ``dia_id`` strings."""

    text: str
    evidence_turn_ids: list[str]  # turns the answer was built from
    routed_turn_ids: list[str]  # every turn in the activated segments / retrieved turns / context window
    segments: int  # segments activated (0 for systems without segments)
    assistant_bill: TokenBill  # evidence-extraction calls
    master_bill: TokenBill  # answering call(s)


class QASystem(Protocol):
    """One conversation's memory: ``ingest`` the turns once, in stream order, then ``ask`` questions.

    A fresh system serves one conversation; ``kind`` is the question's kind hint (``None``: the master predicts it).
    """

    name: str

    def ingest(self, turns: list[Turn]) -> None: ...

    def ask(self, question: str, *, kind: QuestionKind | None = None) -> AnswerLike: ...


# build_system(name, config, *, encoder, engine) -> QASystem, as bench.systems.build_system.
SystemFactory = Callable[..., QASystem]
CATEGORY_MODES = ("predicted", "gold")
SPLIT_CHOICES = (*SPLITS, "dev")


# -- selection and cache ---------------------------------------------------------------------
def file_digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _module_file(name: str) -> Path | None:
    """The source file of project module ``name`` (None outside the project's packages, or not a module)."""
    if name.split(".")[0] not in PACKAGES:
        return None
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    origin = getattr(spec, "origin", None)
    if not origin or not origin.endswith(".py"):
        return None
    path = Path(origin).resolve()
    # NOTE: the virtualenv may live inside the repository: only the project's own packages count.
    return path if path.is_relative_to(REPO_ROOT) and path.relative_to(REPO_ROOT).parts[0] in PACKAGES else None


def _imports(path: Path) -> set[str]:
    """Project modules that ``path`` imports (at the top or in a function): ``from a.b import c`` names ``a.b``
    and, when it is a module, ``a.b.c``."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return {m for m in out if m.split(".")[0] in PACKAGES}


def source_files(*objs: Any) -> list[Path]:
    """The project source files behind ``objs`` (objects, or module names): their modules and every project
    module those import, directly or not, except :data:`VALUES_ONLY_PREFIXES` (the config tree: its effect is
    its values)."""
    todo = [obj if isinstance(obj, str) else getattr(inspect.getmodule(inspect.unwrap(obj)), "__name__", "")
            for obj in objs]
    seen: set[str] = set()
    files: set[Path] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = _module_file(name)
        if path is None:
            continue
        if not str(path.relative_to(REPO_ROOT)).startswith(VALUES_ONLY_PREFIXES):
            files.add(path)
        todo.extend(_imports(path) - seen)
    return sorted(files)


def source_digest(*objs: Any) -> str:
    """sha256 over :func:`source_files` of ``objs`` (for ``bench.systems.build_system`` and the engine: the
    pipelines, the cores and their prompts, the router, the segmenter, the engine). "" when none is project
    code."""
    files = source_files(*objs)
    if not files:
        return ""
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(REPO_ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def code_digest_of(factory: Any, *, with_models: bool = True) -> str:
    """:func:`source_digest` of a system factory, with the engine's and embedder's modules when the harness loads
    the models (an injected factory brings its own)."""
    return source_digest(factory, "serve.engine", "serve.embedder") if with_models else source_digest(factory)


def engine_config(cfg: EngramConfig):
    """``cfg.engine`` when the tree has it, else the engine section's defaults."""
    found = getattr(cfg, "engine", None)
    if found is not None:
        return found
    from core.config import EngineConfig

    return EngineConfig()


def config_view(cfg: EngramConfig, reads: Mapping[str, Sequence[str] | None] | None = None) -> dict:
    """The config values a system reads: with ``reads`` (a system's ``config_reads``) those sections, or those
    fields of them; without, the whole tree but :data:`UNREAD_SECTIONS`."""
    if reads is None:
        return cfg.model_dump(mode="json", exclude=set(UNREAD_SECTIONS))
    view = {}
    for section, fields in sorted(reads.items()):
        values = getattr(cfg, section).model_dump(mode="json")
        view[section] = values if fields is None else {f: values[f] for f in fields}
    return view


def config_hash(cfg: EngramConfig, system: str, *, data_digest: str, code_digest: str = "",
                category: str = "gold", reads: Mapping[str, Sequence[str] | None] | None = None) -> str:
    """Short hash of everything that changes answers (where outputs go does not); ``reads``: :func:`config_view`."""
    tree = config_view(cfg, reads)
    engine = engine_config(cfg).model_dump(mode="json")
    engine.pop("cache_dir", None)
    tree["engine"] = engine
    key = {"config": tree, "system": system, "embedder_model": cfg.embedder.model, "engine_model": engine.get("model"),
           "data": data_digest, "code": code_digest, **({"category": category} if category != "gold" else {})}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:HASH_LENGTH]


def system_class(factory: Any, name: str) -> type | None:
    """The class ``bench.systems.build_system`` builds for ``name``; None for another factory."""
    from bench.systems import SYSTEM_CLASSES, build_system

    return SYSTEM_CLASSES.get(name) if factory is build_system else None


def system_roles(factory: Any, name: str) -> tuple[str, ...]:
    """The roles whose engines ``name`` calls (``bench.systems.SYSTEM_ROLES``); all for another factory."""
    from bench.systems import SYSTEM_ROLES

    return SYSTEM_ROLES.get(name, ROLES) if system_class(factory, name) is not None else ROLES


def cache_key(cfg: EngramConfig, system: str, factory: Any, *, data_digest: str, category: str = "gold",
              with_models: bool = True, label: str | None = None) -> str:
    """:func:`config_hash` of ``system`` answered through ``factory``. For ``bench.systems.build_system`` the key
    covers the system's own class (its module and what that imports) and the config it reads (``config_reads``),
    so an edit to engram's router keeps the baselines' answers; an injected factory is hashed whole. ``label``
    names the answers in the key (default ``system``)."""
    cls = system_class(factory, system)
    return config_hash(cfg, label or system, data_digest=data_digest,
                       code_digest=code_digest_of(cls or factory, with_models=with_models), category=category,
                       reads=getattr(cls, "config_reads", None))


def add_answers_dir(parser: argparse.ArgumentParser) -> None:
    """The ``--answers-dir`` flag of the tools that cache answers in :func:`cache_file`."""
    parser.add_argument("--answers-dir", type=Path, default=None,
                        help="where answers are cached (default <paths.cache_dir>/locomo); bench/answers keeps "
                        "those behind docs' tables with the repository, so a long run resumes on another machine")


def cache_file(cfg: EngramConfig, system: str, digest: str, answers_dir: Path | None = None) -> Path:
    """Where ``system``'s answers for the settings hashed to ``digest`` (:func:`config_hash`) are cached:
    ``answers_dir`` or ``<paths.cache_dir>/locomo``."""
    return (answers_dir or cfg.paths.cache_dir / "locomo") / f"{system}-{digest}.jsonl"


class ResultCache:
    """Append-only JSONL of ``question`` and ``ingest`` rows; the last row for a key wins."""

    def __init__(self, path: Path, *, resume: bool = True) -> None:
        self.path = path
        self.questions: dict[tuple[str, int], dict] = {}
        self.ingests: dict[str, dict] = {}
        path.parent.mkdir(parents=True, exist_ok=True)
        if not resume:
            path.write_text("")
        else:
            for row in read_jsonl(path):
                self._keep(row)

    def _keep(self, row: dict) -> None:
        if row.get("kind") == "question":
            self.questions[(row["conv_id"], int(row["q_index"]))] = row
        elif row.get("kind") == "ingest":
            self.ingests[row["conv_id"]] = row

    def answered(self, conv_id: str, index: int, question: Question) -> dict | None:
        row = self.questions.get((conv_id, index))
        return row if row is not None and row.get("question") == question.question else None

    def append(self, row: dict) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()
        self._keep(row)


# -- rows and metrics ------------------------------------------------------------------------
def _bill(bill: TokenBill) -> dict[str, int]:
    return {"prompt": int(bill.prompt_tokens), "completion": int(bill.completion_tokens), "calls": int(bill.calls)}


def answer_row(system: str, index: int, q: Question, answer: AnswerLike, latency_s: float) -> dict:
    """The cached record of one answered question (scores are computed later, from ``prediction``)."""
    return {
        "kind": "question", "system": system, "conv_id": q.conv_id, "q_index": index, "category": q.category,
        "question": q.question, "gold": q.answer, "adversarial": q.adversarial, "evidence": list(q.evidence),
        "prediction": answer.text, "evidence_turn_ids": list(answer.evidence_turn_ids),
        "routed_turn_ids": list(answer.routed_turn_ids), "segments": int(answer.segments),
        "assistant_bill": _bill(answer.assistant_bill), "master_bill": _bill(answer.master_bill),
        "latency_s": latency_s,
        # what the assistants offered the master, (turn id, score) in routing order: bench.master_context replays
        # the master's selection from it (absent for systems without assistants)
        **({"offered": [[t, float(s)] for t, s in answer.offered]} if getattr(answer, "offered", None) else {}),
    }


def coverage(evidence: Sequence[str], turn_ids: Sequence[str]) -> float | None:
    """|evidence ∩ turn_ids| / |evidence|; None without evidence: ``coverage(["D1:1", "D1:2"], ["D1:1"]) == 0.5``"""
    gold = set(evidence)
    return len(gold & set(turn_ids)) / len(gold) if gold else None


def score_row(row: dict) -> dict:
    """``row`` plus its official and E-mem F1 and its routing / answer evidence recall."""
    cat = int(row["category"])
    recall_ok = cat in RECALL_CATEGORIES
    return {
        **row,
        "f1": official_f1(row["prediction"], row["gold"], cat),
        "f1_emem": emem_f1(row["prediction"], row["gold"], cat),
        "evidence_recall": coverage(row["evidence"], row["routed_turn_ids"]) if recall_ok else None,
        "answer_evidence_recall": coverage(row["evidence"], row["evidence_turn_ids"]) if recall_ok else None,
    }


def _finite(x: float) -> float | None:
    return None if x is None or math.isnan(x) else float(x)


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if len(values) else None


def _f1_block(rows: Sequence[dict], key: str) -> dict[str, float | None]:
    s = aggregate((r["category"], r[key]) for r in rows)
    block = {str(c): _finite(s.per_category.get(c, float("nan"))) for c in CATEGORIES}
    block.update(overall=_finite(s.overall), overall_no5=_finite(s.overall_without_adversarial))
    return block


def summarise(rows: Sequence[dict], *, split_name: str, system: str) -> dict:
    """BENCH.md's object for one system from scored rows (:func:`score_row`); null where nothing was measured."""
    assistants = [r["assistant_bill"]["prompt"] + r["assistant_bill"]["completion"] for r in rows]
    master = [r["master_bill"]["prompt"] + r["master_bill"]["completion"] for r in rows]
    latency = percentiles_ms([r["latency_s"] for r in rows])
    recall = [r["evidence_recall"] for r in rows if r["evidence_recall"] is not None]
    answer_recall = [r["answer_evidence_recall"] for r in rows if r["answer_evidence_recall"] is not None]
    return {
        "split": split_name, "system": system, "questions": len(rows),
        "f1": _f1_block(rows, "f1"),
        "f1_emem": _f1_block(rows, "f1_emem"),
        "evidence_recall": _mean(recall),
        "evidence_recall_questions": len(recall),
        "answer_evidence_recall": _mean(answer_recall),
        "segments_per_question": _mean([r["segments"] for r in rows]),
        "tokens_per_question": {
            "assistants": _mean(assistants), "master": _mean(master),
            "total": _mean([a + m for a, m in zip(assistants, master, strict=True)]),
        },
        "latency_p50_ms": _finite(latency["p50"]), "latency_p95_ms": _finite(latency["p95"]),
        "counts": {str(c): sum(r["category"] == c for r in rows) for c in CATEGORIES},
        "f1_by_evidence_read": f1_by_evidence_read(rows),
    }


def f1_by_evidence_read(rows: Sequence[dict]) -> dict[str, dict[str, float | int | None]]:
    """Official F1 of the category 1-4 questions grouped by how much of their evidence the answerer read
    (``answer_evidence_recall``): ``all`` (= 1), ``some`` and ``none`` (= 0), each ``{"questions", "f1"}``.
    How far answers move with the evidence suggests how much better memory (admission, routing) can gain."""
    groups: dict[str, list[float]] = {"all": [], "some": [], "none": []}
    for r in rows:
        recall = r["answer_evidence_recall"]
        if recall is not None:
            groups["all" if recall >= 1.0 else "none" if recall <= 0.0 else "some"].append(r["f1"])
    return {k: {"questions": len(v), "f1": _mean(v)} for k, v in groups.items()}


# -- the run ---------------------------------------------------------------------------------
class _Models:
    """Encoder and engines (one per distinct model of the roles), loaded on first use, so that a fully cached run
    loads no model, and only those of the roles a system reads (a baseline loads the master's engine alone).
    ``engine`` is what the systems get: one engine for all roles, or ``{role: engine}``."""

    def __init__(self, cfg: EngramConfig, encoder: Any, engine: Any, *, load: bool) -> None:
        self.cfg, self.encoder, self.engine, self.load = cfg, encoder, engine, load
        self.build_engines = load and engine is None  # NOTE: an engine given is used as given
        self.owned: list[Any] = []

    def get(self, roles: Collection[str] = ROLES) -> tuple[Any, Any]:
        if not self.load:
            return self.encoder, self.engine
        from serve.embedder import Embedder
        from serve.engine import build_engine

        if self.encoder is None:
            self.encoder = Embedder(self.cfg.embedder)
        if self.build_engines:
            if self.engine is None:
                self.engine = {}
            for ecfg, group in self.cfg.engine_groups():  # NOTE: one engine per group, as the service's pools
                if set(group) & set(roles) and not set(group) <= self.engine.keys():
                    if ecfg.cache_dir is None:
                        ecfg = ecfg.model_copy(update={"cache_dir": str(self.cfg.paths.cache_dir)})
                    engine = build_engine(ecfg)
                    self.owned.append(engine)
                    self.engine.update(dict.fromkeys(group, engine))
        return self.encoder, self.engine

    def close(self) -> None:
        for engine in self.owned:
            engine.close()


def run_system(name: str, convs: Sequence[Conversation], selection: dict[str, list[tuple[int, Question]]],
               cfg: EngramConfig, factory: SystemFactory, models: _Models, cache: ResultCache,
               category: str = "gold", ingested: dict[tuple[str, str], Any] | None = None) -> None:
    """Answer every selected question not yet in ``cache``; fresh system and ingest per such conversation.

    ``ingested`` (kept by the caller across systems): conversations already ingested by a system with the same
    ``ingest_key`` (engram and direct_read), which a later one reads through ``share_ingest`` instead of ingesting
    again; its ingest row then repeats the first one's seconds, marked ``shared_from``."""
    total = sum(len(v) for v in selection.values())
    done = sum(cache.answered(c.sample_id, i, q) is not None for c in convs for i, q in selection[c.sample_id])
    bar = tqdm(total=total, initial=done, desc=name, unit="q")
    for conv in convs:
        todo = [(i, q) for i, q in selection[conv.sample_id] if cache.answered(conv.sample_id, i, q) is None]
        if not todo:
            continue
        encoder, engine = models.get(system_roles(factory, name))
        system = factory(name, cfg, encoder=encoder, engine=engine)
        key = getattr(system, "ingest_key", None)
        prior = ingested.get((conv.sample_id, key)) if ingested is not None and key else None
        row = {"kind": "ingest", "conv_id": conv.sample_id, "turns": len(conv.turns)}
        if prior is not None:
            first, row["seconds"] = prior
            system.share_ingest(first)
            row["shared_from"] = first.name
        else:
            bar.set_postfix_str(f"{conv.sample_id} ingest")
            start = time.perf_counter()
            system.ingest(list(conv.turns))
            row["seconds"] = time.perf_counter() - start
            if ingested is not None and key:
                ingested[(conv.sample_id, key)] = (system, row["seconds"])
        cache.append(row)
        bar.set_postfix_str(conv.sample_id)
        for index, q in todo:
            start = time.perf_counter()
            # predicted: as /v1/ask without a hint, the master reads the kind from the question
            answer = system.ask(q.question, kind=locomo_kind(q.category) if category == "gold" else None)
            cache.append(answer_row(name, index, q, answer, time.perf_counter() - start))
            bar.update()
        if callable(getattr(system, "close", None)):
            system.close()
    bar.close()


def categories_arg(parser: argparse.ArgumentParser, text: str) -> list[int]:
    """``--categories`` as sorted distinct categories; a parser error (exit 2) unless they are within 1-5."""
    try:
        categories = sorted(set(parse_int_list(text)))
    except ValueError as exc:
        parser.error(f"--categories: {exc}")
    if not set(categories) <= set(CATEGORIES):
        parser.error(f"--categories must be within {CATEGORIES}")
    return categories


def positive_counts(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--limit`` and ``--per-category``, when given, must be positive (else the parser's usage error)."""
    for flag, value in (("--limit", args.limit), ("--per-category", args.per_category)):
        if value is not None and value <= 0:
            parser.error(f"{flag} must be a positive integer")


def main(argv: list[str] | None = None, *, factory: SystemFactory | None = None, encoder: Any = None,
         engine: Any = None) -> dict:
    """Run the benchmark. ``factory`` replaces ``bench.systems.build_system`` (tests pass a fake);
    models are loaded (lazily) only when no factory is given: an injected one gets ``encoder``/``engine``."""
    parser = argparse.ArgumentParser(description="Episodic memory systems on LoCoMo (official F1).")
    parser.add_argument("--data", type=Path, default=None, help="locomo10.json (default: config data.locomo_path)")
    parser.add_argument("--split", choices=SPLIT_CHOICES, default="test",
                        help=f"train (conv 1-7), test (8-10), all, or dev: train with --per-category "
                        f"{DEV_PER_CATEGORY} unless given")
    parser.add_argument("--system", default="engram", help=f"one of {', '.join(SYSTEMS)} or a comma list")
    parser.add_argument("--limit", type=int, default=None,
                        help="first N selected questions of each conversation, in file order (default: all)")
    parser.add_argument("--categories", default="1,2,3,4,5", help="comma list of categories 1-5 (default all)")
    parser.add_argument("--per-category", type=int, default=None,
                        help="first N questions of each category of each conversation, in file order (default: all)")
    parser.add_argument("--category", choices=CATEGORY_MODES, default="predicted",
                        help="predicted: the master reads the question's kind from its words (what /v1/ask does "
                        "without a kind hint; the headline tables); gold: LoCoMo's labels as kind hints")
    parser.add_argument("--profile", default=None, help="config profile (default: $ENGRAM_PROFILE or cpu)")
    parser.add_argument("--results-dir", type=Path, default=None, help="where tables and plots go")
    parser.add_argument("--no-resume", action="store_true", help="discard cached answers of these settings")
    add_answers_dir(parser)
    args = parser.parse_args(argv)

    systems = list(dict.fromkeys(s.strip() for s in args.system.split(",") if s.strip()))
    unknown = [s for s in systems if s not in SYSTEMS]
    if not systems or unknown:
        parser.error(f"--system: unknown {unknown or 'empty'}; known: {', '.join(SYSTEMS)}")
    categories = categories_arg(parser, args.categories)
    positive_counts(parser, args)

    setup_logging()
    cfg = load_config(args.profile)
    data = args.data or cfg.data.locomo_path
    convs = split(load_locomo(data), "train" if args.split == "dev" else args.split)
    if args.split == "dev" and args.per_category is None:
        args.per_category = DEV_PER_CATEGORY
    selection = {c.sample_id: select_questions(c, categories, args.limit, args.per_category) for c in convs}
    load_models = factory is None  # NOTE: an injected factory runs with the encoder/engine given (or None)
    if factory is None:
        from bench.systems import build_system

        factory = build_system
    models = _Models(cfg, encoder, engine, load=load_models)
    data_digest = file_digest(data)

    summaries, scored = [], {}
    ingested: dict[tuple[str, str], Any] = {}  # NOTE: engram's ingest serves direct_read too (same write path)
    try:
        for name in systems:
            digest = cache_key(cfg, name, factory, data_digest=data_digest, category=args.category,
                               with_models=load_models)
            cache = ResultCache(cache_file(cfg, name, digest, args.answers_dir), resume=not args.no_resume)
            run_system(name, convs, selection, cfg, factory, models, cache, args.category, ingested)
            rows = [score_row(cache.answered(c.sample_id, i, q)) for c in convs for i, q in selection[c.sample_id]]
            ingest = {c.sample_id: cache.ingests[c.sample_id]["seconds"] for c in convs if c.sample_id in cache.ingests}
            summary = summarise(rows, split_name=args.split, system=name)
            summary.update(config_hash=digest, cache=str(cache.path), conversations=len(convs),
                           ingest_s=sum(ingest.values()), ingest_s_per_conversation=ingest,
                           categories=categories, limit=args.limit, per_category=args.per_category,
                           category=args.category)
            summaries.append(summary)
            scored[name] = rows
    finally:
        models.close()

    write_report(summaries, scored, split_name=args.split, out_dir=(args.results_dir or cfg.paths.results_dir))
    out = summaries[0] if len(summaries) == 1 else {"split": args.split, "systems": summaries}
    emit_json(out)
    return out


if __name__ == "__main__":
    main()
