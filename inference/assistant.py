"""Assistants (E-mem): many raw episodic segments per host, re-read by a small model on demand.

An ``AssistantHost`` keeps segments verbatim (one "assistant" per segment) and, for a batch of
(segment, question) queries, selects the lines that hold the evidence. Two methods
(``episodic.extraction``):

- ``likelihood`` (default): the segment's lines are ranked by the router's cosine for each line
  (``Activation.line_scores``) plus the idf-weighted share of the question's terms they contain;
  (a question naming exactly one of the segment's speakers takes ``speaker_prior`` off the other
  speakers' lines); the best ``shortlist`` lines are re-read by the small model, which scores each by how likely
  the question is after the line (mean log-probability of the question's tokens, one scoring
  pass, no generation: query likelihood). A line's evidence score is the sum of both signals,
  each standardised over all of the question's candidates (:func:`fuse`: the read path fuses the
  candidates of every assistant actor together, so that an answer does not depend on which actor
  holds which segment; the idf comes with the query from the router, over the user's whole
  memory, for the same reason). On LoCoMo's train split with SmolLM2-135M, this keeps more gold
  evidence than either signal alone and than the model choosing line numbers
  (docs/results/2026-11-30-episodic.md).
- ``choose`` (E-mem's way, for larger models): the engine is asked which numbered lines hold the
  evidence. The answer is valid by construction: with a regex-capable engine (vLLM) the output
  is constrained to a comma list of the segment's own line numbers or ``none``; otherwise the
  engine scores every line number as a choice and the best-scored ones (those above ``none``)
  are taken.

Either way evidence is returned verbatim with its timestamp and turn id — never paraphrased —
and all requests of one call go to the engine as one batch.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, KeysView, Mapping, Sequence
from dataclasses import replace
from typing import Literal, NamedTuple

import numpy as np

from core.evidence import Evidence
from core.generation import GenerationEngine, GenerationRequest, TokenBill
from memory.segmenter import Segment, line_speaker, named_speaker

NONE = "none"
EXTRACT_SYSTEM = "You find the lines of a conversation log that answer a question. You only reply with line numbers."
# NOTE: compared on LoCoMo's train split with "Conversation line: {line}\nA question about this line:" and with
# the line without its date: the same evidence recall within noise, and the shortest prompt costs least
# (docs/results/2026-11-30-episodic.md).
LIKELIHOOD_PROMPT = "{line}\nQuestion:"
Method = Literal["likelihood", "choose"]


class SegmentQuery(NamedTuple):
    """One segment to re-read for one question; ``line_scores``: the router's cosine per line, or empty;
    ``idf``: the question terms' idf over the user's memory (the router's), or None for the held lines' own."""

    segment_id: int
    question: str
    line_scores: Sequence[float] = ()
    idf: Mapping[str, float] | None = None


def words(text: str) -> list[str]:
    """Lower-case word tokens (the lexical signal's default terms)."""
    return re.findall(r"\w+", text.lower())


def _mean(logprobs: Sequence[float] | None) -> float:
    return float(np.mean(logprobs)) if logprobs else 0.0


def _standardise(x: np.ndarray) -> np.ndarray:
    std = float(x.std()) if len(x) else 0.0
    return (x - x.mean()) / std if std > 0 else np.zeros_like(x)


def fuse(groups: Sequence[Sequence[Evidence]], most: int) -> list[list[Evidence]]:
    """One question's candidates (a group per segment, in line order) -> its evidence: each raw signal is
    standardised over *all* candidates that carry signals, their sum is the score, and each group keeps its
    ``most`` best lines, still in line order. Evidence without signals (the ``choose`` method) passes unchanged."""
    scored = [e for group in groups for e in group if e.signals]
    if not scored:
        return [list(group) for group in groups]
    columns = np.array([e.signals for e in scored], dtype=np.float64)
    fused = iter(sum(_standardise(columns[:, j]) for j in range(columns.shape[1])).tolist())
    out = []
    for group in groups:
        ranked = [replace(e, score=next(fused), signals=()) if e.signals else e for e in group]
        keep = set(sorted(range(len(ranked)), key=lambda k: -ranked[k].score)[:most])
        out.append([e for k, e in enumerate(ranked) if k in keep])
    return out


def fuse_each_question(queries: Sequence[SegmentQuery], groups: Sequence[Sequence[Evidence]],
                        most: int) -> list[list[Evidence]]:
    """:func:`fuse` the candidates of each question among ``queries`` (a group per query) on their own."""
    out: list[list[Evidence]] = [[] for _ in queries]
    for question in dict.fromkeys(q.question for q in queries):
        mine = [k for k, q in enumerate(queries) if q.question == question]
        for k, group in zip(mine, fuse([groups[k] for k in mine], most), strict=True):
            out[k] = group
    return out


def line_regex(n_lines: int, most: int) -> str:
    """Regex of 'none' or 1..most distinct-looking line numbers in 1..n_lines, comma-separated.

    >>> line_regex(3, 2)
    'none|(1|2|3)(, (1|2|3)){0,1}'
    """
    number = "(" + "|".join(str(i) for i in range(1, n_lines + 1)) + ")"
    return f"{NONE}|{number}(, {number}){{0,{most - 1}}}"


def extraction_prompt(segment: Segment, question: str) -> str:
    lines = "\n".join(f"[{i}] {line}" for i, line in enumerate(segment.lines, start=1))
    return (
        f"Conversation log:\n{lines}\n\nQuestion: {question}\n"
        "Which line numbers contain the information needed to answer the question? "
        "Reply with the line numbers separated by commas, or none."
    )


class AssistantHost:
    """Holds many segments; extracts evidence for (segment id, question) queries in one engine batch.

    ``terms`` splits text into the words the lexical signal matches (the router's BM25 tokenizer);
    their idf comes from the lines held here.
    """

    # NOTE: class-level defaults, so that snapshots written before these settings existed still load.
    method: Method = "likelihood"
    shortlist: int = 5
    speaker_prior: float = 0.0
    terms: Callable[[str], list[str]] = staticmethod(words)
    _idf: dict[str, float] | None = None

    def __init__(self, engine: GenerationEngine, *, evidence_per_segment: int = 5, method: Method = "likelihood",
                 shortlist: int = 5, terms: Callable[[str], list[str]] | None = None,
                 speaker_prior: float = 0.0) -> None:
        self.engine = engine
        self.evidence_per_segment = evidence_per_segment
        self.method = method
        self.shortlist = shortlist
        self.speaker_prior = speaker_prior
        self.terms = terms or words
        self._segments: dict[int, Segment] = {}
        self._idf: dict[str, float] | None = None  # from the held lines; None = to be recounted

    def __getstate__(self) -> dict:
        return {**self.__dict__, "engine": None}  # NOTE: a snapshot holds segments, never the engine

    def add(self, segments: Sequence[Segment]) -> None:
        # NOTE: copy-on-write: writes run in their own threads beside extractions (actors/remote.py), which
        # iterate the dict they read; a new dict leaves that iteration intact.
        self._segments = {**self._segments, **{seg.id: seg for seg in segments}}
        self._idf = None

    def __len__(self) -> int:
        return len(self._segments)

    def segment(self, segment_id: int) -> Segment:
        return self._segments[segment_id]

    @property
    def segment_ids(self) -> KeysView[int]:
        """A live view of the held segment ids (O(1) membership; copy it to keep or send it)."""
        return self._segments.keys()

    def forget(self, turn_ids: Sequence[str]) -> int:
        """Remove these turns' lines from every held segment; returns how many lines were removed."""
        drop = set(turn_ids)
        self._idf = None
        return sum(seg.drop_turns(drop) for seg in self._segments.values())

    def extract(self, queries: Sequence[SegmentQuery | tuple[int, str]]) -> tuple[list[list[Evidence]], TokenBill]:
        """Evidence per query, in order (each segment's lines in their order), and the tokens it cost. The
        likelihood method's candidates are fused per question over this call's queries; a read over several
        hosts fuses all their :meth:`candidates` at once instead."""
        queries = [SegmentQuery(*q) for q in queries]
        groups, bill = self.candidates(queries)
        return fuse_each_question(queries, groups, self.lines_kept), bill

    def candidates(self, queries: Sequence[SegmentQuery | tuple[int, str]]) -> tuple[list[list[Evidence]], TokenBill]:
        """Per query, in line order: the likelihood method's shortlist with raw ``signals`` (rank, likelihood) to
        :func:`fuse`, or the ``choose`` method's picks; and the tokens it cost."""
        queries = [SegmentQuery(*q) for q in queries]
        if self.method == "likelihood":
            return self._by_likelihood(queries)
        return self._by_choice(queries)

    @property
    def lines_kept(self) -> int:
        """Most lines one segment yields after fusion."""
        return min(self.shortlist, self.evidence_per_segment)

    # -- likelihood ------------------------------------------------------------------------
    def idf(self) -> dict[str, float]:
        """BM25's idf of each term over the held lines (a line = a document)."""
        idf = self._idf
        if idf is None:
            held = self._segments
            docs = [set(self.terms(line)) for seg in held.values() for line in seg.lines]
            df = Counter(t for doc in docs for t in doc)
            n = len(docs)
            idf = {t: math.log(1 + (n - k + 0.5) / (k + 0.5)) for t, k in df.items()}
            if self._segments is held:  # NOTE: a write that landed meanwhile keeps its reset
                self._idf = idf
        return idf

    def rank_lines(self, query: SegmentQuery) -> np.ndarray:
        """Per line of the segment: router cosine (when given for every line) + matched share of the
        question's idf mass, minus ``speaker_prior`` for the lines of speakers other than the one the question
        names (when it names exactly one of the segment's)."""
        seg = self._segments[query.segment_id]
        idf = self.idf() if query.idf is None else query.idf
        wanted = {t: idf.get(t, 0.0) for t in self.terms(query.question)}
        mass = sum(wanted.values())
        lexical = np.array([sum(wanted.get(t, 0.0) for t in set(self.terms(line))) / mass if mass else 0.0
                            for line in seg.lines])
        dense = np.asarray(query.line_scores, dtype=np.float64)
        score = lexical + dense if len(dense) == len(seg.lines) else lexical
        if self.speaker_prior:
            speakers = [line_speaker(line) for line in seg.lines]
            named = named_speaker(query.question, {s for s in speakers if s})
            if named is not None:
                score = score - self.speaker_prior * np.array([s != named for s in speakers])
        return score

    def _by_likelihood(self, queries: list[SegmentQuery]) -> tuple[list[list[Evidence]], TokenBill]:
        picks = []  # per query: (line index, rank score) of its shortlist, in line order
        for q in queries:
            rank = self.rank_lines(q)
            top = np.argsort(-rank, kind="stable")[: self.shortlist]
            picks.append([(int(i), float(rank[i])) for i in sorted(top)])
        requests = [GenerationRequest(prompt=LIKELIHOOD_PROMPT.format(line=self._segments[q.segment_id].lines[i]),
                                      continuation=f" {q.question}")
                    for q, pick in zip(queries, picks, strict=True) for i, _ in pick]
        results = self.engine.generate(requests)
        it = iter(results)
        out = []
        for q, pick in zip(queries, picks, strict=True):
            seg = self._segments[q.segment_id]
            out.append([Evidence(seg.turn_ids[i], seg.lines[i], seg.timestamps[i], seg.id,
                                 signals=(rank, _mean(next(it).continuation_logprobs))) for i, rank in pick])
        return out, TokenBill.of(results)

    # -- choose ----------------------------------------------------------------------------
    def _by_choice(self, queries: list[SegmentQuery]) -> tuple[list[list[Evidence]], TokenBill]:
        pairs = [(q.segment_id, q.question) for q in queries]
        segments = [self._segments[sid] for sid, _ in pairs]
        regex = getattr(self.engine, "supports_regex", False)
        requests = []
        for seg, (_, question) in zip(segments, pairs, strict=True):
            messages = [{"role": "system", "content": EXTRACT_SYSTEM},
                        {"role": "user", "content": extraction_prompt(seg, question)}]
            n = len(seg.lines)
            if regex:
                most = min(self.evidence_per_segment, n)
                requests.append(GenerationRequest(messages=messages, regex=line_regex(n, most),
                                                  max_tokens=4 * most + 2))
            else:
                requests.append(GenerationRequest(messages=messages, choice=[NONE, *map(str, range(1, n + 1))]))
        results = self.engine.generate(requests)
        out = []
        for seg, res in zip(segments, results, strict=True):
            picked = self._picked(res, len(seg.lines))
            out.append([Evidence(seg.turn_ids[i], seg.lines[i], seg.timestamps[i], seg.id) for i in picked])
        return out, TokenBill.of(results)

    def _picked(self, result, n_lines: int) -> list[int]:
        """0-based line indexes, in the segment's order."""
        if result.choice_logprobs:  # scored choices: the lines ranked above "none", best first
            ranked = list(result.choice_logprobs)
            above = ranked[: ranked.index(NONE)] if NONE in ranked else ranked
            chosen = [int(c) - 1 for c in above[: self.evidence_per_segment]]
        else:
            chosen = [int(x) - 1 for x in re.findall(r"\d+", result.text)]
        return sorted({i for i in chosen if 0 <= i < n_lines})
