"""Spans of the pipelines (core/tracing.py): one tree per request, ids and counts as attributes, user text only
when asked for; nothing recorded while tracing is off."""

from __future__ import annotations

import asyncio
import json

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from core import tracing
from core.config import TracingConfig
from tests.unit.test_pipelines import Service, _turns

QUESTION = "What about topic3 and number 1013?"


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    before = tracing.use_provider(provider)
    yield exporter
    tracing.use_provider(before)


def _ask(record_text: bool = False):
    async def run():
        svc = Service()
        await svc.post("alice", _turns(40))
        await svc.settle()
        q = svc.encoder.encode(["topic3 and number 1013"], is_query=True)[0]
        with tracing.span("POST /v1/ask", user_id="alice") as root:
            result = await svc.reads.ask("alice", QUESTION, q)
        return root, result

    return asyncio.run(run())


def test_an_ask_is_one_tree_with_ids_and_token_counts_and_no_user_text(spans) -> None:
    spans.clear()
    root, result = _ask()
    finished = spans.get_finished_spans()
    tree = [s for s in finished if s.context.trace_id == root.get_span_context().trace_id]
    by_name: dict[str, list] = {}
    for s in tree:
        by_name.setdefault(s.name, []).append(s)
    top = by_name["POST /v1/ask"][0]
    children = {s.name for s in tree if s.parent is not None and s.parent.span_id == top.context.span_id}
    assert children == {"router.route", "assistants.extract", "master.answer"}
    route = by_name["router.route"][0].attributes
    assert list(route["engram.segment_ids"]) == [a.segment_id for a in result.route.activations]
    extracted = [t for s in by_name["assistants.extract"] for t in s.attributes["engram.evidence_turn_ids"]]
    assert extracted and set(extracted) <= set(result.routed_turn_ids)
    assert sum(s.attributes["engram.prompt_tokens"] for s in by_name["assistants.extract"]) == (
        result.assistant_bill.prompt_tokens)
    master = by_name["master.answer"][0].attributes
    assert list(master["engram.evidence_turn_ids"]) == [e.turn_id for e in result.answer.evidence]
    assert master["engram.prompt_tokens"] == result.answer.bill.prompt_tokens > 0
    values = json.dumps([dict(s.attributes) for s in tree])
    assert "topic3" not in values and result.answer.text not in values  # no user text by default
    writes = {s.name for s in finished if s.name in {"admission", "tier.add", "router.append", "assistants.add"}}
    assert writes == {"admission", "tier.add", "router.append", "assistants.add"}


def test_text_is_recorded_only_when_configured(spans) -> None:
    tracing.use_provider(tracing.use_provider(None), record_text=True)  # the same provider, with text
    spans.clear()
    _ask()
    names = {s.name: s.attributes for s in spans.get_finished_spans()}
    assert names["router.route"]["engram.question"] == QUESTION and names["master.answer"]["engram.answer"]


def test_nothing_is_recorded_while_tracing_is_off(spans) -> None:
    tracing.use_provider(None)
    spans.clear()
    _ask()
    assert spans.get_finished_spans() == ()


def test_the_file_exporter_writes_one_json_span_per_line(tmp_path) -> None:
    path = tmp_path / "spans.jsonl"
    exporter = tracing.JsonLinesExporter(path)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    before = tracing.use_provider(provider)
    try:
        with tracing.span("outer", user_id="u"), tracing.span("inner", ids=["a", "b"], skipped=None):
            pass
    finally:
        tracing.use_provider(before)
    inner, outer = [json.loads(line) for line in path.read_text().splitlines()]
    assert (inner["name"], outer["name"]) == ("inner", "outer") and inner["parent_id"] == outer["span_id"]
    assert inner["attributes"] == {"engram.ids": ["a", "b"]} and outer["parent_id"] is None
    assert inner["trace_id"] == outer["trace_id"] and inner["end_ns"] >= inner["start_ns"]
    assert not tracing.configure(TracingConfig())  # off by default


def test_a_carried_context_makes_the_other_sides_spans_children(spans) -> None:
    spans.clear()
    with tracing.span("master.answer") as here:
        headers = tracing.carrier()
    assert headers["traceparent"].split("-")[1] == f"{here.get_span_context().trace_id:032x}"
    with tracing.attach(headers), tracing.span("llm.generate"):  # as the master deployment does
        pass
    with tracing.attach({}), tracing.span("unrelated"):
        pass
    by_name = {s.name: s for s in spans.get_finished_spans()}
    assert by_name["llm.generate"].parent.span_id == by_name["master.answer"].context.span_id
    assert by_name["unrelated"].parent is None
    tracing.use_provider(None)
    assert tracing.carrier() == {}  # off: nothing to carry


def test_server_timing_records_the_steps_with_tracing_off(spans) -> None:
    from core import timings

    tracing.use_provider(None)
    spans.clear()
    with timings.collect() as record:
        _ask()
    names = [name for name, _ in record]
    assert {"router.route", "assistants.extract", "master.answer"} <= set(names)
    assert "POST /v1/ask" not in names and all(seconds >= 0 for _, seconds in record)
    assert spans.get_finished_spans() == ()  # timed, not traced
    value = timings.header(record, total=0.5)
    parsed = timings.parse(value)
    assert parsed["app"] == [500.0] and len(parsed["assistants.extract"]) == names.count("assistants.extract")
    assert timings.header([("POST /v1/x", 0.001)]) == "POST__v1_x;dur=1.00"  # names become RFC tokens
    timings.add("outside", 1.0)  # no record current: nothing kept, nothing raised


def test_the_middleware_sends_server_timing_for_each_request() -> None:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from core import timings
    from serve import middleware

    app = FastAPI()
    middleware.install(app)

    @app.get("/v1/health")
    async def health() -> dict:
        with tracing.span("embed"):
            pass
        return {"ok": True}

    r = TestClient(app).get("/v1/health")
    parsed = timings.parse(r.headers["server-timing"])
    assert set(parsed) == {"embed", "app"} and parsed["app"][0] >= parsed["embed"][0]
