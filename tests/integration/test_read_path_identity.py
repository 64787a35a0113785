"""One read path: the benchmark's engram system and ``POST /v1/ask`` give the same answers, evidence and bills.

The same conversation goes into the running service (``engram ingest locomo``'s batches over HTTP) and into
``bench.systems.InProcessService`` (the benchmark's path: the service's pipelines over in-process cores), both
with the same engine — the service's own LLM pool, reached from here through a ``PoolEngine`` — the same
embedder model and the same token counter. Then a few questions are asked both ways.
"""

from __future__ import annotations

import time

import httpx
import pytest

from bench.systems import InProcessService
from cluster.cli_ingest import DEFAULT_BATCH, locomo_batches
from core.config import ROLES, load_config
from corpora.locomo import load_locomo
from serve.embedder import Embedder
from serve.pool import PoolEngine, TokenizerCounter
from tests.integration.conftest import ADMIN_KEY, auth_headers, service_args

CONVERSATION, SESSIONS, QUESTIONS = "conv-26", 2, 4
USER = "identity"


@pytest.fixture(scope="module")
def client(service):
    with httpx.Client(base_url=service, timeout=300, headers=auth_headers(ADMIN_KEY)) as c:
        yield c


def _wait_for_summaries(client: httpx.Client) -> None:
    deadline = time.time() + 600
    while client.get("/v1/health").json()["background"]:
        assert time.time() < deadline, "the service's summaries did not finish"
        time.sleep(0.5)


def test_service_and_benchmark_answer_alike(client, service) -> None:
    args = service_args()
    cfg = load_config(args["profile"], args["config"])
    conv = {c.sample_id: c for c in load_locomo(cfg.data.locomo_path)}[CONVERSATION]
    turns = [t for t in conv.turns if t.session <= SESSIONS]
    questions = [q for q in conv.questions if q.category != 5][:QUESTIONS]

    for user, session, batch in locomo_batches(turns, USER, DEFAULT_BATCH):
        body = {"user_id": user, "session_id": session, "turns": [t.model_dump(mode="json") for t in batch]}
        r = client.post("/v1/turns", json=body)
        assert r.status_code == 200, r.text
    _wait_for_summaries(client)

    engines = {role: PoolEngine.for_role(cfg, role, "engram") for role in ROLES}
    counters = {role: TokenizerCounter(cfg.engine_for(role)) for role in ROLES}
    bench = InProcessService(cfg, encoder=Embedder(cfg.embedder), engine=engines, counters=counters, tenant=USER)
    bench.ingest(turns)

    for q in questions:
        r = client.post("/v1/ask", json={"user_id": USER, "question": q.question})
        assert r.status_code == 200, r.text
        served = r.json()
        ours = bench.ask(q.question)
        assert ours.text == served["answer"], q.question
        assert ours.evidence_turn_ids == [e["turn_id"] for e in served["evidence"]], q.question
        assert ours.routed_turn_ids == list(dict.fromkeys(t for s in served["segments"] for t in s["turn_ids"]))
        tokens = served["tokens"]
        assert (ours.assistant_bill.prompt_tokens, ours.assistant_bill.completion_tokens) == (
            tokens["assistants"]["prompt"], tokens["assistants"]["completion"]), q.question
        assert (ours.master_bill.prompt_tokens, ours.master_bill.completion_tokens) == (
            tokens["master"]["prompt"], tokens["master"]["completion"]), q.question
        assert ours.assistant_bill.total_tokens > 0  # the assistants did read segments
