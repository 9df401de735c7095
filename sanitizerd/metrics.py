"""The daemon's Prometheus metrics, in a registry of its own (never the global one).

Labels are bounded: detector, message reason, finding kind; never a session or job id. Counters are bumped
once per batch, not per event.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from sanitizerd.findings.model import KINDS
from sanitizerd.protocol.errors import REASONS

END_REASONS = ("closed", "disconnected", "protocol_error", "internal_error", "shutdown", "rejected")


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.sessions_started = Counter(
            "sanitizerd_sessions_started", "Producer sessions that completed the handshake", registry=r
        )
        self.sessions_ended = Counter(
            "sanitizerd_sessions_ended", "Producer sessions ended, by reason", ["reason"], registry=r
        )
        self.sessions_live = Gauge("sanitizerd_sessions_live", "Producer sessions now connected", registry=r)
        self.frames = Counter("sanitizerd_frames_received", "Frames decoded from clients", registry=r)
        self.bytes = Counter("sanitizerd_received_bytes", "Bytes read from client sockets", registry=r)
        self.events = Counter("sanitizerd_events_received", "Device events received in batches", registry=r)
        self.events_checked = Counter(
            "sanitizerd_events_checked", "Device events checked, by detector", ["detector"], registry=r
        )
        self.rejected = Counter(
            "sanitizerd_rejected_connections",
            "Connections ended for breaking the protocol or a limit, by reason",
            ["reason"],
            registry=r,
        )
        self.findings = Counter("sanitizerd_findings", "Findings reported, by kind", ["kind"], registry=r)
        self.detector_failures = Counter(
            "sanitizerd_detector_failures", "Exceptions raised inside detectors", ["detector"], registry=r
        )
        for reason in REASONS:
            self.rejected.labels(reason)
        for reason in END_REASONS:
            self.sessions_ended.labels(reason)
        for kind in KINDS:
            self.findings.labels(kind)

    def queue_depth(self, read: Callable[[], float]) -> None:
        Gauge(
            "sanitizerd_detector_queue_batches",
            "Work items waiting in detector queues, over all sessions",
            registry=self.registry,
        ).set_function(read)

    def serve(self, address: str) -> None:
        """Serve /metrics over HTTP from a daemon thread, at ``HOST:PORT``."""
        host, _, port = address.rpartition(":")
        start_http_server(int(port), addr=host or "127.0.0.1", registry=self.registry)
