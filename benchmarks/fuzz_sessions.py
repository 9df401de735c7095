"""Random producer sessions from several clients at once against a real daemon, for as long as you like.

``tests/test_hostile.py`` runs 150 such sessions one by one and 240 from three clients at once on every CI run; a
race between sessions of one job shows up once in tens of thousands (a verdict finishing while the pump refused
its session did, once in 60 000). This runs the same streams (``conn_random_message``: every producer message type,
numbers at the edges of their ranges, random and well-formed records) from ``--clients`` threads, seed after
seed, on three shared jobs, and then reads the daemon's log: any ``connection handler failed``, ``session pump
failed`` or ``detector failed`` line is a bug of ours, printed grouped by where it was raised.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/fuzz_sessions.py --seeds 100 [--clients 3] [--workers 2]

Exit status 1 when anything of ours failed or a session ended in ``internal_error`` (the daemon's log is kept).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import threading
from collections import Counter
from pathlib import Path

from tests.conftest import RunningDaemon, start_daemon, stop_daemon
from tests.test_hostile import random_session

SESSIONS_PER_SEED = 150


def one_seed(daemon: RunningDaemon, seed: int) -> Counter[str]:
    """150 sessions of random messages on three shared jobs; how each ended."""
    rng = random.Random(seed)
    return Counter(random_session(daemon, rng, f"random-{n % 3}") for n in range(SESSIONS_PER_SEED))


def failures(daemon: RunningDaemon) -> Counter[str]:
    """Failures of ours in the daemon's log, by event and the last line of their traceback."""
    found: Counter[str] = Counter()
    for line in daemon.log_text().splitlines():
        if not line.startswith("{") or " failed" not in line:
            continue
        entry = json.loads(line)
        if str(entry.get("event", "")).endswith(" failed") and "exception" in entry:
            where = [row.strip() for row in str(entry["exception"]).splitlines() if row.strip()]
            found[f"{entry['event']}: {where[-1][:160] if where else '?'}"] += 1
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=30, help=f"seeds, {SESSIONS_PER_SEED} sessions each [30]")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--clients", type=int, default=3, help="clients at once, each its own seeds [3]")
    parser.add_argument("--workers", type=int, default=1, help="daemon --workers [1]")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="sd-fuzz-"))
    daemon = start_daemon(base, "--handshake-timeout", "1", hostile_limits=True, workers=args.workers)
    endings: Counter[str] = Counter()
    lock = threading.Lock()

    def client(first: int) -> None:
        for seed in range(first, args.first_seed + args.seeds, args.clients):
            got = one_seed(daemon, seed)
            with lock:
                endings.update(got)
                if "internal_error" in got or "None" in got:
                    print(f"seed {seed}: {dict(got)}", flush=True)

    threads = [threading.Thread(target=client, args=(args.first_seed + k,)) for k in range(args.clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    status = stop_daemon(daemon)
    found = failures(daemon)
    print(f"{endings.total()} sessions; endings: {dict(endings.most_common())}; daemon exit status {status}")
    for what, count in found.most_common():
        print(f"{count:6d}  {what}")
    bad = bool(found) or "internal_error" in endings or "None" in endings or status != 0
    if bad:
        print(f"daemon log kept in {daemon.log}")
    else:
        shutil.rmtree(base, ignore_errors=True)
        print("no failure of ours")
    return int(bad)


if __name__ == "__main__":
    raise SystemExit(main())
