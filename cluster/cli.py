"""``engram``: start the local service, feed it conversations, query it, run the benchmarks.

::

    engram demo [--conversation conv-26]                 start, ingest a conversation, ask three questions, stop
    engram start [--config configs/serve-cpu.yaml]       serve run <config>, in the foreground
    engram ingest locomo conv-26 [--user U] [--batch 32]  a LoCoMo conversation, turn by turn
    engram ingest jsonl turns.jsonl --user U              one TurnIn JSON object per line
    engram ask U "Where did Caroline move from?"          answer, evidence, token bill
    engram search U "adoption agencies" [--k 5]           memories and routed segments
    engram memories U [--agent A] [--run R] [--where type=fact] [--since 2023-05-01]
    engram update U MEMORY_ID "new text" | history U MEMORY_ID      a new version; every version
    engram forget U MEMORY_ID | forget U --agent A [--run R] | delete-user U | health
    engram export U [-o FILE] | import U FILE             a user's memory as JSON Lines, and back
    engram keys create --tenant U [--admin] [--name N]    an API key, printed once (keys list | keys revoke KEY_ID)
    engram models fetch qwen2.5-coder-1.5b                download, verify and convert a model (models list)
    engram bench locomo --quick                           python -m bench.locomo --quick

Exit codes: 0 done; 1 the service answered with an error (printed as ``error (<status> <type>): <message>``),
a request was invalid, or an input line was bad; 2 usage error, or the service could not be reached.
Requests carry ``--api-key`` / ``$ENGRAM_API_KEY`` as ``Authorization: Bearer``; ``engram keys`` edits the keys
file (``auth.keys_file``) directly and needs no running service.

This module holds the parser, the entry point, ``start`` and ``bench``; the other commands live in
``cli_ingest`` (ingest), ``cli_queries`` (ask, search, memories, update, history, forget, delete-user, export,
import, health) and
``cli_keys`` (keys), with their shared plumbing in ``cli_common``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import yaml
from pydantic import ValidationError

from cluster.cli_common import _brief, _Context, _fail
from cluster.cli_ingest import DEFAULT_BATCH, _cmd_ingest_jsonl, _cmd_ingest_locomo
from cluster.cli_keys import _cmd_keys_create, _cmd_keys_list, _cmd_keys_revoke
from cluster.cli_models import _cmd_models_fetch, _cmd_models_list
from cluster.cli_queries import (
    _cmd_ask,
    _cmd_delete_user,
    _cmd_export,
    _cmd_forget,
    _cmd_health,
    _cmd_history,
    _cmd_import,
    _cmd_memories,
    _cmd_search,
    _cmd_update,
)
from cluster.client import DEFAULT_TIMEOUT_S, DEFAULT_URL, EngramClient, EngramHTTPError
from cluster.demo import add_parser as add_demo_parser
from inference.question_kind import QuestionKind
from serve.auth import KeyFileError, KeyStore
from serve.schemas import MAX_BATCH

if TYPE_CHECKING:
    from core.config import AuthConfig

DEFAULT_CONFIG = Path("configs/serve-cpu.yaml")
REPO_ROOT = Path(__file__).resolve().parent.parent
LOOPBACK_WRAPPER = "bin/loopback-only"
_START_ENV_DEFAULTS = {
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}


# ---------------------------------------------------------------- start


def start_command(
    config: Path, environ: Mapping[str, str], python: str = sys.executable, *, haproxy: bool = False
) -> tuple[list[str], dict[str, str]]:
    """The ``serve run`` command line and its environment (``environ`` with the defaults for unset keys; with
    ``haproxy``, Serve's HTTP ingress is HAProxy: ``RAY_SERVE_ENABLE_HA_PROXY=1``, docs/cluster.md).

    ``start_command(Path("c.yaml"), {}, "/v/bin/python")[0] == ["/v/bin/serve", "run", "c.yaml"]``
    """
    env = dict(environ)
    for key, value in _START_ENV_DEFAULTS.items():
        env.setdefault(key, value)
    if haproxy:
        env["RAY_SERVE_ENABLE_HA_PROXY"] = "1"
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
    from core.config import load_config
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
    argv, env = start_command(config, os.environ, haproxy=args.haproxy)
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


# ---------------------------------------------------------------- bench


def bench_modules() -> list[str]:
    """Modules under ``bench/`` that run as programs (they have a ``__main__`` guard).

    NOTE: found by name, not imported: the product never imports the benchmarks (``engram bench`` runs them in a
    child process)."""
    spec = importlib.util.find_spec("bench")
    if spec is None or not spec.submodule_search_locations:
        return []
    folder = Path(next(iter(spec.submodule_search_locations)))
    return sorted(
        p.stem for p in folder.glob("*.py") if not p.stem.startswith("_") and "__main__" in p.read_text("utf-8")
    )


def _cmd_bench(args: argparse.Namespace, _: _Context) -> int:
    known = bench_modules()
    if args.name not in known:
        return _fail(f"unknown benchmark {args.name!r}; known: {', '.join(known)}", code=2)
    return subprocess.run([sys.executable, "-m", f"bench.{args.name}", *args.args], check=False).returncode


# ---------------------------------------------------------------- parser and entry point


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="engram", description="Engram Cluster: long-term memory for LLM agents.")
    p.add_argument("--url", default=os.environ.get("ENGRAM_URL", DEFAULT_URL), help="service URL (env ENGRAM_URL)")
    p.add_argument("--api-key", default=os.environ.get("ENGRAM_API_KEY"), help="bearer token (env ENGRAM_API_KEY)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per request")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("start", help="run the service locally (serve run <config>)")
    s.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="Serve config file")
    s.add_argument("--haproxy", action="store_true",
                   help="HAProxy as the HTTP ingress instead of Serve's Python proxy (the ingress replica then serves "
                   "HTTP itself, without the proxy's hop on every request: docs/results/2026-12-03-cluster.md; its "
                   "own port then listens on every interface: docs/cluster.md)")
    s.set_defaults(run=_cmd_start)
    add_demo_parser(sub)

    ingest = sub.add_parser("ingest", help="post turns").add_subparsers(dest="source", required=True, metavar="SOURCE")
    s = ingest.add_parser("locomo", help="one LoCoMo conversation, in order")
    s.add_argument("conv_id", help="sample id, e.g. conv-26")
    s.add_argument("--user", help="user id (default: the conversation id)")
    s.add_argument("--data", type=Path, help="locomo10.json (default: the config's data.locomo_path)")
    s.add_argument("--batch", type=_batch_size, default=DEFAULT_BATCH, help="turns per request")
    s.set_defaults(run=_cmd_ingest_locomo)
    s = ingest.add_parser("jsonl", help="a JSON-lines file of turns (TurnIn fields, optional user_id)")
    s.add_argument("file", type=Path)
    s.add_argument("--user", required=True, help="user id of lines without one")
    s.add_argument("--batch", type=_batch_size, default=DEFAULT_BATCH, help="turns per request")
    s.set_defaults(run=_cmd_ingest_jsonl)

    s = sub.add_parser("ask", help="answer a question from a user's memory")
    s.add_argument("user")
    s.add_argument("question")
    s.add_argument("--kind", choices=[k.value for k in QuestionKind],
                   help="how to answer (default: the master reads it from the question)")
    _scope_flags(s)
    s.add_argument("--json", action="store_true", help="print the reply as JSON")
    s.set_defaults(run=_cmd_ask)

    s = sub.add_parser("search", help="retrieve memories and segments")
    s.add_argument("user")
    s.add_argument("query")
    s.add_argument("--k", type=int, default=5)
    _scope_flags(s, filters=True)
    s.add_argument("--threshold", type=float, help="only memories scoring at least this")
    s.add_argument("--json", action="store_true", help="print the reply as JSON")
    s.set_defaults(run=_cmd_search)

    s = sub.add_parser("memories", help="list a user's memories")
    s.add_argument("user")
    s.add_argument("--offset", type=int, default=0)
    s.add_argument("--limit", type=int, default=50)
    _scope_flags(s, filters=True)
    s.add_argument("--json", action="store_true", help="print the reply as JSON")
    s.set_defaults(run=_cmd_memories)

    s = sub.add_parser("update", help="change a memory's text (a new version; the old one kept)")
    s.add_argument("user")
    s.add_argument("memory_id")
    s.add_argument("text")
    s.add_argument("--json", action="store_true", help="print the reply as JSON")
    s.set_defaults(run=_cmd_update)

    s = sub.add_parser("history", help="a memory's versions, oldest first")
    s.add_argument("user")
    s.add_argument("memory_id")
    s.add_argument("--json", action="store_true", help="print the reply as JSON")
    s.set_defaults(run=_cmd_history)

    s = sub.add_parser("forget", help="delete one memory, or every memory of an agent / a run")
    s.add_argument("user")
    s.add_argument("memory_id", nargs="?", help="the memory (or give --agent / --run for a whole scope)")
    _scope_flags(s)
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

    models = sub.add_parser("models", help="the registry's models in the local store (no service needed)")
    models = models.add_subparsers(dest="models_command", required=True, metavar="ACTION")
    s = models.add_parser("fetch", help="download a model's parts, assemble, verify its SHA-256, convert (once)")
    s.add_argument("name", help="a registry name (see `engram models list`)")
    s.add_argument("--cache-dir", type=Path, default=None, help="engram cache root (default: paths.cache_dir)")
    s.add_argument("--no-convert", action="store_true", help="stop at the verified GGUF (no HF folder)")
    s.set_defaults(run=_cmd_models_fetch)
    s = models.add_parser("list", help="known models and whether each is absent, verified or converted here")
    s.add_argument("--cache-dir", type=Path, default=None, help="engram cache root (default: paths.cache_dir)")
    s.add_argument("--json", action="store_true", help="print the rows as JSON")
    s.set_defaults(run=_cmd_models_list)

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


def _scope_flags(s: argparse.ArgumentParser, filters: bool = False) -> None:
    s.add_argument("--agent", dest="agent_id", help="scope: this agent's memories only")
    s.add_argument("--run", dest="run_id", help="scope: this run's memories only")
    if filters:
        s.add_argument("--where", action="append", default=[], type=_key_value, metavar="KEY=VALUE",
                       help="metadata equality (repeatable; VALUE is read as JSON when it parses, else as text)")
        s.add_argument("--since", help="event time at or after (ISO 8601)")
        s.add_argument("--until", help="event time before (ISO 8601)")


def _key_value(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = value
    return key, parsed if isinstance(parsed, str | int | float | bool) else value


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
