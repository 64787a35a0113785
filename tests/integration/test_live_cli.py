"""The service as a newcomer starts it: ``engram start`` (hence ``serve run configs/serve-cpu.yaml``) as a subprocess
on a fresh keys file and state folder, the admin key it prints, and the real ``engram`` CLI against it — the
README's service commands: ingest, ask, search, memories, update, history, export, import, a wrong key (refused),
delete-user.

The service gets its own local Ray (``RAY_ADDRESS=local``: never the test session's cluster) and a free port
(a copy of serve-cpu.yaml with only ``http_options.port`` changed)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import httpx
import pytest
import yaml

from cluster.local_cluster import free_port
from core.config import REPO_ROOT

KEY = re.compile(r"^\s+(ek_\S+)\s*$")


def engram_cmd() -> list[str]:
    """The ``engram`` entry point (``cluster.cli:main``) of this checkout, run from the repository root."""
    return [sys.executable, "-m", "cluster.cli"]


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    root = tmp_path_factory.mktemp("live")
    port = free_port()
    config = yaml.safe_load((REPO_ROOT / "configs" / "serve-cpu.yaml").read_text())
    config["http_options"]["port"] = port
    (root / "serve.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "RAY_ADDRESS": "local", "ENGRAM_AUTH__KEYS_FILE": str(root / "keys.json"),
           "ENGRAM_CLUSTER__STORAGE_DIR": str(root / "state"), "ENGRAM_CLUSTER__NAMESPACE": "live-cli"}
    log = (root / "start.log").open("w+")
    proc = subprocess.Popen([*engram_cmd(), "start", "--config", str(root / "serve.yaml")], env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True, cwd=REPO_ROOT)
    url, key, deadline = f"http://127.0.0.1:{port}", None, time.time() + 600
    try:
        while True:
            text = (root / "start.log").read_text()
            key = key or next((m.group(1) for line in text.splitlines() if (m := KEY.match(line))), None)
            if key is not None:
                try:
                    if httpx.get(f"{url}/v1/health", timeout=5).json().get("status") == "ok":
                        break
                except (httpx.TransportError, ValueError):
                    pass
            if proc.poll() is not None or time.time() > deadline:
                pytest.fail(f"engram start did not come up (exit {proc.poll()}):\n{text[-3000:]}")
            time.sleep(2)
        yield url, key, root
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)  # serve run's Ctrl-C: it shuts the service and its Ray down
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        log.close()


def cli(url: str, key: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*engram_cmd(), "--url", url, "--api-key", key, *args], capture_output=True, text=True,
                          timeout=600, cwd=REPO_ROOT)


def test_the_readme_commands_against_a_live_service(live):
    url, key, root = live
    turns = [{"id": f"L{i}", "speaker": "Ann" if i % 2 else "Bo", "text": text,
              "timestamp": f"2023-05-0{1 + i // 3}T10:0{i % 3}:00"} for i, text in enumerate([
                  "I adopted a grey cat named Pixel last week.", "That is lovely, does Pixel like the garden?",
                  "Pixel sleeps in the garden shed all afternoon.", "I started learning the cello in March.",
                  "My cello teacher lives in Leeds.", "I bought new cello strings on Friday."])]
    (root / "turns.jsonl").write_text("".join(json.dumps(t) + "\n" for t in turns))

    r = cli(url, key, "ingest", "jsonl", str(root / "turns.jsonl"), "--user", "ann")
    assert r.returncode == 0 and "6 turns posted" in r.stdout, r.stdout + r.stderr
    r = cli(url, key, "ask", "ann", "What is the name of the cat?", "--json")
    assert r.returncode == 0, r.stderr
    reply = json.loads(r.stdout)
    assert reply["evidence"] and reply["tokens"]["total"] > 0
    r = cli(url, key, "search", "ann", "cello teacher")
    assert r.returncode == 0 and "memories:" in r.stdout and "segments" in r.stdout, r.stdout
    r = cli(url, key, "memories", "ann", "--json")
    listed = json.loads(r.stdout)
    assert r.returncode == 0 and listed["total"] >= 1, r.stdout
    memory = listed["memories"][0]["id"]
    r = cli(url, key, "update", "ann", memory, "Pixel is a grey cat, adopted in late April.")
    assert r.returncode == 0 and "adopted in late April" in r.stdout, r.stderr
    r = cli(url, key, "history", "ann", memory)
    assert r.returncode == 0 and "2 version(s)" in r.stdout and "UPDATE" in r.stdout, r.stdout + r.stderr
    r = cli(url, key, "export", "ann", "-o", str(root / "ann.jsonl"))
    assert r.returncode == 0 and (root / "ann.jsonl").stat().st_size > 0, r.stderr
    r = cli(url, key, "import", "ann-copy", str(root / "ann.jsonl"))
    assert r.returncode == 0 and f"imported {listed['total']} memories" in r.stdout, r.stdout + r.stderr
    r = cli(url, "ek_not_a_real_key", "ask", "ann", "What is the cat called?")
    assert r.returncode == 1 and "401" in r.stderr, r.stderr
    for user in ("ann", "ann-copy"):
        r = cli(url, key, "delete-user", user)
        assert r.returncode == 0 and f"{user}: deleted" in r.stdout, r.stderr
    r = cli(url, key, "memories", "ann")
    assert r.returncode == 0 and "0 of 0 memories" in r.stdout, r.stdout
