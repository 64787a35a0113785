"""The learned admission over HTTP: a second engram application with ``admission.mode: classifier`` and the
committed heads (``admission.weights: packaged``) decides each posted turn as the same classifier does
in-process, and stores exactly the turns it admits (in the tiers and the episodic stream)."""

from __future__ import annotations

import json
import shutil
import tempfile

import httpx
import numpy as np
import pytest

from core.config import load_config
from corpora.locomo import load_locomo
from inference.admission import SETTINGS_FILE, AdmissionClassifier, ChunkStream, packaged_weights
from tests.integration.conftest import ADMIN_KEY, auth_headers, service_args

APP, PREFIX, USER, TURNS = "engram-admission", "/admission", "conv-26", 30
NAMESPACE = "engram-admission-test"


@pytest.fixture(scope="module")
def admitting(serve_url):
    from ray import serve

    from serve.app import build_app

    storage = tempfile.mkdtemp(prefix="engram-admission-state-")
    args = service_args(namespace=NAMESPACE)
    cluster = {**args["config"]["cluster"], "storage_dir": storage, "summaries": False}
    args["config"] = {**args["config"], "admission": {"mode": "classifier", "weights": "packaged"},
                      "cluster": cluster}
    serve.run(build_app(args), name=APP, route_prefix=PREFIX)
    try:
        with httpx.Client(base_url=serve_url + PREFIX, timeout=300, headers=auth_headers(ADMIN_KEY)) as client:
            yield client
    finally:
        import ray

        serve.delete(APP)
        for actor in ray.util.list_named_actors(all_namespaces=True):  # this app's tier / router / assistant actors
            if actor["namespace"] == NAMESPACE:
                ray.kill(ray.get_actor(actor["name"], namespace=NAMESPACE), no_restart=True)
        shutil.rmtree(storage, ignore_errors=True)


@pytest.fixture(scope="module")
def conversation():
    convs = {c.sample_id: c for c in load_locomo(load_config().data.locomo_path)}
    return convs[USER].turns[:TURNS]  # a train-split conversation


def test_the_classifier_decides_over_http_as_in_process_and_stores_what_it_admits(admitting, conversation):
    body = {"user_id": USER, "turns": [
        {"id": t.dia_id, "speaker": t.speaker, "text": t.text, "timestamp": t.timestamp.isoformat(),
         "date_time": t.date_time} for t in conversation]}
    r = admitting.post("/v1/turns", json=body)
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["id"] for x in results] == [t.dia_id for t in conversation]
    p_add = np.array([x["p_add"] for x in results], dtype=float)
    threshold = json.loads((packaged_weights() / SETTINGS_FILE).read_text())["threshold"]
    admitted = [x["admitted"] for x in results]
    assert admitted == [bool(p >= threshold) for p in p_add]
    assert 0 < sum(admitted) < TURNS, "a real classifier keeps some turns and drops others"
    assert r.json()["admitted"] == sum(admitted)

    # the same turns through the in-process classifier (same embedder, same committed heads, the same rendering:
    # relative dates grounded on the turn's date, as the write path renders them)
    from datetime import UTC, datetime

    from pipeline.write_path import turn_records
    from serve.embedder import Embedder
    from serve.schemas import TurnIn

    cfg = load_config("cpu", {"admission": {"mode": "classifier", "weights": "packaged"}})
    records = turn_records([TurnIn(**t) for t in body["turns"]], datetime.now(UTC), cfg.episodic.ground_dates)
    local = AdmissionClassifier.from_config(cfg).classify(ChunkStream(Embedder(cfg.embedder)).push(records))
    np.testing.assert_allclose(p_add, [d.p_add for d in local], atol=2e-3)
    assert [x["type"] for x in results] == [d.content_type for d in local]

    listed = admitting.get("/v1/memories", params={"user_id": USER, "limit": 1000}).json()
    stored = sorted(m["id"] for m in listed["memories"])
    assert stored == sorted(x["id"] for x in results if x["admitted"])  # NOOP turns are not stored
    dropped = next(t for t, a in zip(conversation, admitted, strict=True) if not a)
    hits = admitting.post("/v1/search", json={"user_id": USER, "query": dropped.text, "k": 10}).json()
    assert dropped.dia_id not in [m["id"] for m in hits["memories"]]
