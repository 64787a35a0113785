"""Multi-node: tier shards and assistants on both nodes, then the worker node dies (SIGKILL of its
process group). The API keeps answering; the actors are revived on the head and restore their journals
(the test cluster's storage directory is on this machine, reachable from both nodes): nothing is lost.

Runs after test_service.py (file order) on the same two-node cluster and service (conftest).
"""

from __future__ import annotations

import time

import httpx
import pytest
import ray

from core.config import load_config
from serve.topology import Topology
from tests.integration.conftest import ADMIN_KEY, alive_nodes, auth_headers, service_args

TENANTS = [f"tenant-{i}" for i in range(8)]
PER_TENANT = 6


def node_of(actor) -> str:
    return ray.get(actor.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id()), timeout=60)


def retry(call, deadline_s: float = 120.0) -> httpx.Response:
    """The response once it is not a 503 (an actor restarting), within the deadline."""
    deadline = time.time() + deadline_s
    while True:
        r = call()
        if r.status_code != 503 or time.time() > deadline:
            return r
        time.sleep(1.0)


@pytest.fixture(scope="module")
def client(service):
    with httpx.Client(base_url=service, timeout=300, headers=auth_headers(ADMIN_KEY)) as c:
        yield c


def test_api_survives_the_loss_of_a_worker_node(ray_cluster, client):
    for tenant in TENANTS:
        turns = [{"id": f"t{i}", "speaker": "user", "text": f"{tenant} note {i}: the locker code is {i}{i}{i}."}
                 for i in range(PER_TENANT)]
        r = client.post("/v1/turns", json={"user_id": tenant, "turns": turns})
        assert r.status_code == 200, r.text

    config = load_config("cpu", service_args()["config"])
    topo = Topology.connect(config)
    head = next(n["NodeID"] for n in alive_nodes() if "node:__internal_head__" in n["Resources"])
    placement = {name: node_of(a) for name, a in topo.all().items()}
    # round_robin placement: actor i of each kind on node i % 2, so both nodes hold a tier shard and an assistant
    assert {name.split("-")[0] for name, n in placement.items() if n != head} >= {"tier", "assistants"}, placement
    assert {name.split("-")[0] for name, n in placement.items() if n == head} >= {"tier", "assistants"}, placement
    on_worker = {t for t in TENANTS if placement[f"tier-{topo.tiers.index(topo.tier_for(t))}"] != head}

    ray_cluster.kill_worker()
    deadline = time.time() + 60
    while len(alive_nodes()) > 1:
        assert time.time() < deadline, "the killed worker node is still listed as alive"
        time.sleep(0.5)

    lost, statuses = {}, []
    for tenant in TENANTS:
        r = retry(lambda t=tenant: client.get("/v1/memories", params={"user_id": t, "limit": 100}))
        statuses.append(r.status_code)
        lost[tenant] = PER_TENANT - r.json()["total"] if r.status_code == 200 else None
        s = retry(lambda t=tenant: client.post("/v1/search", json={"user_id": t, "query": "locker code"}))
        statuses.append(s.status_code)
    assert statuses == [200] * len(statuses), statuses
    print(f"\nworker loss: tenants on the worker's shard: {sorted(on_worker)}; memories lost per tenant: {lost}")
    assert on_worker and all(n == 0 for n in lost.values()), lost

    health = retry(lambda: client.get("/v1/health"))
    assert health.status_code == 200 and health.json()["status"] == "ok", health.text
    revived = Topology.connect(config)  # the names now point at the actors revived on the head
    assert all(node_of(a) == head for a in revived.all().values())

    # Writes work again, also for a tenant whose shard was revived.
    tenant = sorted(on_worker)[0] if on_worker else TENANTS[0]
    r = client.post("/v1/turns", json={"user_id": tenant, "turns": [{"speaker": "user", "text": "after the loss"}]})
    assert r.status_code == 200, r.text


def test_a_killed_actor_restarts_with_its_memories(ray_cluster, client):
    """SIGKILL the process of a tier shard: Ray restarts it, its __init__ replays the journal."""
    import os
    import signal

    tenant = TENANTS[0]
    before = client.get("/v1/memories", params={"user_id": tenant, "limit": 100}).json()["total"]
    topo = Topology.connect(load_config("cpu", service_args()["config"]))
    shard = topo.tier_for(tenant)
    pid = ray.get(shard.__ray_call__.remote(lambda self: os.getpid()), timeout=60)
    os.kill(pid, signal.SIGKILL)
    r = retry(lambda: client.get("/v1/memories", params={"user_id": tenant, "limit": 100}))
    assert r.status_code == 200 and r.json()["total"] == before > 0
    assert ray.get(shard.__ray_call__.remote(lambda self: os.getpid()), timeout=60) != pid
