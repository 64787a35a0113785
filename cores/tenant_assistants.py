"""Assistants of many tenants in one process: the core of an assistant actor.

An actor hosts many assistants (one per segment) for many tenants — one process per assistant does not
scale. Each tenant has its own :class:`AssistantHost`; all hosts share one engine, which in the cluster
is the small-model pool deployment (every actor's requests meet there and are batched together).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from core.evidence import Evidence
from core.generation import GenerationEngine, GenerationRequest, TokenBill
from inference.assistant import AssistantHost, SegmentQuery, fuse_each_question
from memory.segmenter import Segment

SUMMARY_PROMPT = (
    "Summarise this part of a conversation in one sentence that names the people, the events and the topics."
)


def summary_request(segment: Segment, max_tokens: int) -> GenerationRequest:
    """The small model's request for a segment's one-line summary (the router's global path)."""
    return GenerationRequest(messages=[{"role": "user", "content": f"{segment.text}\n\n{SUMMARY_PROMPT}"}],
                             max_tokens=max_tokens)


@dataclass
class Forgotten:
    """What :meth:`TenantAssistants.forget` removed; false when nothing (then the journal skips the call)."""

    lines: int
    segments: list[Segment] = field(default_factory=list)

    def __bool__(self) -> bool:
        return self.lines > 0


class TenantAssistants:
    """``{tenant: AssistantHost}``: hold segments, extract evidence, write summaries, forget."""

    durable_state = "_hosts"  # the tenant data a snapshot holds (cores/durable.py)

    def __init__(self, engine: GenerationEngine, *, summary_engine: GenerationEngine | None = None,
                 summary_max_tokens: int = 48, **host_options: Any) -> None:
        self.engine = engine  # evidence extraction (the assistant role's model)
        self.summary_engine = summary_engine or engine  # segment summaries (the summary role's model)
        self.host_options = host_options  # AssistantHost's: evidence_per_segment, method, shortlist, terms
        self.lines_kept = AssistantHost(engine, **host_options).lines_kept  # most lines a segment yields once fused
        self.summary_max_tokens = summary_max_tokens
        self._hosts: dict[str, AssistantHost] = {}

    def ping(self) -> bool:
        return True

    def restored(self) -> None:
        """After a snapshot load: the hosts use this process's engine (snapshots do not hold one)."""
        for host in self._hosts.values():
            host.engine = self.engine

    def tenants(self) -> list[str]:
        return sorted(self._hosts)

    def _host(self, tenant: str, create: bool = False) -> AssistantHost | None:
        host = self._hosts.get(tenant)
        if host is None and create:
            host = self._hosts[tenant] = AssistantHost(self.engine, **self.host_options)
        return host

    def add(self, tenant: str, segments: Sequence[Segment]) -> int:
        host = self._host(tenant, create=True)
        host.add(segments)
        return len(host)

    def segment_ids(self, tenant: str) -> set[int]:
        host = self._host(tenant)
        return set() if host is None else set(host.segment_ids)

    def segments(self, tenant: str) -> list[Segment]:
        """Copies of the tenant's segments held here, by id (an export reads the raw lines from them)."""
        host = self._host(tenant)
        return [] if host is None else self._copies(host, sorted(host.segment_ids))

    @staticmethod
    def _copies(host: AssistantHost, ids: Sequence[int]) -> list[Segment]:
        return [replace(seg, turn_ids=list(seg.turn_ids), lines=list(seg.lines), timestamps=list(seg.timestamps),
                        token_counts=list(seg.token_counts)) for seg in (host.segment(i) for i in ids)]

    def has(self, tenant: str, segment_id: int) -> bool:
        host = self._host(tenant)
        return host is not None and segment_id in host.segment_ids

    def extract(self, tenant: str, queries: Sequence[SegmentQuery],
                only: Collection[str] | None = None) -> tuple[list[list[Evidence]], TokenBill]:
        """Evidence per query, in order; a segment this actor does not hold yields none. ``only`` (turn ids, a
        scoped read): the segments are read with those lines alone, the others never reach the model. Fused over
        this call's queries: a read over several actors asks for :meth:`candidates` and fuses them all."""
        queries = [SegmentQuery(*q) for q in queries]
        groups, bill = self.candidates(tenant, queries, only)
        return fuse_each_question(queries, groups, self.lines_kept), bill

    def candidates(self, tenant: str, queries: Sequence[SegmentQuery],
                   only: Collection[str] | None = None) -> tuple[list[list[Evidence]], TokenBill]:
        """:meth:`extract`'s candidates before fusion (``AssistantHost.candidates``), per query, in order."""
        host = self._host(tenant)
        queries = [SegmentQuery(*q) for q in queries]
        held = [i for i, q in enumerate(queries) if host is not None and q.segment_id in host.segment_ids
                and host.segment(q.segment_id).lines]
        out: list[list[Evidence]] = [[] for _ in queries]
        if only is not None and held:
            host, scoped = self._scoped(host, [queries[i] for i in held], set(only))
            pairs = [(i, q) for i, q in zip(held, scoped, strict=True) if q is not None]
            held = [i for i, _ in pairs]
            for i, q in pairs:
                queries[i] = q
        if not held:
            return out, TokenBill()
        found, bill = host.candidates([queries[i] for i in held])
        for i, evidence in zip(held, found, strict=True):
            out[i] = evidence
        return out, bill

    def _scoped(self, host: AssistantHost, queries: Sequence[SegmentQuery],
                only: set[str]) -> tuple[AssistantHost, list[SegmentQuery | None]]:
        """A reader over copies of the queried segments that keep the ``only`` lines, and each query for its copy
        (line scores cut the same way; None when no line is left)."""
        scoped = AssistantHost(self.engine, **self.host_options)
        copies, out = [], []
        for q in queries:
            seg = self._copies(host, [q.segment_id])[0]
            keep = [t in only for t in seg.turn_ids]
            seg.drop_turns({t for t, k in zip(seg.turn_ids, keep, strict=True) if not k})
            if not seg.lines:
                out.append(None)
                continue
            aligned = len(q.line_scores) == len(keep)  # NOTE: the router's scores are per line of its copy
            scores = [x for x, k in zip(q.line_scores, keep, strict=True) if k] if aligned else ()
            copies.append(seg)
            out.append(SegmentQuery(q.segment_id, q.question, scores, q.idf))
        scoped.add(copies)
        return scoped, out

    def candidates_from(self, segments: Sequence[Segment], question: str,
                        idf: Mapping[str, float] | None = None) -> tuple[list[list[Evidence]], TokenBill]:
        """Candidates (:meth:`candidates`) from segments passed by value (the open segment, which no actor holds
        yet), a group per segment that has lines; ``idf``: the question terms' idf over the user's memory (else over
        these segments' lines)."""
        segments = [s for s in segments if s.lines]
        if not segments:
            return [], TokenBill()
        host = AssistantHost(self.engine, **self.host_options)
        host.add(segments)
        return host.candidates([SegmentQuery(s.id, question, (), idf) for s in segments])

    def summarise(self, wanted: dict[str, Sequence[int]]) -> tuple[dict[str, dict[int, str]], TokenBill]:
        """One-line summaries of held segments (``{tenant: segment ids}``), all in one engine batch."""
        segs = [(tenant, host.segment(i)) for tenant, ids in wanted.items()
                if (host := self._host(tenant)) is not None for i in ids if i in host.segment_ids]
        segs = [(t, s) for t, s in segs if s.lines]
        if not segs:
            return {}, TokenBill()
        results = self.summary_engine.generate([summary_request(s, self.summary_max_tokens) for _, s in segs])
        out: dict[str, dict[int, str]] = {}
        for (tenant, seg), res in zip(segs, results, strict=True):
            seg.summary = res.text.strip()
            out.setdefault(tenant, {})[seg.id] = seg.summary
        return out, TokenBill.of(results)

    def forget(self, tenant: str, turn_ids: Sequence[str]) -> Forgotten:
        """Remove turns from every held segment of the tenant: how many lines went, and copies of the segments
        that lost them (the router re-indexes those; their summaries are gone, as they may tell of the turn)."""
        host = self._host(tenant)
        drop, lines, changed = set(turn_ids), 0, []
        for sid in sorted(host.segment_ids) if host is not None else ():
            removed = host.segment(sid).drop_turns(drop)
            if removed:
                lines += removed
                changed.append(sid)
        return Forgotten(lines, self._copies(host, changed) if changed else [])

    def drop_tenant(self, tenant: str) -> int:
        """Forget every segment of ``tenant``; returns how many raw lines they held."""
        host = self._hosts.pop(tenant, None)
        return 0 if host is None else sum(len(host.segment(i).lines) for i in host.segment_ids)
