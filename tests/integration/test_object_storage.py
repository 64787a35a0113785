"""Journals in an object store: a tier-shard actor journaled under ``s3://`` (a real S3 API: moto's server, on
loopback) is killed, Ray restarts it, and it comes back from the bucket with every acknowledged write."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import ray

from actors.remote import TierShardActor
from cluster.local_cluster import free_port
from core.config import load_config
from serve.topology import Topology, storage_root
from tests.doubles import HashingEncoder

s3fs = pytest.importorskip("s3fs", reason="pip install -e '.[dev]' (s3fs, moto[server])")
MOTO = Path(sys.executable).with_name("moto_server")
BUCKET = "engram-journals"
CREDENTIALS = {"key": "testing", "secret": "testing"}  # moto accepts any; never real ones in a test


@pytest.fixture(scope="module")
def s3_endpoint():
    if not MOTO.exists() and shutil.which("moto_server") is None:
        pytest.skip("moto_server not installed (pip install -e '.[dev]')")
    port = free_port()
    proc = subprocess.Popen([str(MOTO) if MOTO.exists() else "moto_server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            httpx.get(url, timeout=1)
            break
        except httpx.TransportError:
            time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("moto_server did not start")
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def options(endpoint: str) -> dict:
    return {**CREDENTIALS, "client_kwargs": {"endpoint_url": endpoint, "region_name": "eu-west-1"}}


def test_a_killed_actor_restores_from_the_bucket(ray_cluster, s3_endpoint):
    fs = s3fs.S3FileSystem(**options(s3_endpoint))
    fs.mkdir(BUCKET)
    config = load_config("cpu", {"cluster": {"storage_dir": f"s3://{BUCKET}/tests", "namespace": "objstore",
                                             "storage_options": options(s3_endpoint)}})
    topo = Topology(config, {k: [] for k in Topology.KINDS}, dim=32)
    assert storage_root(config) == f"s3://{BUCKET}/tests/objstore"
    journal = topo.journal_dir("tier-0")
    assert journal == f"s3://{BUCKET}/tests/objstore/tier-0"
    Topology.check_storage(config)  # the placement record goes to the bucket
    assert fs.exists(f"{BUCKET}/tests/objstore/placement.json")

    enc = HashingEncoder(32)
    texts = [f"note {i}: the locker code is {i * 7919 % 1000}" for i in range(30)]
    actor = TierShardActor.options(name="objstore-tier-0", namespace="objstore", max_restarts=1,
                                   max_task_retries=0).remote(config.tiers, 32, journal_dir=journal,
                                                              snapshot_every=4,
                                                              storage_options=config.cluster.storage_options)
    for start in range(0, 30, 5):
        batch = texts[start : start + 5]
        ray.get(actor.add.remote("ann", [f"m{start + j}" for j in range(5)], batch, enc.encode(batch), [0.5] * 5,
                                 [{"speaker": "Ann"}] * 5))
    ray.get(actor.delete.remote("ann", ["m3"]))
    before = ray.get(actor.list.remote("ann", 0, 100))
    objects = fs.find(f"{BUCKET}/tests/objstore/tier-0")
    assert any("snapshot-" in o for o in objects) and any("/log-" in o for o in objects)

    pid = ray.get(actor.__ray_call__.remote(lambda self: os.getpid()))
    os.kill(pid, signal.SIGKILL)  # Ray restarts it: __init__ reloads the snapshot and records from the bucket
    deadline = time.time() + 180
    while True:
        try:
            now, recovered = ray.get(actor.__ray_call__.remote(lambda self: (os.getpid(), self.recovered)),
                                     timeout=30)
            if now != pid:
                break
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            pass
        if time.time() > deadline:
            pytest.fail("the actor did not come back")
        time.sleep(1)
    assert 0 < recovered < 7  # the records after the last snapshot; the rest came from the snapshot object
    after = ray.get(actor.list.remote("ann", 0, 100))
    assert [(m.id, m.text) for m in after[0]] == [(m.id, m.text) for m in before[0]] and after[1] == 29
    assert ray.get(actor.get.remote("ann", "m3")) is None
    hits = ray.get(actor.search.remote("ann", "locker", enc.encode([texts[7]], is_query=True)[0], 1))
    assert hits[0].id == "m7"
    ray.kill(actor, no_restart=True)
    fs.rm(BUCKET, recursive=True)
