"""What hostile msSanitizer records cost a real daemon under the expansion bounds (issue 25, item 1).

A client of msSanitizer's wire sends one kernel launch of ``--records`` records in one slot to a job's socket of a
fresh ``sanitizerd serve --workers 1`` (memcheck, racecheck, initcheck and synccheck on), then closes; printed: the
seconds until the session ended (every check of the launch done), the daemon's peak RSS (listener and worker), and
the launch's findings by kind. Kinds of record (``--kind``):

* ``issue``: the 84-byte FIX_L0C_TO_UB record of issue 25 (130 954 events and 233 M strided runs unbounded):
  refused before it is expanded;
* ``widest``: the widest FIX_L0C_TO_UB record within a record's bounds (65 535 ND matrices of 14 x 14 fractal
  blocks read strided: 131 070 events, 983 025 runs), so that the launch's cap is what stops it;
* ``fuzz``: records of every converted type with random field values (tests/test_compat_bounds.py's draw).

    PYTHONPATH=. .venv/bin/python benchmarks/compat_bounds.py [--kind widest] [--records 40]
"""

from __future__ import annotations

import argparse
import json
import re
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

from sanitizerd.compat import wire
from sanitizerd.compat.records.convert import CONVERTERS
from sanitizerd.compat.records.numbering import record_table
from sanitizerd.control_client import ControlClient
from sanitizerd_protocol import messages as m
from tests import compat_model as cm
from tests.conftest import wait_for_socket
from tests.test_compat_bounds import ISSUE_RECORD, _daemon_peak_rss, _random_records
from tests.test_compat_socket import connect, recv_exactly

TOOLS = ["memcheck", "racecheck", "initcheck", "synccheck"]


def widest() -> bytes:
    record = np.zeros(1, dtype=CONVERTERS[141].dtype)
    fields = dict(dst=0x1000, m_size=14, n_size=224, nd_num=0xFFFF, nz2dn=1, src_nz_c0_stride=3, src_stride=50,
                  src_nd_stride=1, dst_stride=64, dst_nd_stride=1, quant_pre_bits=16)  # fmt: skip
    for name, value in fields.items():
        record[name] = value
    return struct.pack("<I", 141) + record.tobytes()


def bursts() -> bytes:
    return cm.record("MOV_ALIGN_V2", src=0, dst=0x1000, len_burst=40, n_burst=0xFFFF, src_stride=1 << 30,
                     dst_stride=1 << 30, src_mem=cm.MEM["UB"], dst_mem=cm.MEM["GM"])  # fmt: skip


def fuzzed(count: int, layout: wire.WireLayout) -> list[bytes]:
    table = record_table(layout)
    rng = np.random.default_rng(25)
    types = sorted(table.dtypes)
    out = []
    for record_type in rng.choice(types, size=count):
        dtype = table.dtypes[int(record_type)]
        body = _random_records(rng, dtype, 1).tobytes()
        out.append(struct.pack("<I", table.wire_values[int(record_type)]) + body)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=("issue", "widest", "bursts", "fuzz"), default="widest")
    parser.add_argument("--records", type=int, default=40)
    parser.add_argument("--tools", default=",".join(TOOLS), help="comma-separated (default: %(default)s)")
    args = parser.parse_args()
    layout = wire.LAYOUTS[wire.DEFAULT_LAYOUT]
    if args.kind == "fuzz":
        records = fuzzed(args.records, layout)
    else:
        records = [{"issue": ISSUE_RECORD, "widest": widest(), "bursts": bursts()}[args.kind]] * args.records
    with tempfile.TemporaryDirectory(prefix="sz") as directory:
        base = Path(directory)
        sock, log = base / "s.sock", base / "daemon.log"
        with open(log, "wb") as out:
            daemon = subprocess.Popen(
                [sys.executable, "-m", "sanitizerd", "serve", "--workers", "1", "--socket", str(sock),
                 "--state-dir", str(base / "state")],
                stdout=out, stderr=out, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        try:
            wait_for_socket(sock, daemon)
            before = _daemon_peak_rss(daemon.pid)
            with ControlClient(sock) as control:
                control.send(m.JobStart(job="bounds", config=m.Config(tools=args.tools.split(","))))
                answer = control.request(m.CompatListen(job="bounds", layout=layout.name))
                assert isinstance(answer, m.CompatListening), answer
                summary = bytearray(layout.kernel_summary.size)
                struct.pack_into("<QIB", summary, 0, 0, 1, 1)
                summary[15:22] = b"hostile"
                body = cm.slot(records, total_block_dim=1, block_type=1)
                number = layout.packet_number
                started = time.monotonic()
                with connect(answer.name, timeout=3600) as client:
                    recv_exactly(client, layout.config.size)
                    client.sendall(
                        wire.PACKET_HEAD.pack(number(wire.PacketType.KERNEL_SUMMARY)) + bytes(summary)
                        + wire.PACKET_HEAD.pack(number(wire.PacketType.KERNEL_RECORD)) + wire.LENGTH.pack(len(body))
                        + body
                    )  # fmt: skip
                    recv_exactly(client, 12)
                while True:
                    sessions = control.request(m.QuerySessions())
                    assert isinstance(sessions, m.Sessions)
                    if not any(s.job == "bounds" and s.state == "live" for s in sessions.sessions):
                        break
                    time.sleep(0.05)
                seconds = time.monotonic() - started
                peak = _daemon_peak_rss(daemon.pid)
                found = control.request(m.QueryFindings(job="bounds"))
                assert isinstance(found, m.Findings)
            kinds = Counter(f.kind for f in found.findings)
            said = [f.detail for f in found.findings if re.match(r"(record_refused|kernel_records_refused):", f.detail)]
            print(json.dumps({
                "kind": args.kind, "records": args.records, "tools": args.tools,
                "record_bytes": len(body) - layout.heads_size,
                "seconds_to_verdict": round(seconds, 2), "daemon_peak_rss_mib": peak >> 20,
                "daemon_rss_at_start_mib": before >> 20, "findings": dict(kinds), "refusals": said,
            }, indent=1))  # fmt: skip
        finally:
            daemon.terminate()
            daemon.wait(30)


if __name__ == "__main__":
    main()
