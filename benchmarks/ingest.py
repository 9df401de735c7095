"""End-to-end ingest benchmark: N client processes stream device events to a real sanitizerd daemon.

What is timed (the "end-to-end" figure): from a barrier that every client passes once it is connected, has
sent its device summary and malloc'ed its GM ranges, until the last client has closed its session. In that
window each client, per kernel: ``kernel_begin``, ``--batches-per-kernel`` batches through ``Client.events``
(msgpack framing, socket write), ``kernel_end`` and ``wait_kernel`` (the daemon has read, decoded and
memchecked every batch of that kernel), and at the end ``close`` (the daemon has finalized the session).
Event generation happens before the barrier: we measure the daemon and the client library, not numpy's
random number generator.

The events are valid by construction (GM accesses inside the client's own allocations, UB accesses aligned
to 32 B and inside UB), so memcheck runs its full alignment and bounds pass and should report nothing; the
benchmark checks that the daemon's verdicts account for every event sent.

For scale, the same run measures the machine's raw Unix-socket throughput (one process writing 1 MiB buffers
to another) and prints ``ratio`` = end-to-end event bytes/s / raw socket bytes/s. That writer sends one 1 MiB
buffer again and again, from its cache; a client sends records from memory. So the run also measures the raw
socket with the writer's bytes from memory (``raw_from_memory``: it steps through a region as large as every
client's batches together, which no cache holds) and prints ``ratio_from_memory`` beside ``ratio``.

``--tools`` names the runs, one fresh daemon each, in one sitting: by default ``none`` (sessions with no
detector: the ingest path alone, read, framed, decoded and counted) and then ``memcheck``. A run's tools are
joined by ``+`` (``memcheck+initcheck``).

    .venv/bin/python benchmarks/ingest.py --quick

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing as mp
import os
import platform
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import numpy as np

from client_shim.client import Client
from client_shim.events import BlockType, EventKind, Pipe, Space, accesses
from client_shim.transport import SEND_BUFFER, ClientError
from sanitizerd.chips import CHIPS
from sanitizerd.control_client import ControlClient
from sanitizerd_protocol import EVENT_DTYPE
from sanitizerd_protocol import messages as m

EVENT_BYTES = EVENT_DTYPE.itemsize
CHIP = "910B1"
UB_BYTES = CHIPS[CHIP].sizes[Space.UB]
BLOCK_DIM = 48  # 24 AI cores x 2 vector sub-blocks on a 910B1
MiB = 1 << 20


# --- options ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClientPlan:
    """Everything a client process needs; picklable so that it survives the ``spawn`` start method."""

    index: int
    socket_path: str
    job: str
    batch_events: int
    batches_per_kernel: int
    kernels: int  # 0: keep starting kernels until ``seconds`` have passed since the barrier
    seconds: float
    pool: int  # distinct prebuilt batches, sent round robin
    allocations: int
    allocation_bytes: int
    seed: int
    tools: tuple[str, ...] = ("memcheck",)  # empty: a session with no detector


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=4, help="client processes (sessions) [4]")
    parser.add_argument("--seconds", type=float, default=None, help="stream for about this long [30, --quick: 12]")
    parser.add_argument(
        "--events",
        type=int,
        default=None,
        help="send about this many events in all, instead of streaming for a time",
    )
    parser.add_argument("--batch-events", type=int, default=65536, help="events per batch (frame) [65536]")
    parser.add_argument("--batches-per-kernel", type=int, default=16, help="batches each kernel launch streams [16]")
    parser.add_argument("--detector-threads", type=int, default=None, help="daemon --detector-threads")
    parser.add_argument("--queue-depth", type=int, default=None, help="daemon --queue-depth")
    parser.add_argument(
        "--workers", type=int, default=1,
        help="daemon --workers (serve's default is the usable cores; here 1 unless given); with N > 1 each client "
        "is a job of its own, so that the listener spreads them [1]",
    )  # fmt: skip
    parser.add_argument("--raw-bytes", type=int, default=None, help="bytes per raw socket test [4 GiB, --quick: 1 GiB]")
    parser.add_argument("--raw-chunk", type=int, default=MiB, help="write/read size of the raw socket test")
    parser.add_argument("--pool", type=int, default=4, help="distinct prebuilt batches per client [4]")
    parser.add_argument("--start-method", choices=["spawn", "fork", "forkserver"], default="spawn")
    parser.add_argument("--raw-repeats", type=int, default=3, help="raw socket tests; the median is reported [3]")
    parser.add_argument("--quick", action="store_true", help="12 s runs (about 40 s in all)")
    parser.add_argument("--keep-daemon-log", type=Path, default=None, help="copy the daemon's stderr here")
    parser.add_argument(
        "--tools", default="none,memcheck", help="runs, comma-separated; none: no detector [none,memcheck]"
    )
    args = parser.parse_args(argv)
    if args.seconds is None:
        args.seconds = 12.0 if args.quick else 30.0
    if args.raw_bytes is None:
        args.raw_bytes = (1 if args.quick else 4) << 30
    if min(args.clients, args.batch_events, args.batches_per_kernel, args.pool, args.raw_repeats) <= 0:
        parser.error("--clients, --batch-events, --batches-per-kernel, --pool and --raw-repeats must be positive")
    return args


# --- event generation ---------------------------------------------------------------------------------------


def _allocation_bases(plan: ClientPlan) -> np.ndarray:
    # Each client's heap in its own 4 GiB window of the 48-bit GM space; ranges 64 MiB apart so that a
    # batch spans several allocations (memcheck's one-buffer shortcut does not apply: the realistic case).
    window = 0x10_0000_0000 + plan.index * 0x1_0000_0000
    return window + np.arange(plan.allocations, dtype=np.uint64) * np.uint64(64 * MiB)


def build_batch(plan: ClientPlan, rng: np.random.Generator, serial0: int) -> np.ndarray:
    """One batch of valid memory events: half GM (MTE2 reads, MTE3 writes), half UB (vector reads/writes).

    Every access is strided as the vector unit does it: 8 blocks of 32 B, 1-8 repeats. Extents stay inside
    their allocation or inside UB, and UB addresses and strides are multiples of 32 B, so memcheck's
    alignment and bounds checks pass for every event. As in a real kernel, each block writes only its own
    slice of each allocation (reads go anywhere), so memcheck's multi-core stomping check passes too.
    """
    n = plan.batch_events
    gm = rng.random(n) < 0.5
    write = rng.random(n) < 0.4
    repeat = rng.integers(1, 9, n)
    # GM is written by DataCopy (contiguous bursts, gaps only between rows); only the vector unit scatters
    # blocks, and it works on UB.
    block_stride = np.where(gm & write, 1, rng.choice(np.array([1, 2]), n))
    repeat_stride = rng.choice(np.array([8, 16]), n)
    block_num, block_size = 8, 32
    extent = ((repeat - 1) * repeat_stride + (block_num - 1) * block_stride + 1) * block_size
    max_extent = int(((8 - 1) * 16 + (block_num - 1) * 2 + 1) * block_size)

    bases = _allocation_bases(plan)
    block = rng.integers(0, BLOCK_DIM, n)
    read_offset = rng.integers(0, (plan.allocation_bytes - max_extent) // 32, n).astype(np.uint64) * np.uint64(32)
    slice_bytes = plan.allocation_bytes // BLOCK_DIM
    write_offset = block.astype(np.uint64) * np.uint64(slice_bytes) + rng.integers(
        0, (slice_bytes - max_extent) // 32, n
    ).astype(np.uint64) * np.uint64(32)
    gm_offset = np.where(write, write_offset, read_offset)
    gm_address = bases[rng.integers(0, bases.size, n)] + gm_offset
    ub_address = rng.integers(0, (UB_BYTES - max_extent) // 32, n).astype(np.uint64) * np.uint64(32)
    address = np.where(gm, gm_address, ub_address)
    assert (np.where(gm, gm_offset, ub_address) + extent.astype(np.uint64) <= np.where(
        gm, np.uint64(plan.allocation_bytes), np.uint64(UB_BYTES)
    )).all()  # fmt: skip

    pipe = np.where(gm, np.where(write, Pipe.MTE3, Pipe.MTE2), Pipe.V)
    return accesses(
        np.where(write, EventKind.WRITE, EventKind.READ),  # type: ignore[arg-type]
        np.where(gm, Space.GM, Space.UB),  # type: ignore[arg-type]
        address,
        block_size,
        block_num=block_num,
        block_stride=block_stride,
        repeat=repeat,
        repeat_stride=repeat_stride,
        pipe=pipe,  # type: ignore[arg-type]
        block_id=block,
        block_type=BlockType.AIV,
        serial=np.arange(serial0, serial0 + n, dtype=np.uint64),
        pc=0x1000 + 4 * rng.integers(0, 4096, n),
    )


# --- one client process -------------------------------------------------------------------------------------


def run_client(plan: ClientPlan, barrier: Barrier, results: Queue[dict[str, Any]]) -> None:
    """Connect, set up, wait at the barrier, stream, close; report counts and the finish time."""
    try:
        rng = np.random.default_rng(plan.seed)
        pool = [build_batch(plan, rng, 1 + i * plan.batch_events) for i in range(plan.pool)]
        client = Client(
            plan.socket_path,
            job=plan.job,
            config=m.Config(tools=list(plan.tools)),
            # Same size as our batches, so each ``events`` call becomes exactly one frame.
            batch_events=plan.batch_events,
            timeout=60.0,
        )
        client.device_summary(f"Ascend{CHIP}", block_num=BLOCK_DIM, device=plan.index)
        for base in _allocation_bases(plan).tolist():
            client.malloc(base, plan.allocation_bytes)
        client.flush()
        barrier.wait(timeout=120)
        t0 = time.monotonic()
        cpu0 = time.process_time()
        deadline = t0 + plan.seconds
        sent = verdict_events = errors = warnings = kernels = 0
        unchecked = 0
        next_batch = 0
        while (kernels < plan.kernels) if plan.kernels else (kernels == 0 or time.monotonic() < deadline):
            kernel = client.kernel_begin(f"bench_kernel_{kernels % 8}", BLOCK_DIM)
            for _ in range(plan.batches_per_kernel):
                batch = pool[next_batch % plan.pool]
                next_batch += 1
                client.events(kernel, batch)
                sent += batch.size
            client.kernel_end(kernel)
            verdict = client.wait_kernel(kernel, timeout=300)
            verdict_events += verdict.events
            errors += verdict.errors
            warnings += verdict.warnings
            unchecked += not verdict.checked
            kernels += 1
        closed = client.close(timeout=300)
        t1 = time.monotonic()
        results.put(
            dict(
                index=plan.index,
                t0=t0,
                t1=t1,
                cpu_s=time.process_time() - cpu0,
                sent=sent,
                kernels=kernels,
                verdict_events=verdict_events,
                errors=errors,
                warnings=warnings,
                unchecked=unchecked,
                session=closed.session if closed else -1,
                closed_events=closed.events if closed else -1,
                closed_findings=closed.findings if closed else -1,
            )
        )
    except BaseException:
        barrier.abort()  # the parent and the other clients stop waiting for us
        results.put(dict(index=plan.index, error=traceback.format_exc()))


# --- raw Unix-socket throughput -----------------------------------------------------------------------------


def _raw_writer(path: str, total: int, chunk: int, send_buffer: int, cpu_s: Any, region: int) -> None:
    region = max(region, chunk)
    buffer = memoryview(bytearray(os.urandom(region)))  # made before the clock starts, as the clients' batches are
    cpu0 = time.process_time()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if send_buffer:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
    sock.connect(path)
    left, at = total, 0
    while left > 0:
        step = min(left, chunk)
        if at + step > region:
            at = 0
        sock.sendall(buffer[at : at + step])
        left -= step
        at += step
    sock.close()
    cpu_s.value = time.process_time() - cpu0


@dataclass(frozen=True, slots=True)
class RawSocket:
    """One raw socket test: bytes/s, and the CPU each side spent per byte (the floor any framing adds to)."""

    bytes_per_s: float
    reader_ns_per_byte: float
    writer_ns_per_byte: float

    def ns_per_event(self) -> tuple[float, float]:
        """(reader, writer) CPU-ns for one event's bytes."""
        return self.reader_ns_per_byte * EVENT_BYTES, self.writer_ns_per_byte * EVENT_BYTES


def raw_socket_throughput(
    context: mp.context.BaseContext,
    directory: Path,
    total: int,
    chunk: int,
    send_buffer: int = SEND_BUFFER,
    region: int = 0,
) -> RawSocket:
    """Bytes/s one process writes to another through a Unix stream socket whose send buffer is ``send_buffer``
    bytes (the client's, by default; 0: the system's default). The writer sends ``chunk`` bytes at a time from
    one buffer of that size (in its cache), or, where ``region`` is larger, stepping through a buffer of
    ``region`` bytes, as a client steps through its batches in memory.

    This is the ceiling for the daemon's input path: the same kernel copy in and out, with no framing,
    decoding or checking.
    """
    path = str(directory / "raw.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    writer_cpu = context.Value("d", float("nan"))
    writer = context.Process(
        target=_raw_writer, args=(path, total, chunk, send_buffer, writer_cpu, region), daemon=True
    )
    writer.start()
    conn, _ = listener.accept()
    buffer = bytearray(chunk)
    view = memoryview(buffer)
    received = conn.recv_into(view)  # the clock starts at the first byte, after the writer's start-up
    t0, cpu0 = time.monotonic(), time.process_time()
    first = received
    while True:
        n = conn.recv_into(view)
        if not n:
            break
        received += n
    seconds, reader_cpu = time.monotonic() - t0, time.process_time() - cpu0
    conn.close()
    listener.close()
    os.unlink(path)
    writer.join(timeout=30)
    if received != total:
        raise RuntimeError(f"raw socket test received {received} of {total} bytes")
    return RawSocket(
        bytes_per_s=(received - first) / seconds,
        reader_ns_per_byte=reader_cpu * 1e9 / (received - first),
        writer_ns_per_byte=writer_cpu.value * 1e9 / total,
    )


# --- the daemon ---------------------------------------------------------------------------------------------


def _machine_cpu() -> dict[str, float]:
    """Machine-wide CPU seconds by state from /proc/stat (Linux); empty elsewhere.

    On a small shared machine other tenants (or hypervisor steal) can take a good part of the CPUs; the
    benchmark reports what happened during the timed window so that a slow run can be told from a slow daemon.
    """
    try:
        with open("/proc/stat") as stat:
            values = [int(v) for v in stat.readline().split()[1:9]]
    except (OSError, ValueError):
        return {}
    tick = os.sysconf("SC_CLK_TCK")
    user, nice, system, idle, iowait, irq, softirq, steal = (v / tick for v in values)
    return dict(busy=user + nice + system + irq + softirq, idle=idle + iowait, steal=steal)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process from /proc (Linux); NaN elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def _tree_cpu_seconds(pid: int) -> float:
    """A daemon's CPU time with its worker processes' (``--workers``). A child gone between the listing and its
    read (a short-lived helper) counts nothing rather than making the sum NaN: the workers live through the run."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    gone_as_zero = (_cpu_seconds(int(child)) for child in children)
    return _cpu_seconds(pid) + sum(0.0 if math.isnan(seconds) else seconds for seconds in gone_as_zero)


def start_daemon(args: argparse.Namespace, socket_path: Path, state_dir: Path, log: Any) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "sanitizerd", "serve", "--socket", str(socket_path)]
    command += ["--state-dir", str(state_dir), "--log-level", "warning"]
    if args.detector_threads is not None:
        command += ["--detector-threads", str(args.detector_threads)]
    if args.queue_depth is not None:
        command += ["--queue-depth", str(args.queue_depth)]
    command += ["--workers", str(args.workers)]
    daemon = subprocess.Popen(command, stdout=log, stderr=log)
    # Ready means a full control handshake succeeds: a bare connect would leave the daemon waiting for a
    # hello (and logging a handshake timeout) long after we are done.
    deadline = time.monotonic() + 30
    while True:
        if daemon.poll() is not None:
            raise RuntimeError(f"the daemon exited with status {daemon.returncode} before accepting")
        try:
            ControlClient(socket_path, timeout=5).close()
            return daemon
        except ClientError:
            if time.monotonic() > deadline:
                daemon.kill()
                raise RuntimeError("the daemon did not accept connections within 30 s") from None
            time.sleep(0.05)


def stop_daemon(daemon: subprocess.Popen[bytes]) -> int:
    if daemon.poll() is None:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=15)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
    return daemon.returncode


def _session_events(socket_path: Path, job: str) -> int:
    """Events the daemon recorded for our job's sessions, as ``sanitizerd sessions`` would show them."""
    with ControlClient(socket_path) as control:
        reply = control.request(m.QuerySessions())
    assert isinstance(reply, m.Sessions)
    return sum(s.events for s in reply.sessions if s.job == job or s.job.startswith(job + "/"))


# --- main ---------------------------------------------------------------------------------------------------


def _collect(
    results: Queue[dict[str, Any]], processes: list[mp.process.BaseProcess], timeout: float
) -> list[dict[str, Any]]:
    collected: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while len(collected) < len(processes):
        try:
            collected.append(results.get(timeout=1))
        except queue.Empty:
            dead = [p for p in processes if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"client process exited with status {dead[0].exitcode}") from None
            if time.monotonic() > deadline:
                raise TimeoutError(f"clients did not finish within {timeout:.0f} s") from None
    return collected


def _phases(spec: str) -> list[tuple[str, ...]]:
    """``none,memcheck`` -> [(), ("memcheck",)]: one run per comma-separated item, its tools joined by ``+``."""
    return [() if item.strip() == "none" else tuple(item.strip().split("+")) for item in spec.split(",")]


def _label(tools: tuple[str, ...]) -> str:
    return "+".join(tools) or "none"


def run_phase(
    args: argparse.Namespace, context: mp.context.BaseContext, workdir: Path, tools: tuple[str, ...], raw: float
) -> dict[str, Any]:
    """One timed run on a fresh daemon whose sessions check ``tools``; its figures, printed and returned."""
    label = _label(tools)
    socket_path = workdir / f"sanitizerd-{label}.sock"
    job = f"bench-{os.getpid()}-{label}"
    if args.events is not None:
        # Whole kernels per client: round the target up so every client sends the same work.
        per_kernel = args.batch_events * args.batches_per_kernel
        kernels = max(1, -(-args.events // (args.clients * per_kernel)))
    else:
        kernels = 0
    plans = [
        ClientPlan(
            index=i,
            socket_path=str(socket_path),
            job=f"{job}/{i}" if args.workers and args.workers > 1 else job,  # a job is served by one worker
            batch_events=args.batch_events,
            batches_per_kernel=args.batches_per_kernel,
            kernels=kernels,
            seconds=args.seconds,
            pool=args.pool,
            allocations=4,
            allocation_bytes=32 * MiB,
            seed=1234 + i,
            tools=tools,
        )
        for i in range(args.clients)
    ]

    log_path = workdir / f"daemon-{label}.log"
    status = 0
    with open(log_path, "wb") as log:
        daemon = start_daemon(args, socket_path, workdir / f"state-{label}", log)
        processes: list[mp.process.BaseProcess] = []
        try:
            barrier = context.Barrier(args.clients + 1)
            results: Queue[dict[str, Any]] = context.Queue()
            processes = [context.Process(target=run_client, args=(p, barrier, results)) for p in plans]
            for process in processes:
                process.start()
            try:
                barrier.wait(timeout=180)
            except threading.BrokenBarrierError:
                # A client failed while setting up (it aborted the barrier): show why, then stop.
                with contextlib.suppress(queue.Empty):
                    while True:
                        report = results.get(timeout=2)
                        print(f"client {report['index']} failed:\n{report.get('error')}", file=sys.stderr)
                raise RuntimeError("a client failed before the timed window") from None
            t0 = time.monotonic()
            daemon_cpu0 = _tree_cpu_seconds(daemon.pid)
            machine0 = _machine_cpu()
            collected = _collect(results, processes, timeout=max(600, 20 * args.seconds))
            wall_done = time.monotonic()
            daemon_cpu = _tree_cpu_seconds(daemon.pid) - daemon_cpu0
            machine = {k: v - machine0[k] for k, v in _machine_cpu().items()}
            failures = [r for r in collected if "error" in r]
            if failures:
                for failure in failures:
                    print(f"client {failure['index']} failed:\n{failure['error']}", file=sys.stderr)
                raise RuntimeError("a client failed")
            session_events = _session_events(socket_path, job)
        finally:
            for process in processes:
                process.join(timeout=10)
                if process.is_alive():
                    process.terminate()
            daemon_status = stop_daemon(daemon)

    # The clock stops at the last client's own finish time, not when its report reached us.
    seconds = max(r["t1"] for r in collected) - t0
    events = sum(r["sent"] for r in collected)
    verdict_events = sum(r["verdict_events"] for r in collected)
    closed_events = sum(r["closed_events"] for r in collected)
    findings = sum(r["errors"] + r["warnings"] for r in collected)
    kernels_done = sum(r["kernels"] for r in collected)
    client_cpu = sum(r["cpu_s"] for r in collected)
    events_per_s = events / seconds
    bytes_per_s = events * EVENT_BYTES / seconds
    cores = len(os.sched_getaffinity(0))

    print(f"--- tools: {label}")
    print(
        f"daemon: --detector-threads {args.detector_threads or 'default'} "
        f"--queue-depth {args.queue_depth or 'default'} --workers {args.workers}; exit status {daemon_status}"
    )
    print(
        f"clients: {args.clients} x {kernels_done // args.clients} kernels "
        f"x {args.batches_per_kernel} batches x {args.batch_events} events "
        f"({args.batch_events * EVENT_BYTES / MiB:.1f} MiB frames)"
    )
    print(f"sent {events:,} events ({events * EVENT_BYTES / 2**30:.2f} GiB) in {seconds:.2f} s")
    print(f"end to end: {events_per_s / 1e6:.2f} M events/s, {bytes_per_s / 1e6:.0f} MB/s of event records")
    print(f"ratio to raw socket: {bytes_per_s / raw:.3f}")
    print(
        f"CPU: daemon {daemon_cpu:.1f} s, clients {client_cpu:.1f} s, "
        f"{(daemon_cpu + client_cpu) / (seconds * cores):.0%} of {cores} cores over the timed window; "
        f"{events / (daemon_cpu + client_cpu) / 1e6:.2f} M events per CPU-second; per event: daemon "
        f"{daemon_cpu * 1e9 / events:.1f} CPU-ns, clients {client_cpu * 1e9 / events:.1f} CPU-ns"
    )
    # Busy time that was not ours (other tenants, the raw test's leftovers, the kernel for others) and steal.
    other_cpu = machine.get("busy", float("nan")) - daemon_cpu - client_cpu
    steal = machine.get("steal", float("nan"))
    print(
        f"machine during the window: other busy {max(other_cpu, 0.0):.1f} s, steal {steal:.1f} s, "
        f"idle {machine.get('idle', float('nan')):.1f} s"
    )
    if other_cpu + steal > 0.2 * seconds * cores:
        print("WARNING: other load took over 20% of the machine during the run; figures are low", file=sys.stderr)
    unchecked = sum(r["unchecked"] for r in collected)
    if unchecked:
        print(f"ERROR: {unchecked} kernel(s) were not checked (verdict.checked false)", file=sys.stderr)
        status = 1
    if verdict_events != events or closed_events != events or session_events != events:
        print(
            f"ERROR: sent {events} events but verdicts count {verdict_events}, closed replies "
            f"{closed_events}, session records {session_events}",
            file=sys.stderr,
        )
        status = 1
    else:
        print(f"verified: verdicts, closed replies and session records all count {events:,} events")
    if findings:
        # The events are valid by construction: a finding is a daemon bug (or a broken generator).
        print(
            f"WARNING: the daemon reported {findings} finding(s) on valid events; see its log",
            file=sys.stderr,
        )
        for line in log_path.read_text(errors="replace").splitlines()[-5:]:
            print(f"  daemon: {line[:300]}", file=sys.stderr)
    if args.keep_daemon_log:
        keep = args.keep_daemon_log
        shutil.copyfile(log_path, keep.with_name(f"{keep.stem}-{label}{keep.suffix}"))
    return dict(
        tools=label,
        events_per_s=round(events_per_s),
        bytes_per_s=round(bytes_per_s),
        ratio=round(bytes_per_s / raw, 4),
        events=events,
        seconds=round(seconds, 3),
        kernels=kernels_done,
        findings=findings,
        verified=status == 0,
        daemon_cpu_s=round(daemon_cpu, 2),
        client_cpu_s=round(client_cpu, 2),
        events_per_cpu_s=round(events / (daemon_cpu + client_cpu)),
        daemon_cpu_ns_per_event=round(daemon_cpu * 1e9 / events, 2),
        client_cpu_ns_per_event=round(client_cpu * 1e9 / events, 2),
        other_cpu_s=round(max(other_cpu, 0.0), 2),
        steal_s=round(steal, 2),
        idle_s=round(machine.get("idle", float("nan")), 2),
        wall_collect_s=round(wall_done - t0, 3),
    )


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    context = mp.get_context(args.start_method)
    workdir = Path(tempfile.mkdtemp(prefix="sanitizerd-bench-"))
    print(
        f"machine: {os.cpu_count()} CPUs (nproc {len(os.sched_getaffinity(0))}), "
        f"Python {platform.python_version()}, numpy {np.__version__}, {platform.platform()}"
    )

    # The raw test runs first, with nothing else busy, so it reports what the machine can do.
    # Single measurements swing by 2x on a small VM; the median of a few is a steadier yardstick.
    # The ratio's yardstick sends through a buffer of the client's size; the system's default is shown beside it.
    # The third sends from memory: a region as large as the batches all clients step through.
    raws: list[RawSocket] = []
    defaults: list[RawSocket] = []
    from_memory: list[RawSocket] = []
    region = args.clients * args.pool * args.batch_events * EVENT_BYTES
    for _ in range(args.raw_repeats):
        raws.append(raw_socket_throughput(context, workdir, args.raw_bytes, args.raw_chunk))
        defaults.append(raw_socket_throughput(context, workdir, args.raw_bytes, args.raw_chunk, send_buffer=0))
        from_memory.append(raw_socket_throughput(context, workdir, args.raw_bytes, args.raw_chunk, region=region))
    raw = float(np.median([r.bytes_per_s for r in raws]))
    raw_default = float(np.median([r.bytes_per_s for r in defaults]))
    raw_reader_ns = float(np.median([r.ns_per_event()[0] for r in raws]))
    raw_writer_ns = float(np.median([r.ns_per_event()[1] for r in raws]))
    raw_memory = float(np.median([r.bytes_per_s for r in from_memory]))
    memory_reader_ns = float(np.median([r.ns_per_event()[0] for r in from_memory]))
    memory_writer_ns = float(np.median([r.ns_per_event()[1] for r in from_memory]))
    print(
        f"raw unix socket: {raw / 1e9:.2f} GB/s median of {', '.join(f'{r.bytes_per_s / 1e9:.2f}' for r in raws)} "
        f"({args.raw_bytes / 2**30:.1f} GiB each, {args.raw_chunk} B writes, {SEND_BUFFER >> 20} MiB send buffer as "
        f"the client's); with the default send buffer {raw_default / 1e9:.2f} GB/s; CPU per {EVENT_BYTES}-byte "
        f"event: reader {raw_reader_ns:.2f} ns, writer {raw_writer_ns:.2f} ns"
    )
    print(
        f"raw unix socket, the writer's bytes from memory ({region >> 20} MiB, the clients' batches): "
        f"{raw_memory / 1e9:.2f} GB/s median of {', '.join(f'{r.bytes_per_s / 1e9:.2f}' for r in from_memory)}; "
        f"CPU per event: reader {memory_reader_ns:.2f} ns, writer {memory_writer_ns:.2f} ns"
    )

    runs: list[dict[str, Any]] = []
    try:
        for tools in _phases(args.tools):
            runs.append(run_phase(args, context, workdir, tools, raw))
    except BaseException:
        # Keep what the daemon said: it is the first thing to read when a run fails.
        print(f"daemon logs and state kept in {workdir}", file=sys.stderr)
        raise
    for r in runs:
        r["ratio_from_memory"] = round(r["bytes_per_s"] / raw_memory, 4)
    status = 0 if all(r["verified"] for r in runs) else 1
    if status or any(r["findings"] for r in runs):
        print(f"daemon logs and state kept in {workdir}", file=sys.stderr)
    else:
        shutil.rmtree(workdir, ignore_errors=True)

    print("--- summary (one sitting)")
    print(
        f"raw unix socket: {raw / 1e9:.2f} GB/s ({raw / EVENT_BYTES / 1e6:.1f} M events/s of {EVENT_BYTES} B); "
        f"CPU-ns per event: reader {raw_reader_ns:.2f}, writer {raw_writer_ns:.2f}; from memory "
        f"{raw_memory / 1e9:.2f} GB/s, reader {memory_reader_ns:.2f}, writer {memory_writer_ns:.2f}"
    )
    for r in runs:
        print(
            f"{r['tools']:>20}: {r['events_per_s'] / 1e6:6.2f} M events/s, ratio to raw socket {r['ratio']:.3f} "
            f"(from memory {r['ratio_from_memory']:.3f}); "
            f"CPU-ns per event: daemon {r['daemon_cpu_ns_per_event']:.1f}, clients {r['client_cpu_ns_per_event']:.1f}"
        )
    # The headline figures are the last run's (memcheck by default), as before runs were named.
    summary = dict(
        runs[-1],
        raw_socket_bytes_per_s=round(raw),
        raw_socket_default_buffer_bytes_per_s=round(raw_default),
        raw_socket_reader_cpu_ns_per_event=round(raw_reader_ns, 3),
        raw_socket_writer_cpu_ns_per_event=round(raw_writer_ns, 3),
        raw_from_memory_bytes_per_s=round(raw_memory),
        raw_from_memory_region_bytes=region,
        raw_from_memory_reader_cpu_ns_per_event=round(memory_reader_ns, 3),
        raw_from_memory_writer_cpu_ns_per_event=round(memory_writer_ns, 3),
        clients=args.clients,
        batch_events=args.batch_events,
        batches_per_kernel=args.batches_per_kernel,
        detector_threads=args.detector_threads,
        queue_depth=args.queue_depth,
        by_tools={r["tools"]: r for r in runs},
        cores=len(os.sched_getaffinity(0)),
        python=platform.python_version(),
        quick=args.quick,
    )
    print(json.dumps(summary))
    return status


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
