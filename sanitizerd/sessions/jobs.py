"""Jobs: the sessions of one ``sanitizerd run`` (or one training job), their configuration, who watches
their findings, and when they are idle.

A job belongs to the uid that first opened a session in it, registered it (``job_start``) or watched it. A session
or control request of another uid may not join, register, watch or wait on it: it is refused, and nothing is
changed. A name ``<user>/...`` (the attach path's names) is that user's before anyone used it. Admins (root,
``--admin-group``) may join and watch any job; their watching does not claim a job, so an admin watching a job
before it starts never locks its user out. Once a job is unused (no registration, session
or watcher), its owner keeps the name through the grace period (its ranks may restart, as ``sanitizerd jobs``
shows it "ending"); after that another uid may use the name for a job of its own.

Sessions without a job name are a job per uid: no user's job-less sessions share IPC names, sdccheck state or
watchers with another user's.

Watchers never slow the job: what is handed to a watcher goes into its bounded outbox without waiting, and a
watcher whose outbox is full (its reader fell behind, or never reads) is dropped with a reason.
"""

from __future__ import annotations

import functools
import pwd
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
import msgspec
from anyio.streams.memory import MemoryObjectSendStream

from sanitizerd.detectors.sdccheck import SdcCheck, SdcFinding
from sanitizerd.findings.model import Finding
from sanitizerd.protocol import messages as m
from sanitizerd.sessions.ipc import IpcTable
from sanitizerd.sessions.jobview import DEFAULT_JOB_GRACE

_encoder = msgspec.msgpack.Encoder()

# (job name, uid): the uid only for sessions without a job name (each uid's own), else NO_UID.
JobKey = tuple[str, int]
NO_UID = -1

SDC_JOBS_KEPT = 256  # jobs whose sdccheck state (references, open replica steps) the daemon keeps
SDC_HOST_ENTRIES = 1 << 20  # signature entries all jobs' sdccheck state may hold; the least recent jobs' go first
MAX_JOBS = 4096  # jobs in use at once (registered, watched or with a live session), over every uid
MAX_JOBS_PER_UID = 512  # of which one uid may hold: one user's flood of job names must not lock the others out
ENDED_OWNERS_KEPT = 4096  # names of unused jobs kept for their owner through the grace period; then the oldest go
WATCH_MESSAGES = 1024  # messages a watcher's outbox holds before the watcher is dropped
WATCH_BYTES = 64 << 20  # recorded producer bytes a watcher may have waiting before it is dropped


def job_key(name: str, uid: int) -> JobKey:
    """The job a session or request of ``uid`` naming ``name`` means."""
    return (name, NO_UID if name else uid)


def reserved_for(name: str) -> int:
    """The uid a job name is kept for: ``<user>/...`` (what the attach path derives from a launcher) is that user's,
    whether or not the job exists yet, so that nobody takes a predictable name first. NO_UID: anyone's."""
    user, slash, _rest = name.partition("/")
    return _uid_of(user) if slash and user else NO_UID


@functools.lru_cache(maxsize=256)
def _uid_of(user: str) -> int:
    if user.isdigit():
        return int(user)
    if len(user) > 64:
        return NO_UID
    try:
        return pwd.getpwnam(user).pw_uid
    except (KeyError, ValueError, OSError):
        return NO_UID


def job_label(key: JobKey) -> str:
    return repr(key[0]) if key[0] else f"(no job name, uid {key[1]})"


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
    owner: int = NO_UID  # NO_UID: only admins watch it yet, and the first other user to use it owns it
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

    def __post_init__(self) -> None:
        self.idle.set()

    @property
    def unused(self) -> bool:
        return not (self.registrations or self.claims or self.live or self.watchers)


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: str  # an error frame's reason: permission_denied, job_limit
    message: str


class Jobs:
    """Lives on the event loop thread; every method is called from it, and none waits."""

    def __init__(
        self,
        default_config: m.Config,
        *,
        grace: Callable[[], float] = lambda: DEFAULT_JOB_GRACE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.default_config = default_config
        self._grace = grace  # how long an unused job's name stays its owner's (the job view's grace: "ending")
        self._clock = clock
        self._jobs: dict[JobKey, Job] = {}
        self._by_uid: dict[int, int] = {}  # owner -> jobs in use it owns
        # Unused jobs' owners, oldest first: key -> (owner, when the job became unused).
        self._ended: OrderedDict[JobKey, tuple[int, float]] = OrderedDict()
        # sdccheck state outlives a job's sessions: ranks of one training job come and go at their own pace (a
        # fast rank may close before a slow one connects). The most recent jobs' state is kept, with its owner's
        # uid: another uid that later uses the name starts afresh, never compared with the first one's replays.
        self._sdc: OrderedDict[JobKey, tuple[int, SdcCheck]] = OrderedDict()
        self._sdc_held = 0  # signature entries over every kept job's state

    def __len__(self) -> int:
        return len(self._jobs)

    @property
    def owners_kept(self) -> int:
        return len(self._ended)

    # --- ownership ---------------------------------------------------------------------------------------------

    def owner(self, key: JobKey) -> int:
        """Who owns the job now (NO_UID: nobody); an unused job's owner until its grace period passed."""
        self._expire()
        job = self._jobs.get(key)
        if job is not None:
            return job.owner
        ended = self._ended.get(key)
        return ended[0] if ended is not None else NO_UID

    def keep_owners(self, owners: list[tuple[str, int]], seconds: float) -> None:
        """After a restart: the jobs the last daemon served stay their owners' for ``seconds`` (at least the grace
        period), so that no other uid takes a name before its sessions come back to resume."""
        now = self._clock()
        for name, uid in owners[-ENDED_OWNERS_KEPT:]:
            key = job_key(name, uid)
            if key not in self._jobs:
                # Kept as an unused job that ended ``seconds`` less the grace from now: _expire frees it then.
                self._ended[key] = (uid, now + max(0.0, seconds - self._grace()))

    def refusal(self, key: JobKey, uid: int, admin: Callable[[], bool]) -> Refusal | None:
        """Why ``uid`` may not use the job (join, register, watch, wait on it), or None. Changes nothing.
        ``admin`` is asked only when the job is another uid's (it reads /proc)."""
        owner = self.owner(key)
        if owner == NO_UID:
            owner = reserved_for(key[0])
        if owner not in (NO_UID, uid) and not admin():
            return Refusal(
                "permission_denied",
                f"uid {uid} may not use job {job_label(key)}: it belongs to another user (admins: root, --admin-group)",
            )
        if key not in self._jobs:
            if len(self._jobs) >= MAX_JOBS:
                return Refusal("job_limit", f"the daemon holds its limit of {MAX_JOBS} jobs in use")
            if self._by_uid.get(uid, 0) >= MAX_JOBS_PER_UID and not admin():
                return Refusal("job_limit", f"uid {uid} holds its limit of {MAX_JOBS_PER_UID} jobs in use")
        return None

    def admit(self, key: JobKey, uid: int, admin: Callable[[], bool]) -> Refusal | None:
        """A session of ``uid`` may join the job: claim it, until ``session_started`` or ``release``. Check and
        claim in one step, so that no other uid takes the job while the session's store row is being opened."""
        refused = self.refusal(key, uid, admin)
        if refused is None:
            self._use(key, uid).claims += 1
        return refused

    def release(self, key: JobKey) -> None:
        """An admitted session that did not start after all."""
        job = self._jobs.get(key)
        if job is not None and job.claims:
            job.claims -= 1
            self._forget_if_unused(job)

    def _use(self, key: JobKey, uid: int, *, claim: bool = True) -> Job:
        """The job, made in use (after ``refusal`` said it may be); ``claim``: ``uid`` owns it if nobody does."""
        job = self._jobs.get(key)
        if job is None:
            ended = self._ended.pop(key, None)
            job = self._jobs[key] = Job(key, owner=ended[0] if ended else NO_UID)
            if job.owner != NO_UID:
                self._by_uid[job.owner] = self._by_uid.get(job.owner, 0) + 1
        if claim and job.owner == NO_UID:
            job.owner = uid
            self._by_uid[uid] = self._by_uid.get(uid, 0) + 1
        return job

    def _forget_if_unused(self, job: Job) -> None:
        if not job.unused or self._jobs.get(job.key) is not job:
            return
        del self._jobs[job.key]
        if job.owner != NO_UID:
            left = self._by_uid[job.owner] - 1
            if left:
                self._by_uid[job.owner] = left
            else:
                del self._by_uid[job.owner]
            self._ended[job.key] = (job.owner, self._clock())
            self._ended.move_to_end(job.key)
            while len(self._ended) > ENDED_OWNERS_KEPT:
                self._ended.popitem(last=False)

    def _expire(self) -> None:
        """Names whose grace period passed are free again (the oldest end first, so stop at the first kept)."""
        limit = self._clock() - self._grace()
        while self._ended:
            key, (_owner, ended) = next(iter(self._ended.items()))
            if ended > limit:
                break
            del self._ended[key]

    # --- configuration -----------------------------------------------------------------------------------------

    def register(self, key: JobKey, config: m.Config, uid: int, *, again: bool = False) -> None:
        """``job_start`` (after ``refusal``): the configuration the job's sessions are welcomed with; ``again``:
        by a connection that registered it already (one registration each, whatever it sends)."""
        job = self._use(key, uid)
        job.config = config
        job.registrations += not again

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
        job = self._jobs.get(key)
        owner = job.owner if job is not None else NO_UID
        kept = self._sdc.pop(key, None)
        if kept is not None and kept[0] != owner:  # the name has a new owner: nothing of the old job's carries over
            self._sdc_held -= kept[1].held
            kept = None
        sdc = kept[1] if kept is not None else SdcCheck()
        self._sdc[key] = (owner, sdc)
        before = sdc.held
        findings = sdc.add(signature, rank)
        self._sdc_held += sdc.held - before
        while len(self._sdc) > 1 and (len(self._sdc) > SDC_JOBS_KEPT or self._sdc_held > SDC_HOST_ENTRIES):
            _, (_, oldest) = self._sdc.popitem(last=False)
            self._sdc_held -= oldest.held
        return findings

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
        self._tell(job, job.watchers, m.Findings(findings=findings))

    def kernel_checked(self, key: JobKey, report: m.KernelChecked) -> None:
        job = self._jobs.get(key)
        if job is not None:
            self._tell(job, job.watchers, report)

    def recording(self, key: JobKey) -> bool:
        job = self._jobs.get(key)
        return job is not None and bool(job.recorders)

    def record(self, key: JobKey, session: int, message: m.Message) -> None:
        """Hand a producer's message to the job's recorders (encoded once for all of them)."""
        job = self._jobs.get(key)
        if job is not None and job.recorders:
            self._tell(job, job.recorders, m.Recorded(session=session, body=_encoder.encode(message)))

    def _tell(self, job: Job, watchers: list[Watcher], message: m.Message) -> None:
        for watcher in list(watchers):
            if not watcher.offer(message):
                self.unwatch(job.key, watcher)

    def watch(self, key: JobKey, watcher: Watcher, uid: int, *, admin: bool, record: bool = False) -> None:
        """(After ``refusal``.) A user's watch claims a job nobody owns yet; an admin's does not."""
        job = self._use(key, uid, claim=not admin)
        if watcher not in job.watchers:
            job.watchers.append(watcher)
        if record and watcher not in job.recorders:
            job.recorders.append(watcher)

    def unwatch(self, key: JobKey, watcher: Watcher) -> None:
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
        kept = self._sdc.get(key)
        sdc = kept[1] if kept is not None and kept[0] == job.owner else None
        return m.JobIdle(
            job=key[0], sessions=job.sessions, kernels=job.kernels, events=job.events, findings=job.findings,
            signatures=job.signatures,
            replica_steps_checked=sdc.checked if sdc else 0,
            replica_steps_incomplete=(sdc.incomplete + sdc.open_replica_steps) if sdc else 0,
            replica_note=sdc.describe_incomplete() if sdc else "",
        )  # fmt: skip
