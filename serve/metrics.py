"""Prometheus metrics of one ingress replica, served at ``/metrics`` (text exposition format)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("engram_requests", "HTTP requests by route and status.", ["route", "status"],
                                registry=r)
        self.latency = Histogram("engram_request_seconds", "HTTP request latency by route.", ["route"], registry=r,
                                 buckets=(0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
        self.admissions = Counter("engram_admissions", "Admission decisions.", ["decision", "type"], registry=r)
        self.evictions = Counter("engram_evictions", "Memories evicted from the last tier.", registry=r)
        self.segments = Counter("engram_segments_closed", "Episodic segments closed.", registry=r)
        self.tokens = Counter("engram_tokens", "Small-model tokens.", ["role", "kind"], registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)


# NOTE: the replica's one set of metrics, at module level: Serve pickles the ingress app, and code that refers to
# this name (the middleware, the endpoints) is pickled by reference, so every part counts into the same object.
METRICS = Metrics()
