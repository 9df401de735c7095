"""The daemon's Prometheus metrics, in a registry of its own (never the global one).

Labels are bounded: detector, message reason, finding kind; never a session or job id. Counters are bumped
once per batch, not per event.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
    make_wsgi_app,
)
from prometheus_client.core import GaugeMetricFamily

from sanitizerd import __version__, metrics_server
from sanitizerd.metrics_server import MetricsServer, metrics_address
from sanitizerd_protocol.errors import REASONS
from sanitizerd_protocol.messages import TOOLS
from sanitizerd_protocol.model import KINDS

# No ``_created`` series beside each counter: a creation timestamp per label set was 40 % of a scrape, and no
# dashboard or alert reads it (rates come from the counters themselves).
disable_created_metrics()

ACCEPT_ERRNOS = ("EMFILE", "ENFILE", "ENOMEM", "ENOBUFS")
REFUSED_REASONS = ("record_events", "record_pieces", "kernel_cap", "simt_unplaced")  # compat...bounds.REASONS
# detectors._cross_npu.CUT_REASONS
CROSS_NPU_CUT_REASONS = ("job_accesses", "host_accesses", "pair_tests", "signals", "signal_edges", "order_tests")
CUT_FIELDS = ("kernel", "file", "function", "callers", "log", "level", "desc", "host", "tool")  # texts.cap_strings
END_REASONS = ("closed", "disconnected", "protocol_error", "internal_error", "shutdown", "rejected")
# Gauges read at scrape time (``Metrics.read_at_scrape``): the daemon passes how to read each, by key.
_READ_AT_SCRAPE = {
    "queued": ("sanitizerd_detector_queue_batches", "Work items waiting in detector queues, over all sessions"),
    "jobs_live": ("sanitizerd_jobs_live", "Jobs with at least one live session"),
    "jobs_in_use": ("sanitizerd_jobs_in_use", "Jobs registered, watched or with a live session (bounded)"),
    "open_connections": ("sanitizerd_connections_open", "Client connections open, in handshake or not"),
    "unfinished_frame_bytes": (
        "sanitizerd_unfinished_frame_bytes",
        "Bytes received from clients that are not yet whole frames, over all connections",
    ),
    "race_memory_used": (
        "sanitizerd_race_memory_bytes",
        "Bytes racecheck has reserved from the host's budget now, over all sessions",
    ),
    "race_memory_limit": ("sanitizerd_race_memory_limit_bytes", "The host's race-check memory budget"),
    "detector_threads": ("sanitizerd_detector_threads", "Threads that run detector checks (--detector-threads)"),
    "detector_threads_busy": ("sanitizerd_detector_threads_busy", "Detector threads running a check now"),
    "detector_checks_waiting": (
        "sanitizerd_detector_checks_waiting",
        "Checks waiting for a detector thread now (each session's detectors wait in a fair share, per uid)",
    ),
    "detector_oldest_wait": (
        "sanitizerd_detector_oldest_wait_seconds",
        "How long the check that has waited longest for a detector thread has waited now (0 when none waits)",
    ),
    "compat_sockets": (
        "sanitizerd_compat_sockets_open",
        "Sockets in msSanitizer's form (compat_listen) listening now, over all jobs",
    ),
}


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
        self.sessions_silent = Counter(
            "sanitizerd_sessions_silent",
            "Producer sessions that ended (not by a shutdown) having sent no device record and no replay signature",
            registry=r,
        )
        self.kernels_silent = Counter(
            "sanitizerd_kernels_silent",
            "Kernel launches reported silent: nothing received for --silent-kernel-after seconds, and not ended",
            registry=r,
        )
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
            # ``finding_severity``, not ``severity``: that label routes alerts (Alertmanager), and a metric's own
            # would override the rule's.
            "sanitizerd_findings",
            "Findings reported, by kind and severity (suppressed ones not)",
            ["kind", "finding_severity"],
            registry=r,
        )
        self.findings_suppressed = Counter(
            "sanitizerd_findings_suppressed",
            "Findings a suppression rule hid (stored, marked with its reason; in sanitizerd_findings_total not)",
            ["kind"],
            registry=r,
        )
        self.detector_failures = Counter(
            "sanitizerd_detector_failures", "Exceptions raised inside detectors", ["detector"], registry=r
        )
        self.detector_checks_cut = Counter(
            "sanitizerd_detector_checks_cut",
            "Checks a detector cut short at one of its bounds (pattern work, tracked ranges, race memory), by "
            "detector; each is also an internal_error finding told to its session",
            ["detector"],
            registry=r,
        )
        self.detector_seconds = Histogram(
            "sanitizerd_detector_seconds",
            "Time a detector took over one work item (a batch, a kernel's end), by detector",
            ["detector"],
            buckets=(0.0005, 0.002, 0.01, 0.05, 0.25, 1.0, 5.0, 30.0, 120.0),
            registry=r,
        )
        self.detector_thread_waits = Histogram(
            "sanitizerd_detector_thread_wait_seconds",
            "Time a check waited for a detector thread (the fair share among uids and sessions) before it ran",
            buckets=(0.001, 0.01, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0),
            registry=r,
        )
        self.cpu_budget_cuts = Counter(
            "sanitizerd_cpu_budget_cuts",
            "Kernel launches whose checks by a detector passed --kernel-cpu-budget: the rest of their events went "
            "unchecked by that detector (each also an internal_error finding told to its session), by detector",
            ["detector"],
            registry=r,
        )
        self.cpu_budget_unchecked_events = Counter(
            "sanitizerd_cpu_budget_unchecked_events",
            "Events a detector left unchecked because their kernel launch had passed --kernel-cpu-budget, by detector",
            ["detector"],
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
        self.findings_unstored = Counter(
            "sanitizerd_findings_unstored", "Findings reported but not stored (a full disk, the size limit)", registry=r
        )
        self.store_writable = Gauge(
            "sanitizerd_store_writable", "1 while the store takes writes, 0 after a write failed", registry=r
        )
        self.store_writable.set(1)
        self.store_bytes = Gauge("sanitizerd_store_bytes", "Bytes the store takes on disk (with its WAL)", registry=r)
        self.store_pruned = Counter(
            "sanitizerd_store_pruned", "Rows deleted by retention (age, size), by table", ["table"], registry=r
        )
        for table in ("sessions", "findings"):
            self.store_pruned.labels(table)
        self.accept_errors = Counter(
            "sanitizerd_accept_errors",
            "accept() failures on the main socket (out of fds or memory), each followed by a back-off, by errno",
            ["errno"],
            registry=r,
        )
        for name in ACCEPT_ERRNOS:
            self.accept_errors.labels(name)
        self.strings_cut = Counter(
            "sanitizerd_strings_cut",
            "Strings from clients cut to their documented length (names, files, functions, log texts), by field",
            ["field"],
            registry=r,
        )
        for name in CUT_FIELDS:
            self.strings_cut.labels(name)
        self.kernel_problems = Counter(
            "sanitizerd_kernel_problems",
            "Problems clients reported at a kernel's end (records not converted, damaged record buffers): each is an "
            "internal_error finding and makes the kernel's verdict incomplete",
            registry=r,
        )
        self.compat_records_refused = Counter(
            "sanitizerd_compat_records_refused",
            "msSanitizer records refused unconverted: over a record's bound on events or pieces listed "
            "(record_events, record_pieces), or past the kernel launch's cap (kernel_cap); and SIMD events of a SIMT "
            "slot past what is held to place its SIMT calls, checked without the main scalar against the threads "
            "(simt_unplaced); docs/security.md",
            ["reason"],
            registry=r,
        )
        for name in REFUSED_REASONS:
            self.compat_records_refused.labels(name)
        self.compat_records_unplaced = Counter(
            "sanitizerd_compat_records_unplaced",
            "msSanitizer records past a connection's bound on distinct places (pc, fileNo, lineNo): reported at "
            "unknown:0, said once to the session's log; docs/security.md",
            registry=r,
        )
        self.client_logs_dropped = Counter(
            "sanitizerd_client_logs_dropped",
            "Client log messages not written to the daemon's log: over the per-session rate",
            registry=r,
        )
        self.regions_refused = Counter(
            "sanitizerd_regions_refused",
            "Memory-permission regions refused: past a session's bound (region_permission)",
            registry=r,
        )
        self.cross_npu_cut = Counter(
            "sanitizerd_cross_npu_cut",
            "What cross-NPU racecheck left out of its kernels' checks at its bounds (each kernel's internal_error "
            "finding says it), by reason: accesses to shared memory not held past a job's or the host's bound "
            "(job_accesses, host_accesses), access pair tests not made (pair_tests), signal sets and waits not held "
            "(signals), racing access pairs not fully tested for order by signals (signal_edges, order_tests); "
            "docs/security.md",
            ["reason"],
            registry=r,
        )
        for name in CROSS_NPU_CUT_REASONS:
            self.cross_npu_cut.labels(name)
        self.guard_writes_refused = Counter(
            "sanitizerd_guard_writes_refused",
            "Host writes into a GM guard area not reported: past a session's bound (guard_write); the first one past "
            "it is an internal_error finding",
            registry=r,
        )
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
            self.findings_suppressed.labels(kind)
        for detector in TOOLS:  # every series exists from the start, at zero: alerts and panels see it
            for family in (
                self.events_checked,
                self.detector_failures,
                self.detector_checks_cut,
                self.backpressure_waits,
                self.cpu_budget_cuts,
                self.cpu_budget_unchecked_events,
            ):
                family.labels(detector)
            self.detector_seconds.labels(detector)
        # Configuration and the metrics endpoint itself.
        self.config_reloads = Counter(
            "sanitizerd_config_reloads", "SIGHUP reloads of the configuration, by result (ok, failed)", ["result"],
            registry=r,
        )  # fmt: skip
        self.metrics_dropped = Counter(
            "sanitizerd_metrics_connections_dropped",
            "Connections to the metrics port closed by its bounds, by reason (evicted, overflow, deadline)",
            ["reason"],
            registry=r,
        )
        for result in ("ok", "failed"):
            self.config_reloads.labels(result)
        for reason in ("evicted", "overflow", "deadline"):
            self.metrics_dropped.labels(reason)
        self.worker_restarts = Counter(
            "sanitizerd_worker_restarts", "Worker processes started again after one ended (--workers N)", registry=r
        )
        self.worker_stalls = Counter(
            "sanitizerd_worker_stalls",
            "Worker processes killed for answering nothing for --worker-stall-timeout seconds (then started again)",
            registry=r,
        )
        self._ready: Callable[[], str] = lambda: "starting"
        # What /metrics serves: this registry, or (the listener of worker processes) one that sums the workers'.
        self.exposed: CollectorRegistry = self.registry

    def read_at_scrape(self, **reads: Callable[[], float]) -> None:
        """Gauges read when scraped, from the state that holds their numbers (``_READ_AT_SCRAPE`` names each)."""
        for key, read in reads.items():
            name, meaning = _READ_AT_SCRAPE[key]
            Gauge(name, meaning, registry=self.registry).set_function(read)

    def queue_by_detector(self, per_detector: Callable[[], dict[str, float]]) -> None:
        self.registry.register(_PerDetectorQueue(per_detector))

    def readiness(self, ready: Callable[[], str]) -> None:
        """``ready`` says why the daemon does not accept sessions now, or "" when it does."""
        self._ready = ready

    def serve(self, address: str) -> MetricsServer:
        """Serve ``/metrics``, ``/healthz`` (the process answers) and ``/readyz`` (it accepts sessions) over HTTP
        from threads of their own (metrics_server.py), at ``HOST:PORT``, ``[IPV6]:PORT`` or ``:PORT``
        (127.0.0.1); any other path is 404. OSError when the address cannot be bound."""
        host, port = metrics_address(address)
        metrics_app = make_wsgi_app(self.exposed)

        def app(environ: dict[str, object], start_response: Callable[..., object]) -> list[bytes]:
            path = environ.get("PATH_INFO", "/")
            if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
                return _plain(start_response, "405 Method Not Allowed", b"GET or HEAD only\n", [("Allow", "GET, HEAD")])
            if path == "/healthz":
                return _plain(start_response, "200 OK", b"ok\n")
            if path == "/readyz":
                why = self._ready()
                if why:
                    return _plain(start_response, "503 Service Unavailable", f"not ready: {why}\n".encode())
                return _plain(start_response, "200 OK", b"ready\n")
            if path == "/metrics":
                return metrics_app(environ, start_response)  # type: ignore[no-any-return]
            return _plain(start_response, "404 Not Found", b"not found: /metrics, /healthz and /readyz are served\n")

        server = metrics_server.bind(host, port, app, lambda reason: self.metrics_dropped.labels(reason).inc())
        metrics_server.serve(server)
        return server


def _plain(
    start_response: Callable[..., object], status: str, body: bytes, headers: list[tuple[str, str]] | None = None
) -> list[bytes]:
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"), *(headers or [])])
    return [body]


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
