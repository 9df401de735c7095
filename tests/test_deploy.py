"""deploy/: every metric a Grafana panel or a Prometheus alert uses is one a live daemon exports."""

from __future__ import annotations

import json
import re
import sys
import urllib.request
from pathlib import Path

from tests.conftest import ROOT, sanitizerd, start_daemon, stop_daemon
from tests.test_e2e_daemon import free_port

DEPLOY = ROOT / "deploy"
NAME = re.compile(r"\b((?:sanitizerd|process)_[a-z_]+)\b")


def used_metrics() -> dict[str, set[str]]:
    dashboard = json.loads((DEPLOY / "grafana" / "sanitizerd.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    return {
        "grafana": {name for expr in exprs for name in NAME.findall(expr)},
        "alerts": set(NAME.findall((DEPLOY / "prometheus" / "sanitizerd-alerts.yml").read_text())),
    }


def test_every_metric_a_dashboard_or_alert_uses_is_exported(short_dir: Path) -> None:
    port = free_port()
    daemon = start_daemon(short_dir, "--metrics-addr", f"127.0.0.1:{port}")
    try:
        run = sanitizerd(
            "run", "--socket", str(daemon.socket), "--", sys.executable, str(ROOT / "examples/add_custom.py")
        )
        assert run.returncode == 0, run.stderr
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    finally:
        assert stop_daemon(daemon) == 0
    exported = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}
    exported |= {name.removesuffix("_bucket") for name in exported}  # a histogram is named without its suffix
    used = used_metrics()
    assert used["grafana"] and used["alerts"]
    for where, names in used.items():
        assert names <= exported, f"{where} uses metrics the daemon does not export: {sorted(names - exported)}"


def test_the_scrape_config_points_at_the_services_metrics_address() -> None:
    service = (DEPLOY / "systemd" / "sanitizerd.service").read_text()
    address = re.search(r"--metrics-addr (\S+)", service).group(1)
    assert f'"{address}"' in (DEPLOY / "prometheus" / "prometheus.yml").read_text()
    assert address.startswith("127.0.0.1:")  # /metrics on loopback only, by default
