"""The client API a runtime hook or Python program uses to stream what it does to sanitizerd.

Messages are framed in the caller's thread and handed to a background sender through a bounded queue: when
the daemon is slower than the program, ``put`` blocks (backpressure); nothing is ever dropped. Small event
arrays are coalesced into batches of ``batch_events``. A reader thread collects verdicts and errors.

Thread-safe: one lock keeps messages in the order callers issued them. Fork-safe: a child process that uses
an inherited client transparently opens its own session.
"""

from __future__ import annotations

import itertools
import os
import queue
import socket
import threading
import time
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from client_shim.record_buffer import hold
from client_shim.transport import JOB_ENV, ClientError, FrameSocket, Refused, explicit_socket
from sanitizerd_protocol import EVENT_DTYPE, PROTOCOL_VERSION, LocalProtocolError
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.records import block_keys

_STOP = object()
# Sent frames kept for framing the next ones: a batch framed in a fresh bytearray of megabytes costs a page fault
# per 4 KiB, more than the copy itself.
SPARE_FRAMES = 4
_BLOCK_KEYS = 3 << 16  # aiv, aic and aicore blocks, 16-bit ids
# The device a client speaks for when its program names none. The client's kernels are described by the program
# (emulated, or replayed by a hook), and a program that never picks a device is a single-card run, which runs on the
# runtime's device 0 (the first visible card): so its findings say "on device 0", as msSanitizer's would for it,
# not the protocol's -1 for "unknown", which no real launch has.
DEFAULT_DEVICE = 0

# This process's clients not yet closed, so that whoever runs their daemon can end them before stopping it
# (``open_clients``): a session still open when its daemon stops is resumed, and its close waits for a daemon that
# will not come. Weak: a client the program dropped is not kept alive for it.
_live: weakref.WeakSet[Client] = weakref.WeakSet()
_live_lock = threading.Lock()  # a WeakSet must not change while it is iterated, and clients open on any thread


def open_clients() -> list[Client]:
    """The clients this process opened and has not closed yet (a forked child's inherited ones are its parent's)."""
    with _live_lock:
        clients = list(_live)
    return [client for client in clients if client._pid == os.getpid() and not client._closing]


@dataclass(slots=True)
class _Direct:
    """A batch the sender writes from the caller's own array, then says so (``sent``); the caller waits for it."""

    head: bytearray
    records: memoryview
    sent: threading.Event


class Client:
    def __init__(
        self,
        socket_path: str | os.PathLike[str] | None = None,
        *,
        job: str | None = None,
        device: int | None = None,
        rank: int = -1,
        local_rank: int = -1,
        world_size: int = 0,
        tool: str = "client_shim",
        config: m.Config | None = None,
        batch_events: int = 65536,
        queue_frames: int = 8,
        timeout: float = 30.0,
        resume_buffer: int = 64 << 20,
        resume_timeout: float = 30.0,
    ) -> None:
        # None: the daemon is found at the first connect, and a resume goes back to that one.
        self.socket_path: Path | None = Path(socket_path) if socket_path else explicit_socket()
        self.job = job if job is not None else os.environ.get(JOB_ENV, "")
        # None, or -1 as callers and the launcher's identity (client_shim.attach) say "not given": DEFAULT_DEVICE.
        self.device = DEFAULT_DEVICE if device is None or device < 0 else device
        self._hello_fields: dict[str, object] = dict(
            device=self.device, rank=rank, local_rank=local_rank, world_size=world_size, tool=tool
        )
        self._requested_config = config
        self.batch_events = batch_events
        self.queue_frames = queue_frames
        self.timeout = timeout
        # Resuming after the daemon goes away (0: off): the session's frames are kept, up to this many bytes, and
        # replayed to the next daemon, which stores only what the lost one had not (docs/client.md). A session
        # that outgrew the buffer cannot be resumed, and fails as before when its daemon goes away.
        self.resume_buffer = resume_buffer
        self.resume_timeout = resume_timeout
        self.resumes = 0
        self._order = threading.RLock()
        self._pid = -1
        self._connect()

    # --- connection lifecycle ----------------------------------------------------------------------------------

    def _connect(self) -> None:
        self._pid = os.getpid()
        self._socket, welcome = self._open(resume=0)
        self.session: int = welcome.session
        self.config: m.Config = welcome.config
        self._queue: queue.Queue[object] = queue.Queue(self.queue_frames)
        self._pending: list[np.ndarray] = []
        self._pending_events = 0
        self._pending_kernel: int | None = None
        self._serial = itertools.count(0)  # msSanitizer numbers host and device records from 0
        self._kernel_ids = itertools.count(1)
        self._location_ids = itertools.count(1)
        self._locations: dict[tuple[object, ...], int] = {}
        self._verdicts: dict[int, m.Verdict] = {}
        # Per kernel and block, the records the device's per-block buffer (--cache-size MB) holds, and those
        # it could not: msSanitizer's device hooks lose records past it (reference §1.4), and so do we,
        # saying how many at kernel_end.
        self._block_used = np.zeros(_BLOCK_KEYS, dtype=np.int64)  # by block_type << 16 | block_id
        self._block_records: dict[int, int] = {}  # blocks beyond that range (a block type above 2)
        self._block_lost: dict[int, int] = {}
        self.ipc_results: list[m.IpcResult] = []  # the daemon's answers to ipc_* calls, in order
        self._closed_reply: m.Closed | None = None
        self._error: str | None = None
        self._done = threading.Condition()
        self._closing = False
        self._io = threading.Lock()  # one writer at a time on the socket, and no write while it is replaced
        self._generation = 0  # bumped by every resume: which socket a thread's failure was about
        self._log: list[bytes | bytearray] = []
        self._spare: list[bytearray] = []  # sent frames no log keeps: the sender gives them back for reuse
        self._log_bytes = 0
        self.resumable = self.resume_buffer > 0
        self._sender = threading.Thread(target=self._send_loop, name="sanitizerd-send", daemon=True)
        self._reader = threading.Thread(target=self._read_loop, name="sanitizerd-read", daemon=True)
        self._sender.start()
        self._reader.start()
        with _live_lock:
            _live.add(self)

    def _open(self, *, resume: int) -> tuple[FrameSocket, m.Welcome]:
        sock = FrameSocket(self.socket_path, timeout=self.timeout)
        self.socket_path = Path(sock.path)
        hello = m.Hello(
            version=PROTOCOL_VERSION,
            pid=self._pid,
            host=socket.gethostname(),
            job=self.job,
            config=self._requested_config,
            resume=resume,
            **self._hello_fields,  # type: ignore[arg-type]
        )
        try:
            welcome = sock.handshake(hello)
        except BaseException:
            sock.close()
            raise
        sock.sock.settimeout(None)
        return sock, welcome

    def _remember(self, frame: bytes | bytearray) -> None:
        """Keep a sent frame for a resume; past the buffer, resuming is given up (and says so in ``resumable``)."""
        self._log_bytes += len(frame)
        if self._log_bytes > self.resume_buffer:
            self.resumable = False
            self._log = []
        else:
            self._log.append(frame)

    def _resume(self, generation: int, reason: str) -> bool:
        """Under ``_io``: reconnect with backoff, resume the session, replay every frame it sent. False (the client
        has failed) when no daemon took it back in ``resume_timeout`` seconds."""
        if generation != self._generation:
            return True  # the other thread resumed already
        self._socket.close()
        deadline = time.monotonic() + self.resume_timeout
        delay = 0.05
        while time.monotonic() < deadline and not (self._closing and self._closed_reply is not None):
            try:
                sock, _ = self._open(resume=self.session)
                for frame in self._log:
                    sock.sendall(frame)
            except Refused as exc:  # a daemon that lost our session (another store), or refuses it: final
                self._fail(f"lost sanitizerd, and the new one would not resume session {self.session}: {exc}")
                return False
            except ClientError:
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            self._socket = sock
            self._generation += 1
            self.resumes += 1
            return True
        self._fail(
            f"lost sanitizerd and no daemon resumed session {self.session} within {self.resume_timeout} s: {reason}"
        )
        return False

    def _ensure_process(self) -> None:
        if os.getpid() != self._pid:
            # A forked child: the parent's socket and threads are not ours. Open our own session.
            self._order = threading.RLock()
            self._connect()

    def _send_loop(self) -> None:
        while True:
            frame = self._queue.get()
            if frame is _STOP:
                return
            if isinstance(frame, _Direct):
                with self._io:  # never resumable: nothing keeps a log to replay
                    try:
                        self._socket.sendall_parts([frame.head, frame.records])
                    except ClientError as exc:
                        self._fail(str(exc))
                        return
                    finally:
                        frame.sent.set()
                    self._queue.task_done()
                continue
            with self._io:
                kept = self.resumable
                if kept:
                    self._remember(frame)  # type: ignore[arg-type]
                try:
                    self._socket.sendall(frame)  # type: ignore[arg-type]
                except ClientError as exc:
                    # A resume replays the whole log, this frame included.
                    if not (self.resumable and self._resume(self._generation, str(exc))):
                        self._fail(str(exc))
                        return
                    self._queue.task_done()
                    continue
                self._queue.task_done()  # under _io: a caller that sees none unfinished may write itself
            if not kept and len(self._spare) < SPARE_FRAMES:
                self._spare.append(frame)  # type: ignore[arg-type]

    def _read_loop(self) -> None:
        while True:
            generation, sock = self._generation, self._socket
            try:
                message = sock.receive()
            except (ClientError, OSError, Exception) as exc:
                if self._closing and self._closed_reply is not None:
                    return
                if self.resumable:
                    with self._io:
                        if self.resumable and self._resume(generation, str(exc)):
                            continue
                self._fail(f"connection to sanitizerd ended: {exc}")
                return
            with self._done:
                if isinstance(message, m.Verdict):
                    self._verdicts[message.kernel] = message
                elif isinstance(message, m.IpcResult):
                    self.ipc_results.append(message)
                elif isinstance(message, m.Closed):
                    self._closed_reply = message
                elif isinstance(message, m.Error):
                    self._error = f"sanitizerd ended the session ({message.reason}): {message.message}"
                self._done.notify_all()
            if isinstance(message, m.Closed | m.Error):
                return

    def _fail(self, reason: str) -> None:
        with self._done:
            self._error = self._error or reason
            self._done.notify_all()

    def _enqueue(self, message: m.Message) -> None:
        """Frame and queue in caller order; blocks while the queue is full (backpressure)."""
        self._put(self._frame(message))

    def _frame(self, message: m.Message) -> bytearray:
        # A frame the resume log may keep is framed fresh: the log counts frames' lengths, not a reused capacity.
        into = self._spare.pop() if self._spare and not self.resumable else None
        return self._socket.frame(message, into)

    def _put(self, frame: bytearray | _Direct) -> None:
        while True:
            if self._error:
                raise ClientError(self._error)
            try:
                self._queue.put(frame, timeout=0.5)
                return
            except queue.Full:
                continue

    def _send(self, message: m.Message) -> None:
        with self._order:
            self._ensure_process()
            self._flush_events()
            self._enqueue(message)

    # --- what a program reports --------------------------------------------------------------------------------

    def device_summary(self, chip: str, block_num: int = 0, device: int | None = None) -> None:
        """The chip the kernels run on; ``device`` None: this client's own (``device``)."""
        if device is not None and device >= 0:
            self.device = self._hello_fields["device"] = device  # a forked child's own session says it too
        self._send(m.DeviceSummary(chip=chip, block_num=block_num, device=self.device))

    def location(
        self, file: str, line: int = 0, column: int = 0, function: str = "", callers: Iterable[int] = ()
    ) -> int:
        """The id of a source location (sent once, reused after); ``callers`` are ids of enclosing frames."""
        key = (file, line, column, function, tuple(callers))
        with self._order:
            self._ensure_process()
            ident = self._locations.get(key)
            if ident is None:
                ident = self._locations[key] = next(self._location_ids)
                location = m.Location(
                    id=ident, file=file, line=line, column=column, function=function, callers=list(key[4])
                )
                self._flush_events()
                self._enqueue(m.Locations(locations=[location]))
            return ident

    def kernel_begin(self, name: str, block_dim: int, kernel_type: str = "aiv") -> int:
        """Start a kernel launch; returns its id for ``events`` and ``kernel_end``."""
        with self._order:
            self._ensure_process()
            kernel = next(self._kernel_ids)
            self._block_records, self._block_lost = {}, {}
            self._block_used = np.zeros(_BLOCK_KEYS, dtype=np.int64)
            self._send(m.KernelBegin(kernel=kernel, name=name, block_dim=block_dim, kernel_type=kernel_type))  # type: ignore[arg-type]
            return kernel

    def events(self, kernel: int, events: np.ndarray) -> None:
        """Queue device events (an ``EVENT_DTYPE`` array) of a running kernel. The array is copied."""
        if events.dtype != EVENT_DTYPE:
            raise TypeError(f"events must have EVENT_DTYPE, not {events.dtype}")
        with self._order:
            self._ensure_process()
            if not self._pending and events.size >= self.batch_events and self._frame_whole(kernel, events):
                return
            events = self._within_buffer(events)
            if self._pending_kernel not in (None, kernel):
                self._flush_events()
            if not self._pending and events.size >= self.batch_events:
                # Framing copies it, so the caller may reuse the array as soon as we return.
                self._enqueue(m.Events(kernel=kernel, records=np.ascontiguousarray(events).view(np.uint8).data))
                return
            self._pending_kernel = kernel
            # A byte copy: numpy copies a structured array field by field, about 30 times slower.
            self._pending.append(np.ascontiguousarray(events).view(np.uint8).copy())
            self._pending_events += events.size
            if self._pending_events >= self.batch_events:
                self._flush_events()

    def _frame_whole(self, kernel: int, events: np.ndarray) -> bool:
        """Send a full batch as one frame if every event fits its block's buffer; False (nothing counted or sent)
        if some do not. Once no resume log is kept the records go from the caller's array with no copy; before,
        the batch is framed first and counted in the frame: the framing copy leaves the records in cache for the
        count, where counting first reads the caller's megabytes from memory twice."""
        events = np.ascontiguousarray(events)
        if not self.resumable:
            if not self._fits(events):
                return False
            self._send_direct(kernel, events.view(np.uint8).data)
            return True
        frame = self._frame(m.Events(kernel=kernel, records=events.view(np.uint8).data))
        # Records are the message's last field, so its last bytes; the view ends before the frame is queued (a
        # bytearray with a view on it cannot be framed in again).
        framed = np.frombuffer(frame, dtype=np.uint8, offset=len(frame) - events.nbytes).view(EVENT_DTYPE)
        fits = self._fits(framed)
        del framed
        if fits:
            self._put(frame)
        return fits

    def _send_direct(self, kernel: int, records: memoryview) -> None:
        """Send a batch with no copy of ours: the frame's head and the records from the caller's array, written here
        or, behind queued frames, by the sender; this returns once the kernel has taken them (the caller may then
        reuse the array). Only once the resume log is given up: a kept frame must own its bytes."""
        head = self._socket.events_head(kernel, records.nbytes)
        with self._io:
            # Nothing queued or being written (callers hold _order, so none is queued meanwhile): write it here,
            # without two thread switches.
            if not self._queue.unfinished_tasks and not self._error:
                try:
                    self._socket.sendall_parts([head, records])
                except ClientError as exc:
                    self._fail(str(exc))
                    raise
                return
        direct = _Direct(head, records, threading.Event())
        self._put(direct)
        while not direct.sent.wait(0.5):
            if self._error:
                raise ClientError(self._error)

    def _fits(self, events: np.ndarray) -> bool:
        """Whether every event fits its block's buffer; if so they are counted as held."""
        return hold(events, self._block_used, self.config.cache_size * (1 << 20) // EVENT_DTYPE.itemsize)

    def _within_buffer(self, events: np.ndarray) -> np.ndarray:
        """The events that still fit their block's record buffer; the rest are counted as lost."""
        # The common case in O(n), no sort: every block still has room after this batch.
        if self._fits(events):
            return events
        capacity = self.config.cache_size * (1 << 20) // EVENT_DTYPE.itemsize
        blocks, inverse, counts = np.unique(block_keys(events), return_inverse=True, return_counts=True)
        used = np.array(
            [
                int(self._block_used[k]) if k < self._block_used.size else self._block_records.get(k, 0)
                for k in blocks.tolist()
            ],
            dtype=np.int64,
        )
        # Rank each event within its block, in order, to keep the first ones that fit.
        order = np.argsort(inverse, kind="stable")
        first_of_block = np.concatenate(([0], np.cumsum(counts)[:-1]))
        rank = np.empty(events.size, dtype=np.int64)
        rank[order] = np.arange(events.size) - np.repeat(first_of_block, counts)
        keep = used[inverse] + rank < capacity
        kept = np.bincount(inverse, weights=keep, minlength=blocks.size).astype(np.int64)
        for key, before, n_kept, n in zip(blocks.tolist(), used.tolist(), kept.tolist(), counts.tolist(), strict=True):
            self._block_records[key] = before + n_kept
            if key < self._block_used.size:
                self._block_used[key] = before + n_kept
            if n > n_kept:
                self._block_lost[key] = self._block_lost.get(key, 0) + n - n_kept
        return events[keep]

    def _flush_events(self) -> None:
        if not self._pending:
            return
        records = self._pending[0] if len(self._pending) == 1 else np.concatenate(self._pending)
        kernel = self._pending_kernel
        self._pending, self._pending_events, self._pending_kernel = [], 0, None
        assert kernel is not None
        self._enqueue(m.Events(kernel=kernel, records=records.data))

    def kernel_end(self, kernel: int) -> None:
        with self._order:
            lost = [
                m.BlockLoss(block_type=key >> 16, block_id=key & 0xFFFF, records=n)
                for key, n in sorted(self._block_lost.items())
            ]
            self._block_lost = {}
            self._send(m.KernelEnd(kernel=kernel, lost=lost))

    def wait_kernel(self, kernel: int, timeout: float | None = None) -> m.Verdict:
        """Block until every detector has checked the kernel (after ``kernel_end``)."""
        with self._done:
            if not self._done.wait_for(lambda: kernel in self._verdicts or self._error, timeout=timeout):
                raise TimeoutError(f"no verdict for kernel {kernel} within {timeout} s")
            if kernel in self._verdicts:
                return self._verdicts.pop(kernel)
            raise ClientError(self._error)

    def _host(self, op: str, address: int, size: int = 0, *, src: int = 0, source: str = "acl",
              location: int = 0, module: int = -1, desc: str = "default", root: int = 0) -> int:  # fmt: skip
        with self._order:
            self._ensure_process()
            serial = next(self._serial)
            self._send(
                m.HostOp(
                    op=op, address=address, size=size, src=src, source=source,  # type: ignore[arg-type]
                    desc=desc, serial=serial, location=location, module=module, root=root,
                )
            )  # fmt: skip
            return serial

    def malloc(
        self, address: int, size: int, *, source: str = "acl", location: int = 0, module: int = -1, root: int = 0
    ) -> int:
        """Report a device allocation; returns its serial number. ``source`` is where it was reported (msSanitizer's
        MemInfoSrc: "acl", "rt", "hal", "bypass", "extra", "manual", "mstx_heap", "mstx_region"); ``root`` is the
        MSTX heap an "mstx_region" is carved from (0: none)."""
        return self._host("malloc", address, size, source=source, location=location, module=module, root=root)

    def free(self, address: int, *, source: str = "acl", location: int = 0, root: int = 0) -> int:
        return self._host("free", address, source=source, location=location, root=root)

    # Host<->device copies are reported by their device side: host->device as ``store``, device->host as
    # ``load``; ``memcpy`` is device->device. ``source`` says which hook saw it (memory of an "extra" or "manual"
    # annotation is judged by the annotations, docs/design.md).
    def memcpy(self, dst: int, src: int, size: int, *, location: int = 0, source: str = "acl", root: int = 0) -> int:
        return self._host("memcpy", dst, size, src=src, location=location, source=source, root=root)

    def memset(self, address: int, size: int, *, location: int = 0, source: str = "acl", root: int = 0) -> int:
        return self._host("memset", address, size, location=location, source=source, root=root)

    def load(self, address: int, size: int, *, location: int = 0, source: str = "acl", root: int = 0) -> int:
        return self._host("load", address, size, location=location, source=source, root=root)

    def store(self, address: int, size: int, *, location: int = 0, source: str = "acl", root: int = 0) -> int:
        return self._host("store", address, size, location=location, source=source, root=root)

    def region_permission(
        self, address: int, size: int, *, read: bool = True, write: bool = True, shared: bool = False,
        device: int = -1,
    ) -> None:
        """What kernels may do in ``[address, address + size)`` from now on (msSanitizer's
        ``mstxMemRegionsSetPermission``); ``shared``: other devices of the job reach it at the same address, and
        cross-NPU racecheck compares their accesses; ``device``: whose memory it is (-1: this session's)."""
        flags = (m.REGION_READ if read else 0) | (m.REGION_WRITE if write else 0) | (m.REGION_SHARED if shared else 0)
        self._send(m.RegionPermission(address=address, size=size, device=device, flags=flags))

    # IPC shared memory between the processes of one job; the daemon answers each in ``ipc_results``.
    def guard_write(self, user_address: int, user_size: int, out_address: int, out_size: int) -> None:
        """Report a host-side write of ``out_size`` bytes at ``out_address`` into the guard area after the buffer
        ``[user_address, + user_size)`` (what msSanitizer's hooks find of an aicpu tiling function)."""
        with self._order:
            self._ensure_process()
            self._send(m.GuardWrite(user_address=user_address, user_size=user_size, out_address=out_address,
                                    out_size=out_size))  # fmt: skip

    def ipc_set(self, name: str, address: int, size: int, *, location: int = 0) -> None:
        """Export ``[address, address + size)`` under ``name``."""
        self._send(m.Ipc(op="set", name=name, address=address, size=size, location=location))

    def ipc_map(self, name: str, address: int, *, location: int = 0) -> None:
        """Map an export of this job (from any of its processes) at ``address`` here."""
        self._send(m.Ipc(op="map", name=name, address=address, location=location))

    def ipc_unmap(self, address: int, *, location: int = 0) -> None:
        self._send(m.Ipc(op="unmap", address=address, location=location))

    def ipc_destroy(self, name: str, *, location: int = 0) -> None:
        """End an export and every mapping of it, in every process."""
        self._send(m.Ipc(op="destroy", name=name, location=location))

    def wait_ipc(self, count: int, timeout: float | None = None) -> list[m.IpcResult]:
        """Block until the daemon has answered ``count`` ipc_* calls in all (so an export is visible to the
        job's other processes); the answers so far."""
        with self._order:
            self._ensure_process()
            self._flush_events()
        with self._done:
            if not self._done.wait_for(lambda: len(self.ipc_results) >= count or self._error, timeout=timeout):
                raise TimeoutError(f"fewer than {count} ipc answers within {timeout} s")
            if self._error and len(self.ipc_results) < count:
                raise ClientError(self._error)
            return list(self.ipc_results)

    def next_serial(self) -> int:
        """A serial number for a device event, from the same sequence as host operations."""
        with self._order:
            return next(self._serial)

    # sdccheck: replay signatures of a training step (docs/client.md).
    def signature(
        self,
        step: int,
        entries: Iterable[tuple[str, str, int]],
        *,
        local_step: int = 0,
        replay: int = 0,
        rank: int = -1,
        phase: str = "replay",
        replica_group: str = "",
        replicas: int = 0,
        outcome: m.ReplicaOutcome | None = None,
    ) -> None:
        """Send a signature: ``entries`` are (name, schema, uint64 digest) in TorchTitan's order. ``replay`` 0 is
        the step's reference run; with ``phase="post_all_reduce"``, the gradients every one of the ``replicas``
        ranks of ``replica_group`` must agree on (``outcome``: the verdict of the group's own comparison, when it
        made one). ``rank`` -1 is this client's rank."""
        self._send(
            m.Signature(
                step=step, local_step=local_step, replay=replay, rank=rank, phase=phase,  # type: ignore[arg-type]
                replica_group=replica_group, replicas=replicas, outcome=outcome,
                entries=[m.SignatureEntry(name=n, schema=s, digest=d) for n, s, d in entries],
            )
        )  # fmt: skip

    def log(self, text: str, level: str = "info") -> None:
        self._send(m.Log(text=text, level=level))

    def flush(self) -> None:
        """Send coalesced events now (they are sent anyway at the next other message or at close)."""
        with self._order:
            self._ensure_process()
            self._flush_events()

    def close(self, timeout: float | None = 60.0) -> m.Closed | None:
        """End the session gracefully: returns once the daemon has finished every check (leaks included)."""
        with self._order:
            if os.getpid() != self._pid or self._closing:
                return self._closed_reply
            self._closing = True
            with _live_lock:
                _live.discard(self)
            try:
                self._flush_events()
                self._enqueue(m.Close())
            except (ClientError, LocalProtocolError):  # the daemon ended the session already: said below
                pass
            self._queue.put(_STOP)
        with self._done:
            self._done.wait_for(lambda: self._closed_reply is not None or self._error, timeout=timeout)
        self._sender.join(timeout=5)
        self._socket.close()
        self._reader.join(timeout=5)
        if self._closed_reply is None and self._error:
            raise ClientError(self._error)
        return self._closed_reply

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
