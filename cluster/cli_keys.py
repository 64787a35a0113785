"""``engram keys create | list | revoke``: the keys file (``auth.keys_file``), edited directly; no service needed."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cluster.cli_common import _Context, _fail
from serve.auth import CREATE_HINT, ApiKey, KeyFileError, KeyStore


def _keys_file(args: argparse.Namespace) -> Path:
    if args.keys_file is not None:
        return args.keys_file
    from core.config import load_config

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
