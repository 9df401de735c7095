"""Protocol errors say whose fault it is (the h11 convention).

``reason`` is one of ``REASONS``: a small fixed set, used as a metric label and in ``error`` replies; the
human detail stays in the message.
"""

from __future__ import annotations

REASONS = (
    "frame_too_large",  # length prefix above the configured maximum
    "bad_packet",  # body is not a valid message of this protocol
    "unknown_type",  # well-formed msgpack with a message type we do not know
    "unexpected_message",  # a known message in a state where it is not allowed
    "truncated",  # the peer closed in the middle of a frame
    "version",  # protocol version mismatch
    "bad_batch",  # an events batch whose size is not a whole number of records
    "bad_reference",  # a message names a kernel launch or location the session does not know
    "handshake_timeout",  # no hello within the configured time
    "session_limit",  # the daemon already serves its maximum number of sessions
    "shutdown",  # the daemon is stopping
    "permission_denied",  # a client asked for another user's sessions, findings or jobs
    "job_limit",  # the daemon (or this uid) holds its maximum number of jobs in use
    "slow_consumer",  # a watcher fell so far behind that the daemon dropped it rather than wait
    "request_limit",  # a control connection has its limit of requests outstanding (wait_job)
    "store_unavailable",  # the store cannot record a new session (a full disk, a read-only state directory)
    "internal_error",  # the daemon failed on this connection (a bug of ours): it ends, the daemon serves on
    "connection_limit",  # the daemon, or this uid, has its maximum number of open connections
    "buffer_limit",  # this uid's connections hold their budget of bytes of unfinished frames
    "frame_timeout",  # a frame begun was not finished within the frame timeout
    "idle_timeout",  # a producer owed no verdict sent nothing for the idle timeout
    "resource_limit",  # a session asked for more of a bounded resource (locations, ...) than it may hold
    "wire_mismatch",  # a client of msSanitizer's protocol speaks another release's wire than the one chosen for it
)


class ProtocolError(Exception):
    """Abstract: use one of the two subclasses."""

    def __init__(self, message: str, *, reason: str) -> None:
        if type(self) is ProtocolError:
            raise TypeError("raise LocalProtocolError or RemoteProtocolError")
        assert reason in REASONS, reason
        super().__init__(message)
        self.reason = reason


class LocalProtocolError(ProtocolError):
    """We tried to break the protocol (a bug on our side)."""


class RemoteProtocolError(ProtocolError):
    """The peer broke the protocol."""
