"""Spans of the service's requests (OpenTelemetry), off unless ``tracing.enabled``.

One tree per request: the ingress opens the root (``POST /v1/ask``), and each step the pipelines take opens a
child where it runs — the query embedding, admission, every call to a tier shard, a router or an assistant core,
the master. The spans of the remote calls are opened by the caller (the ingress process) around the call, so
their duration includes the hop to the actor; their attributes say what came back: ids of the memories,
segments and evidence lines, and the small models' token counts. The master deployment gets the trace context
(:func:`carrier` / :func:`attach`) and opens an ``llm.generate`` span per call to its model pool. User text
(questions, answers) is recorded only with ``tracing.record_text``.

Without :func:`configure` (tracing off) the spans are OpenTelemetry's no-op spans: nothing is recorded or sent.
Exporters: ``console`` (development), ``otlp`` (OTLP over HTTP, batched; production), ``file`` (JSON Lines, one
finished span per line: tests and offline inspection).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from core import timings
from core.config import TracingConfig

TRACER = "engram"
_lock = threading.Lock()
_configured: TracingConfig | None = None
# NOTE: this module's own provider, not OpenTelemetry's global one: Ray and vLLM may install theirs, and a test
# can swap a provider in and out (use_provider). The current-span context is OpenTelemetry's, shared by all.
_provider: TracerProvider | None = None
_NOOP = trace.NoOpTracer()


class JsonLinesExporter(SpanExporter):
    """Appends each finished span to a file as one JSON object: name, ids (hex), parent, times (ns), attributes."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = [json.dumps(span_record(s)) + "\n" for s in spans]
        with self._lock, self.path.open("a", encoding="utf-8") as f:
            f.writelines(lines)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def span_record(s: ReadableSpan) -> dict[str, Any]:
    ctx = s.get_span_context()
    return {
        "name": s.name, "trace_id": f"{ctx.trace_id:032x}", "span_id": f"{ctx.span_id:016x}",
        "parent_id": None if s.parent is None else f"{s.parent.span_id:016x}",
        "start_ns": s.start_time, "end_ns": s.end_time, "status": s.status.status_code.name,
        "attributes": {k: list(v) if isinstance(v, tuple) else v for k, v in (s.attributes or {}).items()},
        "service": (s.resource.attributes or {}).get("service.name"),
    }


def _exporter(cfg: TracingConfig) -> SpanExporter:
    if cfg.exporter == "file":
        return JsonLinesExporter(cfg.file_path)
    if cfg.exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=cfg.otlp_endpoint)
    return ConsoleSpanExporter()


def configure(cfg: TracingConfig) -> bool:
    """Set up this process's tracer provider once (later calls keep the first settings); False when off."""
    global _configured
    if not cfg.enabled:
        return False
    with _lock:
        if _configured is None:
            provider = TracerProvider(resource=Resource.create({"service.name": cfg.service_name}))
            exporter = _exporter(cfg)
            # NOTE: batched for a collector; synchronous for the console and the file, which tests read at once
            processor = BatchSpanProcessor(exporter) if cfg.exporter == "otlp" else SimpleSpanProcessor(exporter)
            provider.add_span_processor(processor)
            use_provider(provider, cfg.record_text)
            _configured = cfg
    return True


def use_provider(provider: TracerProvider | None, record_text: bool = False) -> TracerProvider | None:
    """Record spans with ``provider`` from now on (None: stop recording); returns the one used before."""
    global _provider, _record_text
    before, _provider, _record_text = _provider, provider, record_text
    return before


_record_text = False


def records_text() -> bool:
    return _provider is not None and _record_text


def _value(v: Any) -> Any:
    if isinstance(v, bool | int | float | str):
        return v
    return [str(x) if not isinstance(x, bool | int | float | str) else x for x in v]


@contextmanager
def span(name: str, **attributes: Any) -> Iterator[trace.Span]:
    """A child of the current span (a root without one); attribute names get the ``engram.`` prefix and values
    that are None are left out. Exceptions are recorded on the span and re-raised. Its wall time goes to the
    request's ``Server-Timing`` record (:mod:`core.timings`), tracing on or off."""
    attrs = {f"engram.{k}": _value(v) for k, v in attributes.items() if v is not None}
    tracer = _NOOP if _provider is None else _provider.get_tracer(TRACER)
    start = time.perf_counter()
    try:
        with tracer.start_as_current_span(name, attributes=attrs) as current:
            yield current
    finally:
        if " " not in name:  # NOTE: a request's root ("POST /v1/ask") is the middleware's "app" timing
            timings.add(name, time.perf_counter() - start)


def annotate(current: trace.Span, **attributes: Any) -> None:
    """Set ``engram.*`` attributes on a span (None values left out)."""
    current.set_attributes({f"engram.{k}": _value(v) for k, v in attributes.items() if v is not None})


def text(current: trace.Span, **texts: str | None) -> None:
    """User text as attributes, only with ``tracing.record_text``."""
    if records_text():
        annotate(current, **texts)


def carrier() -> dict[str, str]:
    """The current span's context as W3C ``traceparent`` headers, to hand to another process (empty when off)."""
    headers: dict[str, str] = {}
    if _provider is not None:
        propagate.inject(headers)
    return headers


@contextmanager
def attach(headers: dict[str, str] | None) -> Iterator[None]:
    """Make spans opened inside children of the span whose :func:`carrier` another process sent."""
    if not headers:
        yield
        return
    token = otel_context.attach(propagate.extract(headers))
    try:
        yield
    finally:
        otel_context.detach(token)
