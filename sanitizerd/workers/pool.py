"""The listener's worker processes: started, watched, restarted when one dies, and asked what only they know.

A worker that dies is started again at once, and at most ``RESTARTS`` times in ``RESTART_WINDOW`` seconds; past
that it waits, doubling the wait up to ``RESTART_BACKOFF_MAX``, so that a worker that cannot start does not spin.
Every restart is logged and counted (``sanitizerd_worker_restarts_total``). The clients of a dead worker's sessions
see their connection end and resume, as after a daemon restart: the new worker closes the sessions the dead one
left open (its jobs' only) before it takes a connection. A worker that stalls (alive, but its event loop stuck, so
that it serves nobody) is made one: pinged every few seconds, one that says nothing for ``worker_stall_timeout``
seconds is killed (``sanitizerd_worker_stalls_total``), and so started again.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any, Protocol

import anyio
import anyio.abc
import msgspec
import structlog

from sanitizerd.daemon import DaemonSettings
from sanitizerd.metrics import Metrics
from sanitizerd.sessions.hub import Limits, LiveView
from sanitizerd.sessions.jobs import job_key
from sanitizerd.workers.channel import (
    AskLive,
    AskMetrics,
    Channel,
    ChannelClosed,
    CloseCompat,
    CompatOpened,
    Ended,
    Handoff,
    Live,
    MetricsText,
    OpenCompat,
    Packet,
    Ping,
    Pong,
    Ready,
)
from sanitizerd_protocol import messages as m

log = structlog.get_logger("sanitizerd.workers")

RESTARTS = 5
RESTART_WINDOW = 60.0
RESTART_BACKOFF_MAX = 30.0
ASK_TIMEOUT = 2.0  # seconds a view waits for a worker's answer (a worker that does not answer is left out)
SETTINGS_ENV = "SANITIZERD_WORKER_SETTINGS"


def _path_to_text(value: object) -> object:
    if isinstance(value, PurePath):
        return str(value)
    raise NotImplementedError(f"{type(value).__name__} has no place in a worker's settings")


def _text_to_path(kind: type, value: object) -> object:
    if kind is Path and isinstance(value, str):
        return Path(value)
    raise NotImplementedError(f"{kind} has no place in a worker's settings")


def encode_settings(settings: DaemonSettings) -> str:
    """A worker's settings as JSON (for its environment): plain data only, checked against ``DaemonSettings`` when
    read, where unpickling would run whatever the bytes named."""
    return msgspec.json.encode(settings, enc_hook=_path_to_text).decode()


def decode_settings(text: str) -> DaemonSettings:
    """The settings ``encode_settings`` wrote (msgspec.ValidationError when they are not)."""
    return msgspec.json.decode(text, type=DaemonSettings, dec_hook=_text_to_path)


STARTUP_TIMEOUT = 60.0  # seconds the listener waits for its workers before it lets clients find the socket
PING_INTERVAL = 5.0  # seconds between the watchdog's pings of a ready worker (at most; a quarter of the timeout)


class WorkersCompat(Protocol):
    """The listener's msSanitizer-form sockets (``sanitizerd.server.compat_socket``), as its workers use them."""

    async def open(self, request: OpenCompat, holder: Channel) -> m.CompatListening:
        """For a worker's control connection: the worker's channel holds it."""
        ...

    def close(self, name: str) -> None:
        """The control connection that asked for it ended."""
        ...

    def orphan(self, holder: Channel) -> None:
        """The worker died: its sockets stay open, for the hooks and for their runs to adopt."""
        ...


@dataclass(eq=False)
class Worker:
    index: int
    process: anyio.abc.Process | None = None
    channel: Channel | None = None
    up: anyio.Event = field(default_factory=anyio.Event)  # set while a started worker takes connections (Ready)
    restarts: deque[float] = field(default_factory=deque)
    # Producer connections handed to it and not yet ended, by uid: at least its live sessions (it may not have
    # opened them yet, or not yet said that they ended).
    producers: dict[int, int] = field(default_factory=dict)
    order: anyio.Lock = field(default_factory=anyio.Lock)  # handoffs in the order the listener read them (FIFO)
    heard: float = 0.0  # when it last said anything (monotonic): the watchdog's measure of a turning event loop
    saturated: str = ""  # why its detector threads were saturated at its last Pong ("" when they were not)


class Pool:
    def __init__(self, settings: DaemonSettings, metrics: Metrics, limits: Callable[[], Limits]) -> None:
        self.settings = settings
        self._limits = limits  # those in force now: a worker started after a SIGHUP gets the reloaded ones
        self.metrics = metrics
        self.workers = [Worker(i) for i in range(settings.workers)]
        self.stopping = False
        self._asks = itertools.count(1)
        self._answers: dict[int, tuple[anyio.Event, list[Any]]] = {}
        self._compat: WorkersCompat | None = None  # while it runs

    # --- processes ---------------------------------------------------------------------------------------------

    async def run(
        self, compat: WorkersCompat, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Start every worker and keep them running until ``stop``; ``compat``: the sockets they ask for."""
        self._compat = compat
        async with anyio.create_task_group() as tg:
            for worker in self.workers:
                tg.start_soon(self._supervise, worker)
            with anyio.move_on_after(STARTUP_TIMEOUT):
                for worker in self.workers:
                    await worker.up.wait()
            late = [worker.index for worker in self.workers if not worker.up.is_set()]
            if late:
                log.error("workers not ready; serving without them until they are", workers=late)
            task_status.started()

    async def _supervise(self, worker: Worker) -> None:
        pause = 1.0
        while not self.stopping:
            now = time.monotonic()
            while worker.restarts and now - worker.restarts[0] > RESTART_WINDOW:
                worker.restarts.popleft()
            if not worker.restarts:
                pause = 1.0  # a minute without a restart: the next burst starts from the shortest wait again
            if len(worker.restarts) >= RESTARTS:
                log.error("worker restarting too often; waiting", worker=worker.index, wait_s=pause)
                await anyio.sleep(pause)
                pause = min(pause * 2, RESTART_BACKOFF_MAX)
                worker.restarts.clear()
            code = await self._run_once(worker)
            if self.stopping:
                return
            worker.restarts.append(time.monotonic())
            self.metrics.worker_restarts.inc()
            log.error("worker ended; starting it again", worker=worker.index, exit=code)

    async def _run_once(self, worker: Worker) -> int | None:
        mine, theirs = Channel.pair()
        current = dataclasses.replace(self.settings, limits=self._limits())
        env = dict(os.environ, **{SETTINGS_ENV: encode_settings(current)})
        command = [sys.executable, "-m", "sanitizerd.workers.worker", str(theirs.fileno()), str(worker.index)]
        try:
            process = await anyio.open_process(
                command, stdin=None, stdout=None, stderr=None, pass_fds=[theirs.fileno()], env=env
            )
        except OSError as exc:
            log.error("worker could not be started", worker=worker.index, detail=str(exc))
            mine.close()
            theirs.close()
            await anyio.sleep(1.0)
            return None
        finally:
            theirs.close()
        worker.process, worker.channel = process, Channel(mine)
        log.info("worker started", worker=worker.index, pid=process.pid)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._read, worker, tg.cancel_scope)
                tg.start_soon(self._watch, worker, process)
                code = await process.wait()
                tg.cancel_scope.cancel()
            return code
        finally:
            worker.up = anyio.Event()
            worker.saturated = ""
            worker.producers.clear()  # its connections ended with it
            if self._compat is not None:
                self._compat.orphan(worker.channel)
            worker.channel.close()
            worker.channel = None
            if process.returncode is None:  # the listener stops now: its workers with it
                process.kill()
                with anyio.CancelScope(shield=True):
                    await process.wait()

    async def _watch(self, worker: Worker, process: anyio.abc.Process) -> None:
        """Once the worker is ready: ping it, and kill it if it has said nothing for the stall timeout (read at each
        look: SIGHUP may change it). Its supervisor then starts it again, as after any death."""
        await worker.up.wait()
        worker.heard = time.monotonic()
        while not self.stopping:  # draining, stop() has its own deadline
            timeout = self._limits().worker_stall_timeout
            await anyio.sleep(min(PING_INTERVAL, timeout / 4))
            silent = time.monotonic() - worker.heard
            if silent > timeout and not self.stopping:
                log.error("worker stalled; killed", worker=worker.index, pid=process.pid, silent_s=round(silent, 1))
                self.metrics.worker_stalls.inc()
                process.kill()
                return
            if worker.channel is not None:
                with anyio.move_on_after(PING_INTERVAL):  # a stuck worker's full channel must not stop the watch
                    await self._tell(worker.channel, Ping())

    def signal_all(self, signum: int) -> None:
        """``signum`` to every running worker; SIGHUP only to those ready (it would end one still starting, which
        reads the reloaded limits at its start anyway)."""
        for worker in self.workers:
            if signum == signal.SIGHUP and not worker.up.is_set():
                continue
            if worker.process is not None and worker.process.returncode is None:
                try:
                    worker.process.send_signal(signal.Signals(signum))
                except ProcessLookupError:
                    pass

    async def stop(self, deadline: float) -> None:
        """Each worker drains its sessions (SIGTERM); those not gone after ``deadline`` seconds are killed."""
        self.stopping = True
        self.signal_all(signal.SIGTERM)
        with anyio.move_on_after(deadline):  # a second SIGTERM cancels the wait: _run_once kills the rest
            for worker in self.workers:
                if worker.process is not None:
                    await worker.process.wait()
        for worker in self.workers:
            if worker.process is not None and worker.process.returncode is None:
                log.warning("worker did not stop in time; killed", worker=worker.index)
                worker.process.kill()

    # --- connections -------------------------------------------------------------------------------------------

    def producers(self, uid: int | None = None) -> int:
        """Producer connections in the workers (of ``uid``, or of every uid): never fewer than live sessions."""
        # list() copies under the GIL: /readyz reads this from the metrics thread while the loop changes it.
        if uid is None:
            return sum(sum(list(worker.producers.values())) for worker in self.workers)
        return sum(worker.producers.get(uid, 0) for worker in self.workers)

    async def hand(
        self,
        index: int,
        fd: int,
        data: bytes,
        *,
        welcomed: bool,
        wait: float,
        producer_uid: int | None = None,
        compat: tuple[str, str] = ("", ""),
    ) -> bool:
        """Hand a connection to worker ``index`` (waiting up to ``wait`` seconds while it restarts); False when it
        could not be handed (the caller closes it, and its client tries again as after a daemon restart).
        ``compat``: (job, layout) of a connection accepted on a job's msSanitizer-form socket."""
        worker = self.workers[index]
        with anyio.move_on_after(wait):
            await worker.up.wait()
        channel = worker.channel
        if channel is None or not worker.up.is_set():
            log.warning("worker not running; connection closed for its client to retry", worker=index)
            return False
        try:
            handoff = Handoff(size=len(data), welcomed=welcomed, compat_job=compat[0], compat_layout=compat[1])
            await channel.send(handoff, fd=fd, data=data)
        except (ChannelClosed, OSError) as exc:
            log.warning("connection not handed: the worker is gone", worker=index, detail=str(exc))
            return False
        if producer_uid is not None:
            worker.producers[producer_uid] = worker.producers.get(producer_uid, 0) + 1
        return True

    @staticmethod
    async def _tell(channel: Channel, packet: Packet) -> None:
        try:
            await channel.send(packet)
        except (ChannelClosed, OSError):
            pass

    # --- questions to the workers ------------------------------------------------------------------------------

    async def live(self, *, besides: int = -1) -> LiveView:
        """The live sessions and registered jobs of every worker but ``besides``."""
        answers = await self._ask_all(AskLive, besides)
        return LiveView(
            [info for answer in answers for info in answer.sessions],
            [job_key(*key) for answer in answers for key in answer.registered],
        )

    async def metrics_texts(self) -> list[bytes]:
        return [answer.text for answer in await self._ask_all(AskMetrics, -1)]

    async def _ask_all(self, kind: type[AskLive] | type[AskMetrics], besides: int) -> list[Any]:
        ask = next(self._asks)
        done = anyio.Event()
        answers: list[Any] = []
        asked = [w for w in self.workers if w.index != besides and w.channel is not None]
        if not asked:
            return []
        self._answers[ask] = (done, answers)
        expected = len(asked)
        try:
            for worker in asked:
                assert worker.channel is not None
                try:
                    await worker.channel.send(kind(ask=ask))
                except (ChannelClosed, OSError):
                    expected -= 1
            with anyio.move_on_after(ASK_TIMEOUT):
                while len(answers) < expected:
                    await done.wait()
                    done = anyio.Event()
                    self._answers[ask] = (done, answers)
        finally:
            self._answers.pop(ask, None)
        return answers

    async def _read(self, worker: Worker, scope: anyio.CancelScope) -> None:
        """What a worker says: answers to the listener's questions, and its own questions about the others."""
        assert worker.channel is not None
        channel = worker.channel
        async with anyio.create_task_group() as tg:
            while True:
                try:
                    packet, conn, _data = await channel.receive()
                except ChannelClosed:
                    return
                worker.heard = time.monotonic()
                if conn is not None:
                    conn.close()  # a worker hands nothing to the listener
                self._take(worker, packet, channel, tg)

    def _take(self, worker: Worker, packet: Packet, channel: Channel, tg: anyio.abc.TaskGroup) -> None:
        match packet:
            case Live(ask=ask) | MetricsText(ask=ask) if ask in self._answers:
                done, answers = self._answers[ask]
                answers.append(packet)
                done.set()
            case OpenCompat(ask=ask) if self._compat is not None:
                compat = self._compat

                async def opened() -> None:
                    answer = await compat.open(packet, channel)
                    await self._tell(channel, CompatOpened(ask=ask, answer=answer))

                tg.start_soon(opened)
            case CloseCompat(name=name) if self._compat is not None:
                self._compat.close(name)
            case Pong(saturated=saturated):
                worker.saturated = saturated
            case Ready():
                worker.up.set()
                log.info("worker ready", worker=worker.index)
            case Ended(uid=uid) if worker.producers.get(uid, 0) > 0:
                worker.producers[uid] -= 1
                if not worker.producers[uid]:
                    del worker.producers[uid]
            case AskLive(ask=ask):

                async def answer() -> None:
                    view = await self.live(besides=worker.index)
                    try:
                        await channel.send(Live(ask=ask, sessions=view.sessions, registered=view.registered))
                    except (ChannelClosed, OSError):
                        pass

                tg.start_soon(answer)
