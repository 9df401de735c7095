"""Jobs: the sessions of one ``sanitizerd run`` (or one training job), their configuration, who watches
their findings, and when they are idle."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import anyio
import msgspec
from anyio.streams.memory import MemoryObjectSendStream

from sanitizerd.detectors.sdccheck import SdcCheck, SdcFinding
from sanitizerd.findings.model import Finding
from sanitizerd.protocol import messages as m
from sanitizerd.sessions.ipc import IpcTable

_encoder = msgspec.msgpack.Encoder()


@dataclass(slots=True)
class Job:
    name: str
    config: m.Config | None = None  # registered by job_start; None: the daemon's default
    registrations: int = 0
    live: set[int] = field(default_factory=set)
    idle: anyio.Event = field(default_factory=anyio.Event)
    watchers: list[MemoryObjectSendStream[m.Message]] = field(default_factory=list)
    recorders: list[MemoryObjectSendStream[m.Message]] = field(default_factory=list)
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
        return not (self.registrations or self.live or self.watchers)


SDC_JOBS_KEPT = 256  # jobs whose sdccheck state (references, open replica steps) the daemon keeps


class Jobs:
    """Lives on the event loop thread; every method is called from it."""

    def __init__(self, default_config: m.Config) -> None:
        self.default_config = default_config
        self._jobs: dict[str, Job] = {}
        # sdccheck state outlives a job's sessions: ranks of one training job come and go at their own pace (a
        # fast rank may close before a slow one connects). The most recent jobs' state is kept.
        self._sdc: OrderedDict[str, SdcCheck] = OrderedDict()

    def _get(self, name: str) -> Job:
        job = self._jobs.get(name)
        if job is None:
            job = self._jobs[name] = Job(name)
        return job

    def _forget_if_unused(self, job: Job) -> None:
        if job.unused:
            self._jobs.pop(job.name, None)

    def register(self, name: str, config: m.Config) -> None:
        job = self._get(name)
        job.config = config
        job.registrations += 1

    def unregister(self, name: str) -> None:
        job = self._jobs.get(name)
        if job is not None:
            job.registrations -= 1
            if not job.registrations:
                job.config = None
            self._forget_if_unused(job)

    def config_for(self, hello: m.Hello) -> m.Config:
        """A registered job's configuration wins; then what the client asked for; then the daemon default."""
        job = self._jobs.get(hello.job)
        if job is not None and job.config is not None:
            return job.config
        return hello.config or self.default_config

    def signature(self, name: str, signature: m.Signature, rank: int) -> list[SdcFinding]:
        """sdccheck over every rank of the job (a replay against its reference, replicas against each other)."""
        sdc = self._sdc.pop(name, None) or SdcCheck()
        self._sdc[name] = sdc
        while len(self._sdc) > SDC_JOBS_KEPT:
            self._sdc.popitem(last=False)
        return sdc.add(signature, rank)

    def ipc_table(self, name: str) -> IpcTable:
        return self._get(name).ipc

    def session_started(self, name: str, session: int) -> None:
        job = self._get(name)
        job.live.add(session)
        job.sessions += 1
        if job.idle.is_set():
            job.idle = anyio.Event()

    def session_ended(self, info: m.SessionInfo) -> None:
        job = self._get(info.job)
        job.live.discard(info.session)
        job.ipc.session_ended(info.session)
        job.kernels += info.kernels
        job.events += info.events
        job.signatures += info.signatures
        if not job.live:
            job.idle.set()
        self._forget_if_unused(job)

    async def publish(self, findings: list[Finding]) -> None:
        """Hand findings to the watchers of their job. A slow watcher slows the publisher; nothing is dropped."""
        if not findings:
            return
        job = self._jobs.get(findings[0].job)
        if job is None:
            return
        job.findings += len(findings)
        await self._tell_watchers(job, m.Findings(findings=findings))

    async def kernel_checked(self, name: str, report: m.KernelChecked) -> None:
        job = self._jobs.get(name)
        if job is not None:
            await self._tell_watchers(job, report)

    async def _tell_watchers(self, job: Job, message: m.Message) -> None:
        for watcher in list(job.watchers):
            try:
                await watcher.send(message)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self.unwatch(job.name, watcher)

    def watch(self, name: str, stream: MemoryObjectSendStream[m.Message], *, record: bool = False) -> None:
        job = self._get(name)
        job.watchers.append(stream)
        if record:
            job.recorders.append(stream)

    def recording(self, name: str) -> bool:
        job = self._jobs.get(name)
        return job is not None and bool(job.recorders)

    async def record(self, name: str, session: int, message: m.Message) -> None:
        """Hand a producer's message to the job's recorders (encoded once for all of them)."""
        job = self._jobs.get(name)
        if job is None or not job.recorders:
            return
        recorded = m.Recorded(session=session, body=_encoder.encode(message))
        for recorder in list(job.recorders):
            try:
                await recorder.send(recorded)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self.unwatch(job.name, recorder)

    def unwatch(self, name: str, stream: MemoryObjectSendStream[m.Message]) -> None:
        job = self._jobs.get(name)
        if job is not None and stream in job.watchers:
            job.watchers.remove(stream)
            if stream in job.recorders:
                job.recorders.remove(stream)
            self._forget_if_unused(job)

    async def wait_idle(self, name: str) -> m.JobIdle:
        job = self._get(name)
        while job.live:
            await job.idle.wait()
        self._forget_if_unused(job)
        return m.JobIdle(
            job=name, sessions=job.sessions, kernels=job.kernels, events=job.events, findings=job.findings,
            signatures=job.signatures,
        )  # fmt: skip
