"""The ``engram`` CLI against the in-memory API (tests/fake_engram.py); ``start`` and ``bench`` never spawn anything."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import httpx
import pytest

from cluster import cli
from serve.auth import KeyStore
from serve.schemas import AskResponse
from tests.fake_engram import FakeEngram


@pytest.fixture
def fake() -> FakeEngram:
    return FakeEngram()


def run(fake: FakeEngram, *argv: str) -> int:
    return cli.main(["--url", "http://engram.test", *argv], transport=fake.transport())


# ---------------------------------------------------------------- ingest jsonl


def _write_jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_jsonl_bad_line_is_reported_skipped_and_exit_1(fake, tmp_path, capsys) -> None:
    good = [{"id": f"D1:{i}", "speaker": "Ann", "text": f"turn {i}", "timestamp": f"2023-05-0{i}T10:00:00"}
            for i in range(1, 8)]
    lines = [json.dumps(t) for t in good]
    lines.insert(2, '{"id": "D1:x", "speaker": "Ann"')  # line 3: broken JSON
    lines.insert(4, "")  # blank lines are not errors
    path = _write_jsonl(tmp_path / "turns.jsonl", lines)

    assert run(fake, "ingest", "jsonl", str(path), "--user", "ann/1", "--batch", "3") == 1

    err = capsys.readouterr().err
    assert f"{path}:3:" in err and "1 bad line skipped" in err
    assert [len(b.turns) for b in fake.batches] == [3, 3, 1]
    assert {b.user_id for b in fake.batches} == {"ann/1"}
    posted = [t for b in fake.batches for t in b.turns]
    assert [t.id for t in posted] == [t["id"] for t in good]
    assert posted[4].timestamp.isoformat() == "2023-05-05T10:00:00"


def test_jsonl_user_override_splits_batches_and_invalid_fields_are_bad(fake, tmp_path, capsys) -> None:
    lines = [
        json.dumps({"id": "a1", "speaker": "Ann", "text": "one"}),
        json.dumps({"id": "b1", "speaker": "Bob", "text": "two", "user_id": "bob"}),
        json.dumps({"id": "a2", "speaker": "Ann", "text": "three"}),
        json.dumps({"id": "a3", "speaker": "Ann", "text": "four", "mood": "happy"}),  # unknown field
        json.dumps({"id": "a4", "speaker": "Ann", "text": ""}),  # empty text
        json.dumps(["not", "an", "object"]),
    ]
    path = _write_jsonl(tmp_path / "t.jsonl", lines)

    assert run(fake, "ingest", "jsonl", str(path), "--user", "ann") == 1

    posted = [(b.user_id, [t.id for t in b.turns]) for b in fake.batches]
    assert posted == [("ann", ["a1"]), ("bob", ["b1"]), ("ann", ["a2"])]
    err = capsys.readouterr().err
    assert all(f"{path}:{n}:" in err for n in (4, 5, 6)) and f"{path}:3:" not in err
    assert "mood" in err and "3 bad lines skipped" in err


def test_jsonl_all_good_exits_0_with_summary(fake, tmp_path, capsys) -> None:
    path = _write_jsonl(tmp_path / "t.jsonl", [json.dumps({"speaker": "a", "text": w}) for w in ("hi", "um", "yes")])
    assert run(fake, "ingest", "jsonl", str(path), "--user", "u") == 0
    assert "3 turns posted, 2 admitted" in capsys.readouterr().out


# ---------------------------------------------------------------- ingest locomo


def _locomo_path() -> Path:
    from core.config import load_config

    try:
        return load_config().data.locomo_path
    except FileNotFoundError:
        pytest.skip("no config profile to read data.locomo_path from")


def test_locomo_ingest_posts_every_turn_in_order(fake, capsys) -> None:
    path = _locomo_path()
    if not path.is_file():
        pytest.skip(f"LoCoMo not found at {path}")
    from corpora.locomo import load_locomo

    conv = next(c for c in load_locomo(path) if c.sample_id == "conv-30")

    assert run(fake, "ingest", "locomo", "conv-30", "--batch", "16") == 0  # --data defaults to the config's path

    posted = [(b.user_id, b.session_id, t) for b in fake.batches for t in b.turns]
    assert len(posted) == len(conv.turns)
    for (user_id, session_id, got), want in zip(posted, conv.turns, strict=True):
        assert user_id == "conv-30" and session_id == f"session_{want.session}"
        assert (got.id, got.speaker, got.text) == (want.dia_id, want.speaker, want.text)
        assert (got.timestamp, got.date_time) == (want.timestamp, want.date_time)
    assert all(1 <= len(b.turns) <= 16 for b in fake.batches)
    admitted = sum(1 for t in conv.turns if not t.text.lower().startswith("um"))
    out = capsys.readouterr().out
    assert f"{len(conv.turns)} turns posted, {admitted} admitted" in out


def test_locomo_unknown_conversation_lists_known(fake, capsys) -> None:
    path = _locomo_path()
    if not path.is_file():
        pytest.skip(f"LoCoMo not found at {path}")
    assert run(fake, "ingest", "locomo", "conv-999", "--data", str(path), "--user", "x") == 1
    assert "conv-26" in capsys.readouterr().err and fake.requests == []


# ---------------------------------------------------------------- queries and errors


def _seed(fake: FakeEngram) -> None:
    from cluster.client import EngramClient

    with EngramClient(transport=fake.transport()) as c:
        c.add_turns("ann", [
            {"id": "D1:3", "speaker": "Ann", "text": "I adopted a dog named Rex", "timestamp": "2023-05-08T13:56:00"},
            {"id": "D1:4", "speaker": "Bob", "text": "Rex is a great name"},
        ])


def test_ask_prints_answer_evidence_and_tokens(fake, capsys) -> None:
    _seed(fake)
    assert run(fake, "ask", "ann", "What dog did Ann adopt?", "--kind", "fact") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "I adopted a dog named Rex"
    assert "  2023-05-08 13:56  D1:3  I adopted a dog named Rex" in out
    assert out[-1].startswith("tokens: assistants 120") and out[-1].endswith("total 175")
    assert json.loads(fake.requests[-1].content)["kind"] == "fact"

    assert run(fake, "ask", "ann", "Rex?", "--json") == 0
    assert AskResponse.model_validate_json(capsys.readouterr().out).evidence[0].turn_id in {"D1:3", "D1:4"}


def test_search_memories_forget_and_delete_user(fake, capsys) -> None:
    _seed(fake)
    assert run(fake, "search", "ann", "dog", "--k", "2") == 0
    out = capsys.readouterr().out
    assert "I adopted a dog named Rex" in out and "segments: none" in out

    assert run(fake, "forget", "ann", "D1:3") == 0
    assert fake.requests[-1].url.raw_path.decode() == "/v1/memories/D1%3A3?user_id=ann"
    assert run(fake, "memories", "ann") == 0
    out = capsys.readouterr().out
    assert "1 of 1 memories" in out and "D1:4" in out and "D1:3  " not in out

    assert run(fake, "delete-user", "ann") == 0
    assert "deleted 1 memories, 2 turns" in capsys.readouterr().out
    assert fake.memories == {} and fake.turns == {}


def test_export_to_a_file_and_import_under_another_user(fake, tmp_path, capsys) -> None:
    _seed(fake)
    out = tmp_path / "ann.jsonl"
    assert run(fake, "export", "ann", "-o", str(out)) == 0
    assert "2 lines written" in capsys.readouterr().err and out.read_text().count("\n") == 2
    assert fake.requests[-1].url.raw_path.decode() == "/v1/users/ann/export"
    assert run(fake, "import", "ann-copy", str(out)) == 0
    assert "ann-copy: imported 2 memories, 0 segments" in capsys.readouterr().out
    assert fake.memories["ann-copy"] == fake.memories["ann"]
    assert run(fake, "import", "ann-copy", str(out)) == 1  # the user holds memories now
    assert "error (409 conflict_error)" in capsys.readouterr().err
    assert run(fake, "import", "bob", str(tmp_path / "missing.jsonl")) == 1
    assert "missing.jsonl" in capsys.readouterr().err
    assert run(fake, "export", "ann") == 0
    assert capsys.readouterr().out == out.read_text()


def test_http_error_prints_status_and_type_and_exits_1(fake, capsys) -> None:
    assert run(fake, "forget", "ann", "D9:9") == 1
    err = capsys.readouterr().err
    assert err.startswith("error (404 not_found_error): ") and "D9:9" in err


def test_api_key_option_reaches_the_server(capsys) -> None:
    fake = FakeEngram(api_key="k1")
    assert run(fake, "health") == 1
    assert "error (401 authentication_error)" in capsys.readouterr().err
    assert run(fake, "--api-key", "k1", "health") == 0
    assert "ok (version test)" in capsys.readouterr().out


def test_connection_error_hints_at_engram_start(capsys) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    assert cli.main(["health"], transport=httpx.MockTransport(refuse)) == 2
    assert "engram start" in capsys.readouterr().err


# ---------------------------------------------------------------- bench and start


def test_bench_unknown_name_lists_known_modules(capsys) -> None:
    assert cli.main(["bench", "no_such_bench"]) == 2
    err = capsys.readouterr().err
    assert "no_such_bench" in err and "locomo" in err and "tiers" in err
    assert "locomo_data" not in err  # a library module, not a program


def test_bench_runs_the_module_with_this_interpreter(monkeypatch) -> None:
    seen = []

    def fake_run(argv, check):
        seen.append(argv)
        return type("Done", (), {"returncode": 3})()

    monkeypatch.setattr(cli.subprocess, "run", fake_run)
    assert cli.main(["bench", "tiers", "--quick", "--seeds", "1"]) == 3
    assert seen == [[sys.executable, "-m", "bench.tiers", "--quick", "--seeds", "1"]]


def test_start_command_uses_serve_next_to_python_and_env_defaults() -> None:
    argv, env = cli.start_command(Path("/c/serve.yaml"), {"RAY_AUTH_MODE": "token", "PATH": "/bin"}, "/venv/bin/python")
    assert argv == ["/venv/bin/serve", "run", "/c/serve.yaml"]
    assert env["RAY_AUTH_MODE"] == "token"  # an explicit setting wins
    assert (env["RAY_USAGE_STATS_ENABLED"], env["HF_HUB_OFFLINE"], env["TRANSFORMERS_OFFLINE"]) == ("0", "1", "1")
    assert env["PATH"] == "/bin"
    assert cli.start_command(Path("c.yaml"), {}, "/p/python")[1]["RAY_AUTH_MODE"] == "disabled"
    assert "RAY_SERVE_ENABLE_HA_PROXY" not in env  # Serve's own proxy unless asked
    assert cli.start_command(Path("c.yaml"), {}, "/p/python", haproxy=True)[1]["RAY_SERVE_ENABLE_HA_PROXY"] == "1"


def test_start_prints_url_and_loopback_hint_then_execs_serve(monkeypatch, tmp_path, capsys) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text("http_options: {host: 127.0.0.1, port: 8123}\napplications: []\n")
    calls = []
    monkeypatch.setattr(cli.os, "execvpe", lambda file, args, env: calls.append((file, args, env)))
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    monkeypatch.setenv("ENGRAM_AUTH__REQUIRED", "false")  # the admin key on a first start: its own test below
    if not Path(sys.executable).with_name("serve").is_file():
        pytest.skip("no serve executable next to this interpreter")

    assert cli.main(["start", "--config", str(config)]) == 0

    out = capsys.readouterr().out
    assert "http://127.0.0.1:8123" in out and "loopback-only" in out
    ((file, args, env),) = calls
    assert args == [str(Path(sys.executable).with_name("serve")), "run", str(config.resolve())] and file == args[0]
    assert env["RAY_AUTH_MODE"] == "disabled" and env["PATH"] == os.environ["PATH"]


def test_start_default_config_is_the_repo_cpu_profile() -> None:
    assert cli.serve_url(cli._resolve_config(cli.DEFAULT_CONFIG)) == "http://127.0.0.1:8000"


def test_start_makes_an_admin_key_once_in_the_served_configs_keys_file(monkeypatch, tmp_path, capsys) -> None:
    keys_file = tmp_path / "served-keys.json"
    config = tmp_path / "serve.yaml"
    config.write_text("applications:\n  - name: engram\n    import_path: serve.app:build_app\n    args:\n"
                      f"      profile: cpu\n      config: {{auth: {{keys_file: {keys_file}}}}}\n")
    monkeypatch.setattr(cli.os, "execvpe", lambda file, args, env: None)
    monkeypatch.setattr(cli, "start_command", lambda config, environ, haproxy: ([sys.executable], dict(environ)))
    monkeypatch.delenv("ENGRAM_AUTH__KEYS_FILE", raising=False)
    monkeypatch.delenv("ENGRAM_AUTH__REQUIRED", raising=False)
    KeyStore(keys_file).create(["alice"])  # a tenant key is not enough to administer the service

    assert cli.main(["start", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    (admin,) = [k for k in KeyStore(keys_file).list() if k.admin]
    plaintext = next(w for w in out.split() if w.startswith(f"ek_{admin.key_id}_"))
    assert f"export ENGRAM_API_KEY={plaintext}" in out
    assert KeyStore(keys_file).authorize(plaintext, "anyone", admin=True) == admin

    assert cli.main(["start", "--config", str(config)]) == 0  # the next start: no new key, no banner
    assert "ek_" not in capsys.readouterr().out and len(KeyStore(keys_file).list()) == 2

    monkeypatch.setenv("ENGRAM_AUTH__REQUIRED", "false")
    keys_file.unlink()
    assert cli.main(["start", "--config", str(config)]) == 0 and not keys_file.exists()


# ---------------------------------------------------------------- keys


def test_keys_create_list_revoke_against_the_configured_file(monkeypatch, tmp_path, capsys) -> None:
    keys_file = tmp_path / "k" / "api-keys.json"
    monkeypatch.setenv("ENGRAM_AUTH__KEYS_FILE", str(keys_file))  # the default: load_config().auth.keys_file

    assert cli.main(["keys", "create", "--tenant", "alice", "--tenant", "bob", "--name", "ci"]) == 0
    captured = capsys.readouterr()
    plaintext = captured.out.strip()  # stdout is the key alone: KEY=$(engram keys create ...)
    assert plaintext.startswith("ek_") and f"export ENGRAM_API_KEY={plaintext}" in captured.err
    assert plaintext not in keys_file.read_text()
    key = KeyStore(keys_file).authorize(plaintext, "bob")
    assert (key.name, key.tenants, key.admin) == ("ci", ["alice", "bob"], False)

    assert cli.main(["keys", "create", "--admin"]) == 0
    capsys.readouterr()
    assert cli.main(["keys", "list"]) == 0
    out = capsys.readouterr().out
    assert "2 API keys" in out and f"{key.key_id}" in out and "alice,bob" in out and "admin" in out
    assert "ek_" not in out and key.sha256 not in out
    assert cli.main(["keys", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [k["key_id"] for k in listed][0] == key.key_id and all("sha256" not in k for k in listed)

    assert cli.main(["keys", "revoke", key.key_id]) == 0
    assert key.key_id in capsys.readouterr().out
    assert [k.key_id for k in KeyStore(keys_file).list()] == [listed[1]["key_id"]]
    assert cli.main(["keys", "revoke", key.key_id]) == 1
    assert "no API key" in capsys.readouterr().err


def test_keys_errors_bad_tenant_no_scope_corrupt_file(tmp_path, capsys) -> None:
    keys_file = tmp_path / "api-keys.json"
    assert cli.main(["keys", "create", "--tenant", "bad id", "--keys-file", str(keys_file)]) == 2
    assert "not a valid user id" in capsys.readouterr().err
    assert cli.main(["keys", "create", "--keys-file", str(keys_file)]) == 2  # neither --tenant nor --admin
    assert not keys_file.exists()
    assert cli.main(["keys", "list", "--keys-file", str(keys_file)]) == 0
    assert "engram keys create --tenant USER" in capsys.readouterr().out
    keys_file.write_text("{oops")
    assert cli.main(["keys", "create", "--admin", "--keys-file", str(keys_file)]) == 1
    assert str(keys_file) in capsys.readouterr().err and keys_file.read_text() == "{oops"


def test_scoped_memories_update_history_and_scope_forget(fake, capsys) -> None:
    from cluster.client import EngramClient

    with EngramClient("http://engram.test", transport=fake.transport()) as c:
        c.add_turns("ann", [{"id": "m1", "speaker": "ann", "text": "I live in New York"}], agent_id="coach")
        c.add_turns("ann", [{"id": "m2", "speaker": "ann", "text": "I like tea"}], agent_id="chef", run_id="r9")
    assert run(fake, "memories", "ann", "--agent", "chef", "--where", "speaker=ann") == 0
    out = capsys.readouterr().out
    assert "1 of 1 memories" in out and "m2" in out
    assert dict(fake.requests[-1].url.params)["metadata"] == '{"speaker": "ann"}'

    assert run(fake, "update", "ann", "m1", "I live in Boston") == 0
    assert "m1: I live in Boston" in capsys.readouterr().out
    assert run(fake, "history", "ann", "m1") == 0
    out = capsys.readouterr().out
    assert "2 version(s)" in out and "v1" in out and "I live in New York" in out and "UPDATE  I live in Boston" in out

    assert run(fake, "forget", "ann") == 2 and "not both" in capsys.readouterr().err
    assert run(fake, "forget", "ann", "m1", "--run", "r9") == 2
    assert run(fake, "forget", "ann", "--run", "r9") == 0
    assert "deleted 1 memories" in capsys.readouterr().out
    assert list(fake.memories["ann"]) == ["m1"]
    assert run(fake, "ask", "ann", "Boston?", "--agent", "coach") == 0
    assert json.loads(fake.requests[-1].content)["agent_id"] == "coach"


def test_demo_runs_the_cpu_service_with_its_own_state_and_key_file(tmp_path) -> None:
    from cluster.demo import DEMO_CONFIG, app_args
    from serve.args import AppArgs

    args = AppArgs.model_validate(app_args(DEMO_CONFIG, tmp_path))
    cluster = args.config["cluster"]
    assert args.profile == "cpu" and cluster["storage_dir"] == str(tmp_path / "journals")
    assert cluster["namespace"] == "engram-demo" and cluster["tier_shards"] == 2  # the rest of serve-cpu.yaml stays
    assert args.config["auth"] == {"required": True, "keys_file": str(tmp_path / "keys.json")}
    assert args.config["admission"]["mode"] == "classifier"
    parsed = cli.build_parser().parse_args(["demo", "--questions", "2"])
    assert parsed.conversation == "conv-26" and parsed.questions == 2
