"""One Ray cluster for the integration tests: a head node and a worker node on this machine, both
started with ``ray start`` (inside the loopback namespace), and the whole service on Serve.

The Serve replicas need the custom resource ``engram_head`` so that they stay on the head node; the
stateful actors are spread over both nodes (``cluster.placement: spread``). The worker node runs in
its own process group so that ``test_worker_loss`` can kill it by its own process ids.

API keys are on, as served: ``KEYS_FILE`` (a fresh temporary file) holds ``ADMIN_KEY``, made when this module
is imported, before ``build_app`` checks that the file holds a key. Clients send it with ``auth_headers``.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pytest

from bench.common import admin_key, bearer
from cluster.local_cluster import RAY, LocalCluster, alive_nodes, free_port

NAMESPACE = "engram-test"
STORAGE = Path(tempfile.mkdtemp(prefix="engram-state-"))  # the actors' journals for this test session
SPANS = Path(tempfile.mkdtemp(prefix="engram-spans-")) / "spans.jsonl"  # the ingress's trace spans (file exporter)
# the service's API keys: a fresh file with one admin key (ENGRAM_AUTH__* dropped: it would win over the config)
KEYS_FILE, ADMIN_KEY = admin_key(tempfile.mkdtemp(prefix="engram-keys-"))
auth_headers = bearer  # {"Authorization": "Bearer <key>"}, for httpx clients


def service_args(namespace: str = NAMESPACE) -> dict:
    """The service as the tests run it: transformers engine (starts in seconds), store-all admission,
    short segments so that a few dozen turns close several of them, spans to a file."""
    on_head = {"resources": {"engram_head": 1}}
    return {
        "profile": "cpu",
        "config": {
            "engine": {"backend": "transformers", "max_model_len": 2048},
            "admission": {"mode": "store_all"},
            "episodic": {"segment_tokens": 160, "evidence_per_segment": 3},
            "cluster": {"namespace": namespace, "tier_shards": 2, "assistant_actors": 2, "router_shards": 1,
                        "actor_call_timeout_s": 120, "storage_dir": str(STORAGE), "snapshot_every": 50},
            "auth": {"keys_file": str(KEYS_FILE)},
            "tiers": {"l1": {"capacity": 20}, "l2": {"capacity": 200}},
            "tracing": {"enabled": True, "exporter": "file", "file_path": str(SPANS)},
        },
        **{name: on_head for name in ("ingress", "embedder", "admission", "llm", "master")},
    }


# The order the modules run in (others after them, by name). The service is shared, and every closed segment
# queues a background summary on its small-model pool: the tests that wait until the background is idle
# (identity, tenancy) come before those that leave many summaries behind (chaos, fuzz, load), so that they wait
# for their own summaries only, and fewer summaries compete for the two cores with the concurrent tests. The
# loss of the worker node comes last.
MODULE_ORDER = ("test_admission_deployment", "test_admission_http", "test_auth", "test_read_path_identity",
                "test_tenancy", "test_service", "test_object_storage", "test_console", "test_live_cli", "test_chaos",
                "test_fuzz", "test_load",
                "test_worker_loss")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    slots = [i for i, item in enumerate(items) if item.path.parent == here]

    def rank(item: pytest.Item) -> tuple[int, str]:
        name = item.path.stem
        return (MODULE_ORDER.index(name) if name in MODULE_ORDER else len(MODULE_ORDER), name)

    ordered = sorted((items[i] for i in slots), key=rank)  # stable: a module's tests keep their order
    for i, item in zip(slots, ordered, strict=True):
        items[i] = item


@pytest.fixture(scope="session")
def ray_cluster():
    if shutil.which(RAY) is None:
        pytest.fail(f"{RAY} not found: install the project first (bash install.sh)")
    import ray

    cluster = LocalCluster()
    cluster.start_head()
    cluster.start_worker()
    try:
        ray.init(address=cluster.address, namespace="test", include_dashboard=False, log_to_driver=False)
        deadline = time.time() + 60
        while len(alive_nodes()) < 2:
            if time.time() > deadline:
                pytest.fail("the worker node did not join within 60 s")
            time.sleep(0.5)
        yield cluster
    finally:
        ray.shutdown()
        cluster.stop()


@pytest.fixture(scope="session")
def serve_url(ray_cluster):
    """Serve's HTTP proxy on a free loopback port (started once: later http_options would be ignored)."""
    from ray import serve

    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port}, proxy_location="HeadOnly")
    yield f"http://127.0.0.1:{port}"
    serve.shutdown()


@pytest.fixture(scope="session")
def service(serve_url):
    """The whole service on Serve; yields its base URL."""
    from ray import serve

    from serve.app import build_app

    serve.run(build_app(service_args()), name="engram", route_prefix="/")
    yield serve_url
    shutil.rmtree(STORAGE, ignore_errors=True)
    shutil.rmtree(KEYS_FILE.parent, ignore_errors=True)
