"""The daemon on a large host, computed from per-event CPU costs measured here (issue 29, item 3).

Reads the JSON line `benchmarks/ingest.py` prints last (a file of it, or stdin) and projects, for a host of
``--cores`` cores and ``--npus`` NPUs served by ``--workers`` worker processes, how many events per second the daemon
can check, for the whole host and for one job that spans every NPU. Assumptions, each printed with the result:

- the daemon's CPU per event (``daemon_cpu_ns_per_event`` of each run: receive, framing, sessions and the run's
  detectors, end to end) does not grow with the host: the per-event work is the same, and workers share nothing on
  the hot path (the listener only hands each connection's fd to its worker once);
- a worker is one process and uses ``--cores-per-worker`` cores [1]: its Python holds one GIL; the compiled loops and
  numpy release it, so a busy worker can use more (the run's daemon CPU over its wall time is printed beside, a
  lower bound where the clients shared the machine's cores), but one core is what a worker is sure of;
- jobs are routed to workers by a hash of the job's name (``sanitizerd/workers/routing.py``): every session of one
  job is on one worker, so one job's rate is one worker's, however many NPUs it spans; many jobs spread over all;
- each NPU's client (the hooks or the client library in the user's process) spends ``client_cpu_ns_per_event`` of
  the user's own cores, not the daemon's.

    .venv/bin/python benchmarks/ingest.py --quick | tail -1 > /tmp/ingest.json
    .venv/bin/python benchmarks/projection.py /tmp/ingest.json [--cores 192 --npus 16 --workers 8]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def project(run: dict[str, Any], cores: int, npus: int, workers: int, per_worker: float) -> dict[str, Any]:
    daemon_ns = float(run["daemon_cpu_ns_per_event"])
    client_ns = float(run["client_cpu_ns_per_event"])
    measured_cores = float(run["daemon_cpu_s"]) / float(run["seconds"])
    daemon_cores = min(workers * per_worker, cores)
    host = daemon_cores * 1e9 / daemon_ns
    one_job = min(per_worker, cores) * 1e9 / daemon_ns
    return {
        "tools": run["tools"],
        "daemon_cpu_ns_per_event": daemon_ns,
        "client_cpu_ns_per_event": client_ns,
        "cores_per_worker": per_worker,
        "measured_daemon_cores": round(measured_cores, 2),
        "daemon_cores": round(daemon_cores, 1),
        "host_events_per_s": round(host),
        "host_events_per_s_per_npu": round(host / npus),
        "one_job_events_per_s": round(one_job),
        "one_job_events_per_s_per_npu": round(one_job / npus),
        "client_cores_per_npu_at_one_job_rate": round(one_job / npus * client_ns / 1e9, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("measured", nargs="?", default="-", help="ingest.py's last JSON line, a file or - [-]")
    parser.add_argument("--cores", type=int, default=192)
    parser.add_argument("--npus", type=int, default=16)
    parser.add_argument("--workers", type=int, default=8, help="serve --workers (its default caps at 8) [8]")
    parser.add_argument("--cores-per-worker", type=float, default=1.0, help="cores one worker uses [1]")
    args = parser.parse_args(argv)
    text = sys.stdin.read() if args.measured == "-" else Path(args.measured).read_text()
    measured = json.loads(text.strip().splitlines()[-1])
    runs = measured.get("by_tools") or {measured["tools"]: measured}
    print(f"host: {args.cores} cores, {args.npus} NPUs, {args.workers} workers; measured on {measured.get('cores')} "
          f"cores")  # fmt: skip
    results = [project(run, args.cores, args.npus, args.workers, args.cores_per_worker) for run in runs.values()]
    for r in results:
        print(
            f"{r['tools']:>20}: daemon {r['daemon_cpu_ns_per_event']:.1f} CPU-ns/event (it used "
            f"{r['measured_daemon_cores']} cores here), {r['cores_per_worker']} cores a worker -> "
            f"host {r['host_events_per_s'] / 1e6:.0f} M events/s "
            f"({r['host_events_per_s_per_npu'] / 1e6:.1f} M per NPU, {r['daemon_cores']} daemon cores); one job "
            f"over all NPUs {r['one_job_events_per_s'] / 1e6:.0f} M events/s "
            f"({r['one_job_events_per_s_per_npu'] / 1e6:.1f} M per NPU); clients "
            f"{r['client_cpu_ns_per_event']:.1f} CPU-ns/event ({r['client_cores_per_npu_at_one_job_rate']} "
            f"of a core per NPU at that rate)"
        )
    print(json.dumps({"cores": args.cores, "npus": args.npus, "workers": args.workers, "runs": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
