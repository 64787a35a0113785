"""``engram``: start the local service, feed it conversations, query it, run the benchmarks.

::

    engram start [--config configs/serve-cpu.yaml]       serve run <config>, in the foreground
    engram ingest locomo conv-26 [--user U] [--batch 32]  a LoCoMo conversation, turn by turn
    engram ingest jsonl turns.jsonl --user U              one TurnIn JSON object per line
    engram ask U "Where did Caroline move from?"          answer, evidence, token bill
    engram search U "adoption agencies" [--k 5]           memories and routed segments
    engram memories U | forget U MEMORY_ID | delete-user U | health
    engram export U [-o FILE] | import U FILE             a user's memory as JSON Lines, and back
    engram keys create --tenant U [--admin] [--name N]    an API key, printed once (keys list | keys revoke KEY_ID)
    engram bench locomo --quick                           python -m bench.locomo --quick

Exit codes: 0 done; 1 the service answered with an error (printed as ``error (<status> <type>): <message>``),
a request was invalid, or an input line was bad; 2 usage error, or the service could not be reached.
Requests carry ``--api-key`` / ``$ENGRAM_API_KEY`` as ``Authorization: Bearer``; ``engram keys`` edits the keys
file (``auth.keys_file``) directly and needs no running service.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import yaml
from pydantic import TypeAdapter, ValidationError
from tqdm import tqdm

from cluster.auth import CREATE_HINT, ApiKey, KeyFileError, KeyStore
from cluster.client import DEFAULT_TIMEOUT_S, DEFAULT_URL, EngramClient, EngramHTTPError
from serve.schemas import MAX_BATCH, AskResponse, Identifier, SearchResponse, TurnIn

if TYPE_CHECKING:
    from cluster.config import AuthConfig

DEFAULT_CONFIG = Path("configs/serve-cpu.yaml")
REPO_ROOT = Path(__file__).resolve().parent.parent
LOOPBACK_WRAPPER = "../shared/bin/loopback-only"
_START_ENV_DEFAULTS = {
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}
_USER_ID = TypeAdapter(Identifier)


# ---------------------------------------------------------------- start


def start_command(
    config: Path, environ: Mapping[str, str], python: str = sys.executable
) -> tuple[list[str], dict[str, str]]:
    """The ``serve run`` command line and its environment (``environ`` with the defaults for unset keys).

    ``start_command(Path("c.yaml"), {}, "/v/bin/python")[0] == ["/v/bin/serve", "run", "c.yaml"]``
    """
    env = dict(environ)
    for key, value in _START_ENV_DEFAULTS.items():
        env.setdefault(key, value)
    return [str(Path(python).with_name("serve")), "run", str(config)], env


def serve_url(config: Path) -> str:
    """Where a Serve config file makes the HTTP proxy listen (Serve's defaults: 127.0.0.1:8000)."""
    data = yaml.safe_load(config.read_text()) or {}
    http = data.get("http_options") or {}
    return f"http://{http.get('host', '127.0.0.1')}:{http.get('port', 8000)}"


def _resolve_config(config: Path) -> Path:
    # A relative path is taken from the working directory first, then from the repository.
    if config.is_absolute() or config.is_file():
        return config.resolve()
    return (REPO_ROOT / config).resolve()


def served_auth(config: Path) -> AuthConfig:
    """The ``auth`` section the service of a Serve config file runs with: its
    ``serve.app:build_app`` application's profile and overrides, loaded as ``build_app`` loads them (``ENGRAM_*``
    included); the default profile's when the file has no such application."""
    from cluster.config import load_config
    from serve.args import AppArgs

    data = yaml.safe_load(config.read_text()) or {}
    for app in data.get("applications") or []:
        if app.get("import_path") == "serve.app:build_app":
            app_args = AppArgs.model_validate(app.get("args") or {})
            return load_config(app_args.profile, app_args.config).auth
    return load_config().auth


def _first_admin_key(keys_file: Path) -> None:
    """With auth on and no admin key yet, make one and show it once, so that a first ``engram start`` works."""
    store = KeyStore(keys_file)
    if any(k.admin for k in store.list()):
        return
    plaintext, key = store.create([], admin=True, name="engram start")
    rule = "=" * 100
    print(f"{rule}\nengram: made an admin API key ({key.key_id}), since {keys_file} held none. It is shown only this "
          f"once\n(only its SHA-256 is stored):\n\n    {plaintext}\n\nRequests send it as `Authorization: Bearer "
          f"<key>`; for the engram CLI, in another shell:\n\n    export ENGRAM_API_KEY={plaintext}\n\nKeys bound to "
          f"one user: engram keys create --tenant USER.\n{rule}")


def _cmd_start(args: argparse.Namespace, _: _Context) -> int:
    config = _resolve_config(args.config)
    if not config.is_file():
        return _fail(f"no Serve config at {config}", code=2)
    argv, env = start_command(config, os.environ)
    if not Path(argv[0]).is_file():
        return _fail(f"{argv[0]} not found; install the project with ray[serve] in this environment", code=2)
    auth = served_auth(config)
    if auth.required:
        _first_admin_key(auth.keys_file)
    print(f"engram: starting the service ({config.name}) at {serve_url(config)}; Ctrl-C stops it.")
    print(f"engram: where Ray must stay on loopback, run it as: {LOOPBACK_WRAPPER} engram start --config {config}")
    # NOTE: flush before exec, which replaces the process and drops anything still buffered.
    sys.stdout.flush()
    os.execvpe(argv[0], argv, env)
    return 0  # not reached


# ---------------------------------------------------------------- ingest


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


def locomo_batches(turns: Sequence[Any], user_id: str, size: int) -> Iterator[tuple[str, str, list[TurnIn]]]:
    """LoCoMo turns (``bench.locomo_data.Turn``) as batches of at most ``size``, in stream order; a batch never
    spans two sessions and carries ``session_<n>`` as its session id."""
    by_session: dict[int, list[TurnIn]] = {}
    for t in turns:
        turn = TurnIn(id=t.dia_id, speaker=t.speaker, text=t.text, timestamp=t.timestamp, date_time=t.date_time)
        by_session.setdefault(t.session, []).append(turn)  # dicts keep insertion order: stream order
    for session, session_turns in by_session.items():
        for chunk in _chunks(session_turns, size):
            yield user_id, f"session_{session}", chunk


def _cmd_ingest_locomo(args: argparse.Namespace, ctx: _Context) -> int:
    from bench.locomo_data import load_locomo

    if args.data is None:
        from cluster.config import load_config

        args.data = load_config().data.locomo_path
    if not Path(args.data).is_file():
        return _fail(f"LoCoMo not found at {args.data}; pass --data or set ENGRAM_DATA__LOCOMO_PATH")
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


# ---------------------------------------------------------------- queries


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
        reply = client.ask(args.user, args.question, args.category)
    print(reply.model_dump_json(indent=2) if args.json else format_ask(reply))
    return 0


def _cmd_search(args: argparse.Namespace, ctx: _Context) -> int:
    with ctx.connect() as client:
        reply = client.search(args.user, args.query, args.k)
    print(reply.model_dump_json(indent=2) if args.json else format_search(reply))
    return 0


def _cmd_memories(args: argparse.Namespace, ctx: _Context) -> int:
    with ctx.connect() as client:
        reply = client.list_memories(args.user, args.offset, args.limit)
    if args.json:
        print(reply.model_dump_json(indent=2))
        return 0
    print(f"{reply.user_id}: {len(reply.memories)} of {reply.total} memories from offset {reply.offset}")
    for m in reply.memories:
        print(f"  {m.id}  {m.tier}  {m.importance:.2f}  {m.type or '-'}  {m.text}")
    return 0


def _cmd_forget(args: argparse.Namespace, ctx: _Context) -> int:
    with ctx.connect() as client:
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


# ---------------------------------------------------------------- keys


def _keys_file(args: argparse.Namespace) -> Path:
    if args.keys_file is not None:
        return args.keys_file
    from cluster.config import load_config

    return load_config().auth.keys_file


def _scope(key: ApiKey) -> str:
    return "admin" if key.admin else ",".join(key.tenants)


def _cmd_keys_create(args: argparse.Namespace, _: _Context) -> int:
    path = _keys_file(args)
    try:
        plaintext, key = KeyStore(path).create(args.tenant, admin=args.admin, name=args.name)
    except KeyFileError:
        raise
    except ValueError as exc:  # a tenant that is no user id, or neither a tenant nor --admin
        return _fail(str(exc), code=2)
    print(plaintext)
    who = "every user (admin)" if key.admin else f"user{'s' if len(key.tenants) > 1 else ''} {', '.join(key.tenants)}"
    print(f"engram: API key {key.key_id} for {who} added to {path}. Only its SHA-256 is stored: this is the only "
          f"time the key is shown.\nengram: use it with  export ENGRAM_API_KEY={plaintext}", file=sys.stderr)
    return 0


def _cmd_keys_list(args: argparse.Namespace, _: _Context) -> int:
    path = _keys_file(args)
    keys = KeyStore(path).list()
    if args.json:
        print(json.dumps([k.model_dump(exclude={"sha256"}) for k in keys], indent=2))
    elif not keys:
        print(f"no API keys in {path}; make one with {CREATE_HINT}")
    else:
        print(f"{len(keys)} API key{'s' if len(keys) > 1 else ''} in {path}:")
        for k in keys:
            print(f"  {k.key_id}  {k.created_at}  {_scope(k):<24}  {k.name}")
    return 0


def _cmd_keys_revoke(args: argparse.Namespace, _: _Context) -> int:
    path = _keys_file(args)
    if not KeyStore(path).revoke(args.key_id):
        return _fail(f"no API key {args.key_id!r} in {path}; `engram keys list` shows them")
    print(f"revoked API key {args.key_id} in {path}; a running service refuses it from its next request")
    return 0


# ---------------------------------------------------------------- bench


def bench_modules() -> list[str]:
    """Modules under ``bench/`` that run as programs (they have a ``__main__`` guard)."""
    import bench

    folder = Path(bench.__file__).parent
    return sorted(
        p.stem for p in folder.glob("*.py") if not p.stem.startswith("_") and "__main__" in p.read_text("utf-8")
    )


def _cmd_bench(args: argparse.Namespace, _: _Context) -> int:
    known = bench_modules()
    if args.name not in known:
        return _fail(f"unknown benchmark {args.name!r}; known: {', '.join(known)}", code=2)
    return subprocess.run([sys.executable, "-m", f"bench.{args.name}", *args.args], check=False).returncode


# ---------------------------------------------------------------- plumbing


@dataclass
class _Context:
    connect: Callable[[], EngramClient]


def _fail(message: str, code: int = 1) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def _brief(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in exc.errors())


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="engram", description="Engram Cluster: long-term memory for LLM agents.")
    p.add_argument("--url", default=os.environ.get("ENGRAM_URL", DEFAULT_URL), help="service URL (env ENGRAM_URL)")
    p.add_argument("--api-key", default=os.environ.get("ENGRAM_API_KEY"), help="bearer token (env ENGRAM_API_KEY)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per request")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("start", help="run the service locally (serve run <config>)")
    s.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="Serve config file")
    s.set_defaults(run=_cmd_start)

    ingest = sub.add_parser("ingest", help="post turns").add_subparsers(dest="source", required=True, metavar="SOURCE")
    s = ingest.add_parser("locomo", help="one LoCoMo conversation, in order")
    s.add_argument("conv_id", help="sample id, e.g. conv-26")
    s.add_argument("--user", help="user id (default: the conversation id)")
    s.add_argument("--data", type=Path, help="locomo10.json (default: the config's data.locomo_path)")
    s.add_argument("--batch", type=_batch_size, default=32, help="turns per request")
    s.set_defaults(run=_cmd_ingest_locomo)
    s = ingest.add_parser("jsonl", help="a JSON-lines file of turns (TurnIn fields, optional user_id)")
    s.add_argument("file", type=Path)
    s.add_argument("--user", required=True, help="user id of lines without one")
    s.add_argument("--batch", type=_batch_size, default=32, help="turns per request")
    s.set_defaults(run=_cmd_ingest_jsonl)

    s = sub.add_parser("ask", help="answer a question from a user's memory")
    s.add_argument("user")
    s.add_argument("question")
    s.add_argument("--category", type=int, choices=range(1, 6), help="LoCoMo category hint (2 temporal, 5 adversarial)")
    s.add_argument("--json", action="store_true", help="print the reply as JSON")
    s.set_defaults(run=_cmd_ask)

    s = sub.add_parser("search", help="retrieve memories and segments")
    s.add_argument("user")
    s.add_argument("query")
    s.add_argument("--k", type=int, default=5)
    s.add_argument("--json", action="store_true", help="print the reply as JSON")
    s.set_defaults(run=_cmd_search)

    s = sub.add_parser("memories", help="list a user's memories")
    s.add_argument("user")
    s.add_argument("--offset", type=int, default=0)
    s.add_argument("--limit", type=int, default=50)
    s.add_argument("--json", action="store_true", help="print the reply as JSON")
    s.set_defaults(run=_cmd_memories)

    s = sub.add_parser("forget", help="delete one memory")
    s.add_argument("user")
    s.add_argument("memory_id")
    s.set_defaults(run=_cmd_forget)

    s = sub.add_parser("delete-user", help="delete everything stored for a user")
    s.add_argument("user")
    s.set_defaults(run=_cmd_delete_user)

    s = sub.add_parser("export", help="a user's whole memory as JSON Lines")
    s.add_argument("user")
    s.add_argument("--output", "-o", type=Path, help="file to write (default: stdout)")
    s.set_defaults(run=_cmd_export)

    s = sub.add_parser("import", help="rebuild a user (holding nothing yet) from an export")
    s.add_argument("user")
    s.add_argument("file", type=Path, help="the export's JSON Lines ('-': stdin)")
    s.set_defaults(run=_cmd_import)

    s = sub.add_parser("health", help="service health (exit 1 when degraded)")
    s.add_argument("--json", action="store_true", help="print the reply as JSON")
    s.set_defaults(run=_cmd_health)

    keys = sub.add_parser("keys", help="API keys (the keys file; no service needed)").add_subparsers(
        dest="keys_command", required=True, metavar="ACTION")
    s = keys.add_parser("create", help="make a key bound to users (--tenant) or an admin key; prints it once")
    s.add_argument("--tenant", action="append", default=[], metavar="USER",
                   help="a user id the key may act for (repeatable; '*' for every user)")
    s.add_argument("--admin", action="store_true", help="every user, plus admin operations (delete-user)")
    s.add_argument("--name", default="", help="a label shown by `keys list`")
    s.set_defaults(run=_cmd_keys_create)
    s = keys.add_parser("list", help="key ids, names, users, admin flags (never secrets)")
    s.add_argument("--json", action="store_true", help="print the keys as JSON")
    s.set_defaults(run=_cmd_keys_list)
    s = keys.add_parser("revoke", help="delete a key; a running service refuses it from its next request")
    s.add_argument("key_id", help="the 8 hex characters after 'ek_' (see `keys list`)")
    s.set_defaults(run=_cmd_keys_revoke)
    for s in keys.choices.values():
        s.add_argument("--keys-file", type=Path, default=None,
                       help="the keys file (default: the config's auth.keys_file, env ENGRAM_AUTH__KEYS_FILE)")

    s = sub.add_parser("bench", help="run python -m bench.NAME ARGS...")
    s.add_argument("name", help="a module under bench/, e.g. locomo")
    s.add_argument("args", nargs=argparse.REMAINDER, help="passed on to the benchmark")
    s.set_defaults(run=_cmd_bench)
    return p


def _batch_size(text: str) -> int:
    value = int(text)
    if not 1 <= value <= MAX_BATCH:
        raise argparse.ArgumentTypeError(f"batch must be in [1, {MAX_BATCH}]")
    return value


def main(argv: Sequence[str] | None = None, *, transport: httpx.BaseTransport | None = None) -> int:
    """Entry point of ``engram``; returns the exit code. ``transport`` replaces the network (tests)."""
    args = build_parser().parse_args(argv)
    ctx = _Context(lambda: EngramClient(args.url, timeout=args.timeout, api_key=args.api_key, transport=transport))
    try:
        return args.run(args, ctx)
    except EngramHTTPError as exc:
        print(f"error ({exc.status} {exc.type}): {exc.message}", file=sys.stderr)
        return 1
    except ValidationError as exc:
        return _fail(f"invalid request: {_brief(exc)}")
    except KeyFileError as exc:
        return _fail(str(exc))
    except httpx.ConnectError:
        return _fail(f"cannot connect to {args.url}; start the service with `engram start` (or set --url)", code=2)
    except httpx.TransportError as exc:
        return _fail(f"{args.url}: {type(exc).__name__}: {exc}", code=2)


if __name__ == "__main__":
    sys.exit(main())
