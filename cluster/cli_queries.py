"""``engram ask | search | memories | update | history | forget | delete-user | export | import | health``: one
request each."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from cluster.cli_common import _Context, _fail
from serve.schemas import AskResponse, MemoryHistory, SearchResponse


def _filters(args: argparse.Namespace) -> dict[str, Any] | None:
    """``--where`` / ``--since`` / ``--until`` as the API's ``filters`` (None when none is given)."""
    f = {"metadata": dict(args.where), "since": args.since, "until": args.until}
    f = {k: v for k, v in f.items() if v}
    return f or None


def format_history(reply: MemoryHistory) -> str:
    lines = [f"{reply.memory_id}: {len(reply.versions)} version(s)"]
    lines += [f"  v{v.version}  {v.at:%Y-%m-%d %H:%M:%S}  {v.event:<6}  {v.text}" for v in reply.versions]
    lines += [f"  {name}: {ref}" for name, ref in (("supersedes", reply.supersedes),
                                                   ("superseded by", reply.superseded_by)) if ref]
    return "\n".join(lines)


def format_ask(reply: AskResponse) -> str:
    lines = [reply.answer, ""]
    if reply.evidence:
        lines.append("evidence:")
        lines += [f"  {e.timestamp:%Y-%m-%d %H:%M}  {e.turn_id}  {e.content}" for e in reply.evidence]
    else:
        lines.append("evidence: none")
    t = reply.tokens
    lines.append(
        f"tokens: assistants {t.assistants.total} (prompt {t.assistants.prompt}, completion {t.assistants.completion})"
        f", master {t.master.total} (prompt {t.master.prompt}, completion {t.master.completion}), total {t.total}"
    )
    return "\n".join(lines)


def format_search(reply: SearchResponse) -> str:
    lines = ["memories:" if reply.memories else "memories: none"]
    lines += [f"  {m.score:7.3f}  {m.tier}  {m.path:<4}  {m.text}" for m in reply.memories]
    lines.append("segments:" if reply.segments else "segments: none")
    lines += [f"  #{s.segment_id:<4} {','.join(s.paths):<16} {s.score:.3f}" for s in reply.segments]
    return "\n".join(lines)


def _cmd_ask(args: argparse.Namespace, ctx: _Context) -> int:
    with ctx.connect() as client:
        reply = client.ask(args.user, args.question, args.kind, args.agent_id, args.run_id)
    print(reply.model_dump_json(indent=2) if args.json else format_ask(reply))
    return 0


def _cmd_search(args: argparse.Namespace, ctx: _Context) -> int:
    with ctx.connect() as client:
        reply = client.search(args.user, args.query, args.k, args.agent_id, args.run_id, _filters(args),
                              args.threshold)
    print(reply.model_dump_json(indent=2) if args.json else format_search(reply))
    return 0


def _cmd_memories(args: argparse.Namespace, ctx: _Context) -> int:
    with ctx.connect() as client:
        reply = client.list_memories(args.user, args.offset, args.limit, args.agent_id, args.run_id,
                                     _filters(args))
    if args.json:
        print(reply.model_dump_json(indent=2))
        return 0
    print(f"{reply.user_id}: {len(reply.memories)} of {reply.total} memories from offset {reply.offset}")
    for m in reply.memories:
        print(f"  {m.id}  {m.tier}  {m.importance:.2f}  {m.type or '-'}  {m.text}")
    return 0


def _cmd_update(args: argparse.Namespace, ctx: _Context) -> int:
    with ctx.connect() as client:
        reply = client.update_memory(args.user, args.memory_id, args.text)
    print(reply.model_dump_json(indent=2) if args.json else f"{reply.id}: {reply.text}")
    return 0


def _cmd_history(args: argparse.Namespace, ctx: _Context) -> int:
    with ctx.connect() as client:
        reply = client.memory_history(args.user, args.memory_id)
    print(reply.model_dump_json(indent=2) if args.json else format_history(reply))
    return 0


def _cmd_forget(args: argparse.Namespace, ctx: _Context) -> int:
    scoped = args.agent_id is not None or args.run_id is not None
    if (args.memory_id is None) == (not scoped):
        return _fail("name a MEMORY_ID or a scope (--agent / --run), not both", 2)
    with ctx.connect() as client:
        if scoped:
            reply = client.delete_scope(args.user, args.agent_id, args.run_id)
        else:
            reply = client.delete_memory(args.user, args.memory_id)
    print(f"{reply.user_id}: deleted {reply.memories} memories, {reply.turns} turns")
    return 0


def _cmd_delete_user(args: argparse.Namespace, ctx: _Context) -> int:
    with ctx.connect() as client:
        reply = client.delete_user(args.user)
    print(f"{reply.user_id}: deleted {reply.memories} memories, {reply.turns} turns")
    return 0


def _cmd_export(args: argparse.Namespace, ctx: _Context) -> int:
    with ctx.connect() as client:
        text = client.export_user(args.user)
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text, encoding="utf-8")
        print(f"{args.user}: {text.count(chr(10))} lines written to {args.output}", file=sys.stderr)
    return 0


def _cmd_import(args: argparse.Namespace, ctx: _Context) -> int:
    try:
        data = sys.stdin.buffer.read() if str(args.file) == "-" else args.file.read_bytes()
    except OSError as exc:
        return _fail(f"cannot read {args.file}: {exc.strerror or exc}")
    with ctx.connect() as client:
        reply = client.import_user(args.user, data)
    print(f"{reply.user_id}: imported {reply.memories} memories, {reply.segments} segments")
    return 0


def _cmd_health(args: argparse.Namespace, ctx: _Context) -> int:
    with ctx.connect() as client:
        reply = client.health()
    if args.json:
        print(reply.model_dump_json(indent=2))
    else:
        print(f"{reply.status} (version {reply.version})")
        for name, up in sorted(reply.actors.items()):
            print(f"  {name}: {'up' if up else 'DOWN'}")
    return 0 if reply.status == "ok" else 1
