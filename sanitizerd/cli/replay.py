"""``sanitizerd replay FILE``: feed a job saved by ``sanitizerd run --save`` to a daemon again.

Each recorded session is replayed as a producer connection of a new job, with its own hello (only the job id
changes), its messages in the order the daemon first received them, and a graceful close. Detectors are
deterministic, so the findings are the recorded run's (compare everything but job, session, id and time).
"""

from __future__ import annotations

import os
import secrets
import struct
import sys
import threading

import msgspec

from client_shim.transport import ClientError, FrameSocket
from sanitizerd.cli.options import PREFIX
from sanitizerd.cli.progress import Progress, Sample, count
from sanitizerd.cli.run import Reporter, daemon_connection, summary_line
from sanitizerd.cli.savefile import SaveFileError, read_save
from sanitizerd.findings.render import render_json
from sanitizerd_protocol import decode_body
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.model import ERROR, WARNING

_PREFIX = struct.Struct("<I")


class ReplayCounts:
    """The progress of a replay: the file's bytes and messages sent so far, and the findings reported."""

    def __init__(self, bodies: int, size: int) -> None:
        self.bodies = bodies
        self.size = size
        self.sent_bodies = 0
        self.sent_bytes = 0
        self.reporter: Reporter | None = None

    def sent(self, body: bytes) -> None:
        self.sent_bodies += 1
        self.sent_bytes += len(body)

    def __call__(self) -> Sample:
        found = self.reporter.errors + self.reporter.warnings if self.reporter is not None else 0
        text = (
            f"{_megabytes(self.sent_bytes)} of {_megabytes(self.size)} MB, {self.sent_bodies:,} of "
            f"{count(self.bodies, 'message')} sent, {count(found, 'finding')} so far"
        )
        return Sample(text, done=self.sent_bytes, total=self.size)


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.1f}"


def replay(path: str, *, socket: str | None, fmt: str, error_exitcode: int = 0, quiet: bool = False) -> int:
    """0, or ``error_exitcode`` (when not 0) if the replay reported an error, as ``run --error-exitcode``;
    progress on stderr unless ``quiet`` (sanitizerd/cli/progress.py)."""
    try:
        header, recorded = read_save(path)
    except (OSError, SaveFileError) as exc:
        print(f"{PREFIX} ERROR: {exc}", file=sys.stderr)
        return 1
    sessions: dict[int, list[bytes]] = {}
    for entry in recorded:
        sessions.setdefault(entry.session, []).append(entry.body)
    job = f"replay-{os.getpid()}-{secrets.token_hex(4)}"
    counts = ReplayCounts(len(recorded), sum(len(entry.body) for entry in recorded))
    progress = Progress("replay", counts, quiet=quiet)
    try:
        with daemon_connection(socket) as (control, socket_path), open(os.devnull, "w") as devnull, progress:
            control.send(m.JobStart(job=job, config=header.config))
            control.send(m.Watch(job=job))
            out = progress.above(sys.stdout) if fmt == "text" else devnull
            reporter = Reporter(control, out, {ERROR, WARNING})
            counts.reporter = reporter
            reporter.thread.start()
            for bodies in sessions.values():
                _replay_session(str(socket_path), job, bodies, counts)
            control.send(m.WaitJob(job=job))
            reporter.thread.join()
    except ClientError as exc:
        print(f"{PREFIX} ERROR: {exc}", file=sys.stderr)
        return 1
    if fmt == "json":
        sys.stdout.write(render_json(reporter.findings).decode() + "\n")
    else:
        print(summary_line(job, reporter.idle, reporter, path))
    if reporter.idle is None:
        return 1  # the job did not end: what it found is not all there is
    return error_exitcode if error_exitcode and reporter.errors else 0


def _replay_session(socket_path: str, job: str, bodies: list[bytes], counts: ReplayCounts) -> None:
    hello = decode_body(bodies[0])
    if not isinstance(hello, m.Hello):
        raise ClientError(f"a recorded session starts with {type(hello).__name__}, not hello")
    connection = FrameSocket(socket_path)
    try:
        connection.handshake(msgspec.structs.replace(hello, job=job))
        connection.sock.settimeout(None)
        # The daemon answers verdicts while we send; read them on the side so its writes never block.
        drained = threading.Thread(target=_read_until_closed, args=(connection,), daemon=True)
        drained.start()
        counts.sent(bodies[0])
        for body in bodies[1:]:
            connection.sendall(_PREFIX.pack(len(body)) + body)
            counts.sent(body)
        connection.send(m.Close())
        drained.join()
    finally:
        connection.close()


def _read_until_closed(connection: FrameSocket) -> None:
    try:
        while not isinstance(connection.receive(), m.Closed | m.Error):
            pass
    except (ClientError, OSError):
        pass
