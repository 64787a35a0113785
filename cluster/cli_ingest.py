"""``engram ingest locomo`` and ``engram ingest jsonl``: turns posted to the service in batches, in order."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError
from tqdm import tqdm

from cluster.cli_common import _brief, _Context, _fail
from cluster.client import EngramClient
from serve.schemas import Identifier, TurnIn

_USER_ID = TypeAdapter(Identifier)


@dataclass
class _Totals:
    turns: int = 0
    admitted: int = 0
    segments_closed: int = 0
    evicted: int = 0


def _chunks(items: Sequence[TurnIn], size: int) -> Iterator[list[TurnIn]]:
    """``list(_chunks([1, 2, 3], 2)) == [[1, 2], [3]]``"""
    it = iter(items)
    while chunk := list(islice(it, size)):
        yield chunk


def _post(client: EngramClient, batches: Iterable[tuple[str, str | None, list[TurnIn]]], total: int) -> _Totals:
    """Post ``(user_id, session_id, turns)`` batches in order, with a progress bar on stderr."""
    totals = _Totals()
    with tqdm(total=total, unit="turn", file=sys.stderr, desc="ingest") as bar:
        for user_id, session_id, turns in batches:
            reply = client.add_turns(user_id, turns, session_id=session_id)
            totals.turns += len(turns)
            totals.admitted += reply.admitted
            totals.segments_closed += reply.segments_closed
            totals.evicted += reply.evicted
            bar.update(len(turns))
    return totals


def _summary(totals: _Totals, users: str) -> str:
    return (
        f"{users}: {totals.turns} turns posted, {totals.admitted} admitted, "
        f"{totals.segments_closed} segments closed, {totals.evicted} evicted"
    )


DEFAULT_BATCH = 32  # turns per request of `engram ingest`


def locomo_batches(turns: Sequence[Any], user_id: str, size: int) -> Iterator[tuple[str, str, list[TurnIn]]]:
    """LoCoMo turns (``corpora.locomo.Turn``) as batches of at most ``size``, in stream order; a batch never
    spans two sessions and carries ``session_<n>`` as its session id."""
    by_session: dict[int, list[TurnIn]] = {}
    for t in turns:
        turn = TurnIn(id=t.dia_id, speaker=t.speaker, text=t.text, timestamp=t.timestamp, date_time=t.date_time)
        by_session.setdefault(t.session, []).append(turn)  # dicts keep insertion order: stream order
    for session, session_turns in by_session.items():
        for chunk in _chunks(session_turns, size):
            yield user_id, f"session_{session}", chunk


def _cmd_ingest_locomo(args: argparse.Namespace, ctx: _Context) -> int:
    from corpora.locomo import load_locomo, locomo_missing

    if args.data is None:
        from core.config import load_config

        args.data = load_config().data.locomo_path
    if not Path(args.data).is_file():
        return _fail(locomo_missing(args.data, "--data"), code=2)
    convs = {c.sample_id: c for c in load_locomo(args.data)}
    conv = convs.get(args.conv_id)
    if conv is None:
        return _fail(f"no conversation {args.conv_id!r} in {args.data}; known: {', '.join(convs)}")
    user_id = args.user or conv.sample_id
    with ctx.connect() as client:
        totals = _post(client, locomo_batches(conv.turns, user_id, args.batch), len(conv.turns))
    print(_summary(totals, f"{conv.sample_id} -> user {user_id}"))
    return 0


def read_jsonl(lines: Iterable[str], default_user: str) -> tuple[list[tuple[str, TurnIn]], list[tuple[int, str]]]:
    """Parse ``(user_id, turn)`` pairs from JSON lines; ``(line number, reason)`` for each bad line.

    A line is a ``TurnIn`` object, optionally with ``"user_id"`` (overrides ``default_user``); blank lines are skipped.
    """
    good: list[tuple[str, TurnIn]] = []
    bad: list[tuple[int, str]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict):
                raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
            user_id = _USER_ID.validate_python(obj.pop("user_id", default_user))
            good.append((user_id, TurnIn.model_validate(obj)))
        except ValidationError as exc:
            bad.append((number, _brief(exc)))
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            bad.append((number, str(exc)))
    return good, bad


def jsonl_batches(pairs: Sequence[tuple[str, TurnIn]], size: int) -> Iterator[tuple[str, None, list[TurnIn]]]:
    """Runs of consecutive turns of one user, cut into batches of at most ``size``; order is kept.

    ``[(u, t1), (u, t2), (v, t3)]`` with size 8 → ``(u, None, [t1, t2])``, ``(v, None, [t3])``.
    """
    start = 0
    while start < len(pairs):
        user = pairs[start][0]
        end = start + 1
        while end < len(pairs) and end - start < size and pairs[end][0] == user:
            end += 1
        yield user, None, [turn for _, turn in pairs[start:end]]
        start = end


def _cmd_ingest_jsonl(args: argparse.Namespace, ctx: _Context) -> int:
    try:
        _USER_ID.validate_python(args.user)
        with open(args.file, encoding="utf-8") as f:
            pairs, bad = read_jsonl(f, args.user)
    except (OSError, UnicodeDecodeError) as exc:
        return _fail(f"cannot read {args.file}: {exc}")
    for number, reason in bad:
        print(f"{args.file}:{number}: skipped: {reason}", file=sys.stderr)
    with ctx.connect() as client:
        totals = _post(client, jsonl_batches(pairs, args.batch), len(pairs))
    users = sorted({u for u, _ in pairs})
    print(_summary(totals, f"{args.file} -> user{'s' if len(users) > 1 else ''} {', '.join(users) or args.user}"))
    if bad:
        print(f"{len(bad)} bad line{'s' if len(bad) > 1 else ''} skipped", file=sys.stderr)
        return 1
    return 0
