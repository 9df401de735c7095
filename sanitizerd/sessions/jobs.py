"""Jobs: the sessions of one ``sanitizerd run`` (or one training job), their configuration, who watches
their findings, and when they are idle.

Job names are each uid's own: a job is a name and the uid of the sessions and requests that name it, so two users
who pick the same name have two jobs, which share no session, configuration, watcher, IPC name or sdccheck state.
Nothing a uid sends about a job (``hello``, ``job_start``, ``watch``, ``wait_job``) touches another uid's job, and
nothing answers differently because another uid uses the name: there is nothing to refuse, so no answer tells one
user whether another's job exists. Sessions without a job name are a job per uid alike.

Admins (root, ``--admin-group``) read every uid's jobs through queries; an admin's ``watch`` of a name watches every
uid's job of that name (its own included), without making any of them in use.

Watchers never slow the job: what is handed to a watcher goes into its bounded outbox without waiting, and a
watcher whose outbox is full (its reader fell behind, or never reads) is dropped with a reason.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
import msgspec
from anyio.streams.memory import MemoryObjectSendStream

from sanitizerd.detectors._cross_npu import JobAccesses
from sanitizerd.detectors.sdccheck import SdcCheck, SdcFinding
from sanitizerd.sessions.ipc import IpcTable
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.model import Finding

_encoder = msgspec.msgpack.Encoder()

# (job name, uid): every job is one uid's; the name is "" for that uid's sessions without a job name.
JobKey = tuple[str, int]

SDC_JOBS_KEPT = 256  # jobs whose sdccheck state (references, open replica steps) the daemon keeps
SDC_HOST_ENTRIES = 1 << 20  # signature entries all jobs' sdccheck state may hold; the least recent jobs' go first
MAX_JOBS = 4096  # jobs in use at once (registered, watched or with a live session), over every uid
MAX_JOBS_PER_UID = 512  # of which one uid may hold: one user's flood of job names must not lock the others out
WATCH_MESSAGES = 1024  # messages a watcher's outbox holds before the watcher is dropped
WATCH_BYTES = 64 << 20  # recorded producer bytes a watcher may have waiting before it is dropped


def job_key(name: str, uid: int) -> JobKey:
    """The job a session or request of ``uid`` naming ``name`` means: that uid's job of the name."""
    return (name, uid)


@dataclass(eq=False, slots=True)
class Watcher:
    """One control connection's outbox for every job it watches. ``offer`` never waits: a full outbox drops the
    watcher (``reason`` says why, ``dropped`` is set), and the connection ends with that reason."""

    outbox: MemoryObjectSendStream[m.Message]
    max_bytes: int = WATCH_BYTES
    queued_bytes: int = 0  # recorded bytes offered and not yet written out (``delivered``)
    reason: str = ""
    dropped: anyio.Event = field(default_factory=anyio.Event)

    def offer(self, message: m.Message) -> bool:
        """Queue a message for the watcher without waiting; False once the watcher is (or is now) dropped."""
        if self.reason:
            return False
        size = _recorded_bytes(message)
        if self.queued_bytes + size > self.max_bytes:
            return self.drop(f"more than {self.max_bytes} recorded bytes waiting for this watcher to read them")
        try:
            self.outbox.send_nowait(message)
        except anyio.WouldBlock:
            return self.drop(f"more than {WATCH_MESSAGES} messages waiting for this watcher to read them")
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            return self.drop("the watcher's connection closed")
        self.queued_bytes += size
        return True

    def delivered(self, message: m.Message) -> None:
        """The connection wrote ``message`` out: its bytes no longer wait."""
        self.queued_bytes -= _recorded_bytes(message)

    def drop(self, reason: str) -> bool:
        self.reason = self.reason or reason
        self.dropped.set()
        return False


def _recorded_bytes(message: m.Message) -> int:
    return len(message.body) if isinstance(message, m.Recorded) else 0


@dataclass(slots=True)
class Job:
    key: JobKey
    config: m.Config | None = None  # registered by job_start; None: the daemon's default
    registrations: int = 0
    claims: int = 0  # sessions admitted and not started yet (their store row is being opened)
    live: set[int] = field(default_factory=set)
    idle: anyio.Event = field(default_factory=anyio.Event)
    watchers: list[Watcher] = field(default_factory=list)
    recorders: list[Watcher] = field(default_factory=list)
    sessions: int = 0
    kernels: int = 0
    events: int = 0
    findings: int = 0
    signatures: int = 0
    ipc: IpcTable = field(default_factory=IpcTable)
    # accesses to memory the job's devices share, compared across its sessions (cross-NPU racecheck); they go with
    # the job, once no session, registration or watcher holds it
    cross_npu: JobAccesses = field(default_factory=JobAccesses)

    def __post_init__(self) -> None:
        self.idle.set()

    @property
    def unused(self) -> bool:
        return not (self.registrations or self.claims or self.live or self.watchers)


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: str  # an error frame's reason: job_limit
    message: str


class Jobs:
    """Lives on the event loop thread; every method is called from it, and none waits."""

    def __init__(self, default_config: m.Config) -> None:
        self.default_config = default_config
        self._jobs: dict[JobKey, Job] = {}
        self._by_uid: dict[int, int] = {}  # uid -> its jobs in use
        # sdccheck state outlives a job's sessions: ranks of one training job come and go at their own pace (a
        # fast rank may close before a slow one connects). The most recent jobs' state is kept.
        self._sdc: OrderedDict[JobKey, SdcCheck] = OrderedDict()
        self._sdc_held = 0  # signature entries over every kept job's state
        # Admins' watches by job name: each watches every uid's job of the name (watchers, and those recording).
        self._admin_watchers: dict[str, list[Watcher]] = {}
        self._admin_recorders: dict[str, list[Watcher]] = {}

    def __len__(self) -> int:
        return len(self._jobs)

    # --- admission ---------------------------------------------------------------------------------------------

    def refusal(self, key: JobKey, uid: int, admin: Callable[[], bool]) -> Refusal | None:
        """Why ``uid`` may not use the job (join, register, watch, wait on it), or None. Changes nothing. Only the
        bounds on jobs in use refuse: the job is ``uid``'s own. ``admin`` is asked only at the per-uid bound (it
        reads /proc)."""
        if key not in self._jobs:
            if len(self._jobs) >= MAX_JOBS:
                return Refusal("job_limit", f"the daemon holds its limit of {MAX_JOBS} jobs in use")
            if self._by_uid.get(uid, 0) >= MAX_JOBS_PER_UID and not admin():
                return Refusal("job_limit", f"uid {uid} holds its limit of {MAX_JOBS_PER_UID} jobs in use")
        return None

    def admit(self, key: JobKey, uid: int, admin: Callable[[], bool]) -> Refusal | None:
        """A session of ``uid`` may join the job: claim it, until ``session_started`` or ``release``. Check and
        claim in one step, so that the job stays in use while the session's store row is being opened."""
        refused = self.refusal(key, uid, admin)
        if refused is None:
            self._use(key).claims += 1
        return refused

    def release(self, key: JobKey) -> None:
        """An admitted session that did not start after all."""
        job = self._jobs.get(key)
        if job is not None and job.claims:
            job.claims -= 1
            self._forget_if_unused(job)

    def _use(self, key: JobKey) -> Job:
        """The job, made in use (after ``refusal`` said it may be)."""
        job = self._jobs.get(key)
        if job is None:
            job = self._jobs[key] = Job(key)
            self._by_uid[key[1]] = self._by_uid.get(key[1], 0) + 1
        return job

    def _forget_if_unused(self, job: Job) -> None:
        if not job.unused or self._jobs.get(job.key) is not job:
            return
        del self._jobs[job.key]
        job.cross_npu.release()
        left = self._by_uid[job.key[1]] - 1
        if left:
            self._by_uid[job.key[1]] = left
        else:
            del self._by_uid[job.key[1]]

    # --- configuration -----------------------------------------------------------------------------------------

    def register(self, key: JobKey, config: m.Config, uid: int, *, again: bool = False) -> None:
        """``job_start`` (after ``refusal``): the configuration the job's sessions are welcomed with; ``again``:
        by a connection that registered it already (one registration each, whatever it sends)."""
        job = self._use(key)
        job.config = config
        job.registrations += not again

    def registered(self) -> list[JobKey]:
        """The jobs a connection has registered and not yet given up (a live ``run``)."""
        return [key for key, job in self._jobs.items() if job.registrations]

    def unregister(self, key: JobKey) -> None:
        job = self._jobs.get(key)
        if job is not None and job.registrations:
            job.registrations -= 1
            if not job.registrations:
                job.config = None
            self._forget_if_unused(job)

    def config_for(self, key: JobKey, hello: m.Hello) -> m.Config:
        """A registered job's configuration wins; then what the client asked for; then the daemon default."""
        job = self._jobs.get(key)
        if job is not None and job.config is not None:
            return job.config
        return hello.config or self.default_config

    # --- sessions ------------------------------------------------------------------------------------------------

    def signature(self, key: JobKey, signature: m.Signature, rank: int) -> list[SdcFinding]:
        """sdccheck over every rank of the job (a replay against its reference, replicas against each other)."""
        sdc = self._sdc.pop(key, None) or SdcCheck()
        self._sdc[key] = sdc
        before = sdc.held
        findings = sdc.add(signature, rank)
        self._sdc_held += sdc.held - before
        while len(self._sdc) > 1 and (len(self._sdc) > SDC_JOBS_KEPT or self._sdc_held > SDC_HOST_ENTRIES):
            _, oldest = self._sdc.popitem(last=False)
            self._sdc_held -= oldest.held
        return findings

    def cross_npu(self, key: JobKey) -> JobAccesses:
        job = self._jobs.get(key)
        return job.cross_npu if job is not None else JobAccesses()

    def ipc_table(self, key: JobKey) -> IpcTable:
        job = self._jobs.get(key)
        return job.ipc if job is not None else IpcTable()

    def session_started(self, key: JobKey, session: int) -> None:
        """An admitted session (``admit``) is live."""
        job = self._jobs[key]
        job.claims -= 1
        job.live.add(session)
        job.sessions += 1
        if job.idle.is_set():
            job.idle = anyio.Event()

    def session_ended(self, info: m.SessionInfo) -> None:
        job = self._jobs.get(job_key(info.job, info.uid))
        if job is None or info.session not in job.live:
            return
        job.live.discard(info.session)
        job.ipc.session_ended(info.session)
        job.kernels += info.kernels
        job.events += info.events
        job.signatures += info.signatures
        if not job.live:
            job.idle.set()
        self._forget_if_unused(job)

    # --- watchers ------------------------------------------------------------------------------------------------

    def publish(self, key: JobKey, findings: list[Finding]) -> None:
        """Hand findings to the watchers of their job, without waiting for any of them."""
        job = self._jobs.get(key)
        if job is None or not findings:
            return
        job.findings += len(findings)
        self._tell(job, self._watchers(job), m.Findings(findings=findings))

    def kernel_checked(self, key: JobKey, report: m.KernelChecked) -> None:
        job = self._jobs.get(key)
        if job is not None:
            self._tell(job, self._watchers(job), report)

    def recording(self, key: JobKey) -> bool:
        job = self._jobs.get(key)
        return job is not None and bool(job.recorders or (key[0] and self._admin_recorders.get(key[0])))

    def record(self, key: JobKey, session: int, message: m.Message) -> None:
        """Hand a producer's message to the job's recorders (encoded once for all of them)."""
        job = self._jobs.get(key)
        recorders = self._watchers(job, recording=True) if job is not None else []
        if job is not None and recorders:
            self._tell(job, recorders, m.Recorded(session=session, body=_encoder.encode(message)))

    def _watchers(self, job: Job, *, recording: bool = False) -> list[Watcher]:
        """The job's own watchers (or recorders) and the admins' watching its name."""
        own = job.recorders if recording else job.watchers
        by_name = self._admin_recorders if recording else self._admin_watchers
        admins = by_name.get(job.key[0]) if job.key[0] else None
        return own + admins if admins else list(own)

    def _tell(self, job: Job, watchers: list[Watcher], message: m.Message) -> None:
        for watcher in watchers:
            if not watcher.offer(message):
                self.unwatch(job.key, watcher)

    def watch(self, key: JobKey, watcher: Watcher, *, admin: bool, record: bool = False) -> None:
        """(After ``refusal``.) A user's watch makes its job in use; an admin's watch of a name watches every uid's
        job of that name, and makes none of them in use."""
        if admin and key[0]:
            watching = [self._admin_watchers.setdefault(key[0], [])]
            if record:
                watching.append(self._admin_recorders.setdefault(key[0], []))
        else:
            job = self._use(key)
            watching = [job.watchers, job.recorders] if record else [job.watchers]
        for watchers in watching:
            if watcher not in watchers:
                watchers.append(watcher)

    def unwatch(self, key: JobKey, watcher: Watcher) -> None:
        for by_name in (self._admin_watchers, self._admin_recorders):
            watchers = by_name.get(key[0])
            if watchers is not None and watcher in watchers:
                watchers.remove(watcher)
                if not watchers:
                    del by_name[key[0]]
        job = self._jobs.get(key)
        if job is not None and watcher in job.watchers:
            job.watchers.remove(watcher)
            if watcher in job.recorders:
                job.recorders.remove(watcher)
            self._forget_if_unused(job)

    async def wait_idle(self, key: JobKey) -> m.JobIdle:
        """(After ``refusal``.) Once the job has no live session: what its sessions did. A job not in use is idle
        already, and is not made in use by being waited on."""
        job = self._jobs.get(key)
        if job is None:
            return m.JobIdle(job=key[0], sessions=0, kernels=0, events=0, findings=0)
        while job.live:
            await job.idle.wait()
        sdc = self._sdc.get(key)
        return m.JobIdle(
            job=key[0], sessions=job.sessions, kernels=job.kernels, events=job.events, findings=job.findings,
            signatures=job.signatures,
            replica_steps_checked=sdc.checked if sdc else 0,
            replica_steps_incomplete=(sdc.incomplete + sdc.open_replica_steps) if sdc else 0,
            replica_note=sdc.describe_incomplete() if sdc else "",
        )  # fmt: skip
