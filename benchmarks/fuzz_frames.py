"""Coverage-guided fuzzing of the frame decoder (the sans-I/O ``Connection``) with atheris (libFuzzer).

Each input is fed to a server-side connection, either raw (the handshake state) or after a valid producer
``hello`` (the ready state, where events, kernel launches and host operations are decoded). The only
acceptable outcomes are messages and ``RemoteProtocolError`` (a clear reason that ends the session); anything
else is a crash, which stops the run and leaves the input in ``crash-*``.

    .venv/bin/pip install 'sanitizerd[fuzz]'
    .venv/bin/python benchmarks/fuzz_frames.py -max_total_time=300 -print_final_stats=1

libFuzzer prints the inputs tried (``#N DONE``), the coverage and the crashes.
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports(include=["sanitizerd", "msgspec"]):
    import msgspec

    from sanitizerd_protocol import Connection, RemoteProtocolError, Role
    from sanitizerd_protocol import messages as m
    from sanitizerd_protocol.connection import CONNECTION_CLOSED, NEED_DATA

_HELLO = Connection(Role.CLIENT).send(m.Hello(version=1, job="fuzz"))
_SEEDS = [
    m.KernelBegin(kernel=1, name="k", block_dim=8),
    m.Events(kernel=1, records=memoryview(bytes(56 * 3))),
    m.KernelEnd(kernel=1),
    m.HostOp(op="malloc", address=0x1000, size=64),
    m.Signature(step=1, entries=[m.SignatureEntry(name="loss", schema="()", digest=3)]),
]


def one_input(data: bytes) -> None:
    if not data:
        return
    server = Connection(Role.SERVER, max_frame_size=1 << 16)
    try:
        if data[0] & 1:  # after a valid handshake: the messages of a ready producer session
            server.receive_data(bytes(_HELLO))
            assert isinstance(server.next_event(), m.Hello)
            server.send(m.Welcome(session=1, config=m.Config(), server="fuzz"))
        server.receive_data(data[1:])
        server.receive_data(b"")  # then the peer closes
        for _ in range(10_000):
            event = server.next_event()
            if event is NEED_DATA or event is CONNECTION_CLOSED:
                return
    except RemoteProtocolError:
        return  # the clear, expected refusal


def seed_corpus(directory: str) -> None:
    """Valid frames to start from, so that mutations reach the ready state's decoders."""
    import pathlib

    path = pathlib.Path(directory)
    path.mkdir(exist_ok=True)
    client, server = Connection(Role.CLIENT), Connection(Role.SERVER)
    server.receive_data(bytes(client.send(m.Hello(version=1))))
    server.next_event()
    client.receive_data(bytes(server.send(m.Welcome(session=1, config=m.Config(), server="x"))))
    client.next_event()
    for i, message in enumerate(_SEEDS):
        (path / f"seed-{i}").write_bytes(b"\x01" + bytes(client.send(message)))


if __name__ == "__main__":
    if "--seed" in sys.argv:
        seed_corpus(sys.argv[sys.argv.index("--seed") + 1])
        raise SystemExit(0)
    del msgspec  # imported under instrumentation only
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
