"""The file ``sanitizerd run --save`` writes and ``sanitizerd replay`` reads.

It is a run of protocol frames (u32 LE length + msgpack body, docs/protocol.md): first a ``job_start`` with the
recorded job's configuration, then one ``recorded`` per message the job's producers sent, in the order the
daemon received them (each session's ``hello`` first).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import BinaryIO

import msgspec

from sanitizerd_protocol import decode_body
from sanitizerd_protocol import messages as m

_PREFIX = struct.Struct("<I")
_encoder = msgspec.msgpack.Encoder()


class SaveFileError(Exception):
    pass


class SaveWriter:
    def __init__(self, path: str | os.PathLike[str], header: m.JobStart) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        self._file: BinaryIO = os.fdopen(fd, "wb")
        self.write(header)

    def write(self, message: m.Message) -> None:
        body = _encoder.encode(message)
        self._file.write(_PREFIX.pack(len(body)))
        self._file.write(body)

    def close(self) -> None:
        self._file.close()


def read_save(path: str | os.PathLike[str]) -> tuple[m.JobStart, list[m.Recorded]]:
    data = Path(path).read_bytes()
    messages: list[m.Message] = []
    offset = 0
    while offset < len(data):
        if offset + _PREFIX.size > len(data):
            raise SaveFileError(f"{path}: truncated at byte {offset}")
        (length,) = _PREFIX.unpack_from(data, offset)
        body = data[offset + _PREFIX.size : offset + _PREFIX.size + length]
        if len(body) != length:
            raise SaveFileError(f"{path}: truncated frame at byte {offset}")
        try:
            messages.append(decode_body(body))
        except Exception as exc:  # a damaged file: say where
            raise SaveFileError(f"{path}: bad frame at byte {offset}: {exc}") from None
        offset += _PREFIX.size + length
    if not messages or not isinstance(messages[0], m.JobStart):
        raise SaveFileError(f"{path}: not a sanitizerd save file (no job_start header)")
    recorded = [message for message in messages[1:] if isinstance(message, m.Recorded)]
    if len(recorded) != len(messages) - 1:
        raise SaveFileError(f"{path}: unexpected message types after the header")
    return messages[0], recorded
