"""The daemon's Prometheus metrics, in a registry of its own (never the global one).

Labels are bounded: detector, message reason, finding kind; never a session or job id. Counters are bumped
once per batch, not per event.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily

from sanitizerd import __version__
from sanitizerd.findings.model import KINDS
from sanitizerd.protocol.errors import REASONS
from sanitizerd.protocol.messages import TOOLS

END_REASONS = ("closed", "disconnected", "protocol_error", "internal_error", "shutdown", "rejected")


class Metrics:
    """Prometheus conventions: ``sanitizerd_`` prefix, base units (bytes, seconds), ``_total`` on counters (the
    client library appends it), bounded label sets: message type, detector, reason, finding kind and
    severity; never an address, a pid, a session or a job."""

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
        self.sessions_resumed = Counter(
            "sanitizerd_sessions_resumed", "Sessions resumed by a client whose daemon went away", registry=r
        )
        self.frames = Counter(
            "sanitizerd_frames_received", "Frames decoded from clients, by message type", ["type"], registry=r
        )
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
        self.findings = Counter(
            "sanitizerd_findings", "Findings reported, by kind and severity", ["kind", "severity"], registry=r
        )
        self.detector_failures = Counter(
            "sanitizerd_detector_failures", "Exceptions raised inside detectors", ["detector"], registry=r
        )
        self.detector_seconds = Histogram(
            "sanitizerd_detector_seconds",
            "Time a detector took over one work item (a batch, a kernel's end), by detector",
            ["detector"],
            buckets=(0.0005, 0.002, 0.01, 0.05, 0.25, 1.0, 5.0, 30.0, 120.0),
            registry=r,
        )
        self.backpressure_waits = Counter(
            "sanitizerd_backpressure_waits",
            "Work items a session had to wait to queue because the detector's queue was full, by detector",
            ["detector"],
            registry=r,
        )
        self.race_memory_refusals = Counter(
            "sanitizerd_race_memory_refusals",
            "Kernel launches racecheck left unchecked because the host's race-check memory budget was spent",
            registry=r,
        )
        self.store_writes = Counter("sanitizerd_store_writes", "Findings written to the store", registry=r)
        self.store_errors = Counter("sanitizerd_store_errors", "Store operations that failed", registry=r)
        Gauge("sanitizerd_build_info", "Always 1, labelled with the version", ["version"], registry=r).labels(
            __version__
        ).set(1)
        ProcessCollector(registry=r)
        for reason in REASONS:
            self.rejected.labels(reason)
        for reason in END_REASONS:
            self.sessions_ended.labels(reason)
        for kind, severity in KINDS.items():
            self.findings.labels(kind, severity)
        for detector in TOOLS:  # every series exists from the start, at zero: alerts and panels see it
            for family in (self.events_checked, self.detector_failures, self.backpressure_waits):
                family.labels(detector)
            self.detector_seconds.labels(detector)
        self._ready: Callable[[], bool] = lambda: False

    def queue_depth(self, read: Callable[[], float], per_detector: Callable[[], dict[str, float]]) -> None:
        Gauge(
            "sanitizerd_detector_queue_batches",
            "Work items waiting in detector queues, over all sessions",
            registry=self.registry,
        ).set_function(read)
        self.registry.register(_PerDetectorQueue(per_detector))

    def race_memory(self, used: Callable[[], float], limit: Callable[[], float]) -> None:
        Gauge(
            "sanitizerd_race_memory_bytes",
            "Bytes racecheck has reserved from the host's budget now, over all sessions",
            registry=self.registry,
        ).set_function(used)
        Gauge(
            "sanitizerd_race_memory_limit_bytes", "The host's race-check memory budget", registry=self.registry
        ).set_function(limit)

    def gauges(self, *, jobs_live: Callable[[], float]) -> None:
        Gauge("sanitizerd_jobs_live", "Jobs with at least one live session", registry=self.registry).set_function(
            jobs_live
        )

    def readiness(self, ready: Callable[[], bool]) -> None:
        self._ready = ready

    def serve(self, address: str) -> None:
        """Serve ``/metrics``, ``/healthz`` (the process answers) and ``/readyz`` (it accepts sessions) over HTTP
        from a daemon thread, at ``HOST:PORT`` (127.0.0.1 when no host is given)."""
        host, _, port = address.rpartition(":")
        metrics_app = make_wsgi_app(self.registry)

        def app(environ: dict[str, object], start_response: Callable[..., object]) -> list[bytes]:
            path = environ.get("PATH_INFO", "/")
            if path == "/healthz":
                start_response("200 OK", [("Content-Type", "text/plain")])
                return [b"ok\n"]
            if path == "/readyz":
                ready = self._ready()
                start_response("200 OK" if ready else "503 Service Unavailable", [("Content-Type", "text/plain")])
                return [b"ready\n" if ready else b"not ready\n"]
            return metrics_app(environ, start_response)  # type: ignore[no-any-return]

        server = make_server(host or "127.0.0.1", int(port), app, handler_class=_QuietHandler)
        threading.Thread(target=server.serve_forever, name="sanitizerd-metrics", daemon=True).start()


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


class _PerDetectorQueue:
    """``sanitizerd_detector_queue_depth{detector}``, read at scrape time."""

    def __init__(self, read: Callable[[], dict[str, float]]) -> None:
        self.read = read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "sanitizerd_detector_queue_depth", "Work items waiting in detector queues, by detector", labels=["detector"]
        )
        depth = dict.fromkeys(TOOLS, 0.0) | self.read()
        for detector, waiting in sorted(depth.items()):
            family.add_metric([detector], waiting)
        yield family
