"""The sans-I/O connection: bytes in, typed messages out; messages in, bytes out. No sockets, clocks or threads.

One class serves both ends. The I/O layer feeds whatever it read to ``receive_data`` (``b""`` at EOF), or reads
into ``get_buffer()`` and reports the count to ``buffer_updated`` (no copy of ours: a batch frame is read straight
into the array it is decoded from), then calls ``next_event`` until it answers ``NEED_DATA``; it writes whatever
``send`` returns.

A frame is a u32 little-endian body length followed by a msgpack body. The length is checked against
``max_frame_size`` before the body is buffered, so a hostile prefix costs nothing (h11's DoS rule).
"""

from __future__ import annotations

import struct
from typing import Final

import msgspec

from sanitizerd_protocol import messages as m
from sanitizerd_protocol._buffer import ReceiveBuffer, ReceivingEnd
from sanitizerd_protocol._state import ENDING, Role, State, allowed, next_state
from sanitizerd_protocol.errors import LocalProtocolError, RemoteProtocolError
from sanitizerd_protocol.records import EVENT_DTYPE
from sanitizerd_protocol.texts import cap_strings

# 64 MiB holds more than a million events per batch; larger frames only delay backpressure.
DEFAULT_MAX_FRAME_SIZE: Final = 64 * 1024 * 1024

_PREFIX = struct.Struct("<I")
_EVENT_SIZE = EVENT_DTYPE.itemsize
_BIN32 = struct.Struct(">BI")  # msgpack's bin 32 header: 0xc6, then the length (big-endian)
_EMPTY_BIN: Final = b"\xc4\x00"  # msgpack's bin 8 of length 0, as msgspec encodes empty bytes
_NO_RECORDS: Final = memoryview(b"")


class _Sentinel:
    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


NEED_DATA: Final = _Sentinel("NEED_DATA")
CONNECTION_CLOSED: Final = _Sentinel("CONNECTION_CLOSED")  # the peer closed cleanly between frames

_decoder = msgspec.msgpack.Decoder(m.AnyMessage)


class _TypeOnly(msgspec.Struct):
    type: str


_type_decoder = msgspec.msgpack.Decoder(_TypeOnly)


def decode_body(body: bytes | memoryview) -> m.Message:
    """Decode one frame body, or raise RemoteProtocolError naming what was wrong.

    This is the decode boundary: whatever hostile bytes make the decoder raise (a DecodeError, a RecursionError
    for nesting deeper than it follows, a MemoryError, ...) ends this one connection as the peer's fault.
    """
    try:
        return _decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise _explained(body, exc) from None
    except RecursionError:
        detail = "malformed message: nested deeper than the decoder follows"
        raise RemoteProtocolError(detail, reason="bad_packet") from None
    except Exception as exc:
        raise RemoteProtocolError(f"malformed message: {type(exc).__name__}", reason="bad_packet") from None


def _explained(body: bytes | memoryview, exc: msgspec.DecodeError) -> RemoteProtocolError:
    """A decode failure as unknown_type (the tag is not ours) or bad_packet (ours, but malformed)."""
    try:
        tag = _type_decoder.decode(body).type
    except Exception:  # anything the lenient decoder raises leaves the first error as the answer
        return RemoteProtocolError(f"malformed message: {exc}", reason="bad_packet")
    if not any(tag == t.__struct_config__.tag for t in m.AnyMessage.__args__):
        return RemoteProtocolError(f"unknown message type {shown(tag)}", reason="unknown_type")
    return RemoteProtocolError(f"malformed {tag!r} message: {exc}", reason="bad_packet")


def shown(text: str, limit: int = 80) -> str:
    """A peer's string as an error message quotes it: never longer than ``limit`` characters."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} characters)"


class Connection(ReceivingEnd):
    """Protocol state of one connection, from one end's point of view."""

    def __init__(self, role: Role, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.role = role
        self.max_frame_size = max_frame_size
        self.state = State.HANDSHAKE
        self.client_role: str | None = None  # from the hello, once seen
        self._peer = Role.SERVER if role is Role.CLIENT else Role.CLIENT
        super().__init__(self._frame_end)
        self._client_sent_close = False
        self._encoder = msgspec.msgpack.Encoder()
        self._cuts: list[tuple[str, int]] = []

    # --- receiving ---------------------------------------------------------------------------------------------

    def get_buffer(self) -> memoryview:
        """Writable memory (never empty) for the next received bytes; report how many with ``buffer_updated``.

        While a frame is incomplete this is the rest of that frame's own array, so a read never goes past it;
        between frames it is a scratch area the thread's connections share, so report what was read into it
        before another connection of the thread asks for its buffer (read, then report, with no wait between)."""
        self._refuse_after_eof()
        return self._buffer.get_buffer()

    @property
    def frame_rest(self) -> int:
        """Bytes of the frame begun still to come, when they are read into its own array (0 otherwise)."""
        return self._buffer.gathering

    def buffer_updated(self, n: int) -> None:
        """``n`` bytes (at least 1; EOF is ``receive_data(b"")``) were written into what ``get_buffer`` returned."""
        self._buffer.buffer_updated(n)

    def next_event(self) -> m.Message | _Sentinel:
        """The next complete message, ``NEED_DATA``, or ``CONNECTION_CLOSED``; raises RemoteProtocolError."""
        if self.state is State.ERROR:
            raise RemoteProtocolError("connection is in ERROR after an earlier protocol error", reason="bad_packet")
        try:
            body = self._next_body()
            if body is None:
                return NEED_DATA
            if body is CONNECTION_CLOSED:
                return CONNECTION_CLOSED
            message = decode_body(body)  # type: ignore[arg-type]
            self._check(self._peer, message)
        except RemoteProtocolError:
            self._fail()
            raise
        self._cuts.extend(cap_strings(message))
        self._advance(self._peer, message)
        return message

    def _frame_end(self, head: memoryview) -> int:
        """Where the frame ``head`` begins ends (its prefix and body), once its prefix is there and its length within
        the limit; 0 otherwise (``_next_body`` then says what is wrong, as it would have)."""
        if len(head) < _PREFIX.size:
            return 0
        (length,) = _PREFIX.unpack_from(head)
        return _PREFIX.size + length if length <= self.max_frame_size else 0

    def _next_body(self) -> memoryview | bytes | _Sentinel | None:
        buffer = self._buffer
        if len(buffer) < _PREFIX.size:
            if self._eof:
                if buffer:
                    raise RemoteProtocolError("peer closed inside a frame's length prefix", reason="truncated")
                return CONNECTION_CLOSED
            return None
        (length,) = _PREFIX.unpack(buffer.peek(_PREFIX.size))
        if length > self.max_frame_size:
            raise RemoteProtocolError(
                f"frame of {length} bytes exceeds the limit of {self.max_frame_size}",
                reason="frame_too_large",
            )
        if len(buffer) < _PREFIX.size + length:
            if self._eof:
                raise RemoteProtocolError(
                    f"peer closed after {len(buffer) - _PREFIX.size} of a {length}-byte frame",
                    reason="truncated",
                )
            # The length passed the limit: the rest of the frame is read into one array of its size.
            buffer.gather(_PREFIX.size + length)
            return None
        buffer.take(_PREFIX.size)
        # A view of this frame's own chunk(s): zero-copy batches pin what this connection received for them,
        # never a shared buffer that later frames are appended to.
        return buffer.take(length)

    def take_cuts(self) -> list[tuple[str, int]]:
        """(field, characters cut) for each string of the peer's messages cut to its length since the last call."""
        cuts, self._cuts = self._cuts, []
        return cuts

    def take_unparsed(self) -> bytes:
        """What was received and not yet parsed, taken out: the connection goes on in another process with it."""
        return bytes(self._buffer.take(len(self._buffer)))

    def frame(self, message: m.Message) -> bytearray:
        """``message`` framed for the wire with no check and no change of state: a message already received, sent
        on to another process that rebuilds this connection's state from it."""
        return self._frame(message)

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as messages."""
        return len(self._buffer)

    # --- sending -----------------------------------------------------------------------------------------------

    def send(self, message: m.Message, into: bytearray | None = None) -> bytearray:
        """Frame a message for the wire; raises LocalProtocolError if it is not ours to send now.

        ``into``: a bytearray to frame it in (and return), whose memory is reused: a sender that recycles its
        frames of megabytes saves the page faults of fresh ones."""
        try:
            self._check(self.role, message)
        except RemoteProtocolError as exc:
            raise LocalProtocolError(str(exc), reason=exc.reason) from None
        frame = self._frame(message, into)
        self._advance(self.role, message)
        return frame

    def send_events_head(self, kernel: int, records_size: int) -> bytearray:
        """Frame an ``Events`` batch of ``records_size`` bytes up to its records, which the caller writes right after
        the returned head from its own memory: a batch of megabytes goes out with no copy (the client's direct send).
        Checked and counted as ``send`` checks and counts the whole message; raises LocalProtocolError likewise."""
        if records_size % _EVENT_SIZE:
            raise LocalProtocolError(
                f"events batch of {records_size} bytes is not a whole number of {_EVENT_SIZE}-byte records",
                reason="bad_batch",
            )
        head = self.send(m.Events(kernel=kernel, records=_NO_RECORDS))
        # The records are Events' last field, so the head ends with them encoded empty: that becomes a bin 32 of
        # their size (msgpack allows it for any size, and the decoder takes it), and the prefix counts them.
        assert head[-len(_EMPTY_BIN) :] == _EMPTY_BIN
        head[-len(_EMPTY_BIN) :] = _BIN32.pack(0xC6, records_size)
        _PREFIX.pack_into(head, 0, len(head) - _PREFIX.size + records_size)
        return head

    def send_error(self, reason: str, message: str) -> bytearray:
        """Frame an error reply whatever the state; the connection is in ERROR afterwards."""
        self._fail()
        return self._frame(m.Error(reason=reason, message=message))

    def _fail(self) -> None:
        """Into ERROR, where nothing more is parsed: what was received and not parsed is let go at once (a refused
        connection must not hold its unfinished frame until its handler is done)."""
        self.state = State.ERROR
        self._buffer = ReceiveBuffer(self._frame_end)

    def _frame(self, message: m.Message, into: bytearray | None = None) -> bytearray:
        # Encode straight after a reserved prefix: a batch of several MiB is copied once, not twice. encode_into
        # truncates the bytearray to the message but keeps its memory.
        frame = bytearray(_PREFIX.size) if into is None else into
        self._encoder.encode_into(message, frame, _PREFIX.size)
        _PREFIX.pack_into(frame, 0, len(frame) - _PREFIX.size)
        return frame

    # --- shared ------------------------------------------------------------------------------------------------

    def _check(self, sender: Role, message: m.Message) -> None:
        if sender is Role.CLIENT and self._client_sent_close:
            raise RemoteProtocolError(f"{message.__struct_config__.tag!r} after close", reason="unexpected_message")
        client_role = self.client_role if self.state is not State.HANDSHAKE or sender is Role.SERVER else None
        if type(message) not in allowed(sender, self.state, client_role):
            if isinstance(message, m.Error):  # an error may always be said; it ends the connection
                return
            raise RemoteProtocolError(
                f"{message.__struct_config__.tag!r} is not allowed from the {sender.value} "
                f"in state {self.state.value}" + (f" for a {client_role}" if client_role else ""),
                reason="unexpected_message",
            )
        if isinstance(message, m.Hello) and message.version != m.PROTOCOL_VERSION:
            raise RemoteProtocolError(
                f"client speaks protocol version {message.version}; this daemon speaks version {m.PROTOCOL_VERSION}",
                reason="version",
            )
        if isinstance(message, m.Events) and message.records.nbytes % _EVENT_SIZE:
            raise RemoteProtocolError(
                f"events batch of {message.records.nbytes} bytes is not a whole number of {_EVENT_SIZE}-byte records",
                reason="bad_batch",
            )

    def _advance(self, sender: Role, message: m.Message) -> None:
        if isinstance(message, m.Hello):
            self.client_role = message.role
        if isinstance(message, m.Close) and sender is Role.CLIENT:
            self._client_sent_close = True
        self.state = next_state(self.state, message)
        if type(message) in ENDING and self.state is State.ERROR:
            return
