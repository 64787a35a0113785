"""One assembly of the service's memory: the pipelines over a set of shards, as the config says.

The ingress (over ``serve.actor_shards.ActorShards``), the benchmark's in-process service and the tests (over
``pipeline.shards.LocalShards``) all build their memory here, so what a benchmark or a test runs is what the
service runs; they differ only in the shards and in the steps they hand in (how texts are embedded, how the
master is called, whether an admission classifier decides).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.config import EngramConfig
from core.generation import TokenBill
from cores.tenant_episodes import TurnRecord
from pipeline.read_path import AnswerStep, ReadPath
from pipeline.shards import Shards
from pipeline.summariser import Summariser
from pipeline.tenant_ops import TenantOps
from pipeline.write_path import Classify, Embed, IncomingTurn, WritePath, turn_records


@dataclass
class Memory:
    """The service's memory over one set of shards: the write path, the read path, the background summariser
    and the tenant operations."""

    config: EngramConfig
    writes: WritePath
    reads: ReadPath
    summariser: Summariser
    ops: TenantOps

    def records(self, turns: Sequence[IncomingTurn], now: datetime) -> list[TurnRecord]:
        """A request's turns as the cores keep them (``pipeline.write_path.turn_records``, dates grounded as
        ``episodic.ground_dates`` says)."""
        return turn_records(turns, now, self.config.episodic.ground_dates)


def build_memory(config: EngramConfig, shards: Shards, *, embed: Embed, answer: AnswerStep,
                 classify: Classify | None = None,
                 on_summary_bill: Callable[[TokenBill], Any] | None = None) -> Memory:
    """The pipelines over ``shards``. ``embed``: stored texts -> unit rows; ``answer``: the master's step;
    ``classify``: the admission classifier (``None``: store-all, or the keyword rule, as ``admission.mode``
    says); ``on_summary_bill``: told the token bill of every background summary."""
    summariser = Summariser(config.cluster, shards, embed, on_bill=on_summary_bill)
    return Memory(
        config=config,
        writes=WritePath(config, shards, embed, classify),
        reads=ReadPath(shards, answer, lines_per_segment=config.episodic.lines_per_segment,
                       ask_timeout_s=config.cluster.ask_timeout_s),
        summariser=summariser,
        ops=TenantOps(shards, summariser.queue if config.cluster.summaries else None),
    )
