"""deploy/: every metric a Grafana panel or a Prometheus alert uses is one a live daemon exports."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

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


# --- Prometheus: promtool on the rules and the scrape config, and the rules' own unit tests ---

PROMETHEUS = DEPLOY / "prometheus"


def promtool(*args: str, cwd: Path = PROMETHEUS) -> subprocess.CompletedProcess[str]:
    """promtool from Debian's prometheus package (.ci/run installs it and sets SANITIZERD_REQUIRE_PROMTOOL=1, so
    there these tests fail rather than skip)."""
    if shutil.which("promtool") is None:
        if os.environ.get("SANITIZERD_REQUIRE_PROMTOOL") == "1":
            pytest.fail("SANITIZERD_REQUIRE_PROMTOOL=1 but promtool is not installed (Debian: prometheus)")
        pytest.skip("promtool is not installed (Debian: prometheus; .ci/run installs it)")
    return subprocess.run(["promtool", *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_promtool_checks_the_rules_and_the_scrape_config() -> None:
    rules = promtool("check", "rules", "sanitizerd-alerts.yml")
    assert rules.returncode == 0 and "SUCCESS: 11 rules found" in rules.stdout, rules.stdout + rules.stderr
    scrape = promtool("check", "config", "prometheus.yml")
    assert scrape.returncode == 0, scrape.stdout + scrape.stderr


def test_every_alert_fires_on_its_condition_and_stays_silent_otherwise() -> None:
    """deploy/prometheus/tests/sanitizerd-alerts.test.yml: for each alert, series that meet its condition (it fires,
    with its labels and words) and series that do not (it stays silent); the detector-lag alert, which could
    never fire, among them."""
    result = promtool("test", "rules", "sanitizerd-alerts.test.yml", cwd=PROMETHEUS / "tests")
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr
    tested = set(re.findall(r"alertname: (\w+)", (PROMETHEUS / "tests" / "sanitizerd-alerts.test.yml").read_text()))
    rules = set(re.findall(r"- alert: (\w+)", (PROMETHEUS / "sanitizerd-alerts.yml").read_text()))
    assert tested == rules, f"alerts without a test: {sorted(rules - tested)}"


def test_the_alert_tests_can_fail(tmp_path: Path) -> None:
    """The same tests against a rule file with the old detector-lag expression (no on(instance)) fail on it."""
    broken = (PROMETHEUS / "sanitizerd-alerts.yml").read_text().replace("and on (instance)", "and")
    broken = broken.replace("sum by (instance) (rate(sanitizerd_backpressure_waits_total[5m]))",
                            "rate(sanitizerd_backpressure_waits_total[5m])")  # fmt: skip
    (tmp_path / "tests").mkdir()
    (tmp_path / "sanitizerd-alerts.yml").write_text(broken)
    shutil.copy(PROMETHEUS / "tests" / "sanitizerd-alerts.test.yml", tmp_path / "tests")
    result = promtool("test", "rules", "sanitizerd-alerts.test.yml", cwd=tmp_path / "tests")
    said = result.stdout + result.stderr
    assert result.returncode != 0 and "alertname: SanitizerdDetectorLag" in said, said


# --- the scrape itself and the dashboard for many hosts ---


def test_the_scrape_has_no_created_series_and_counts_silent_sessions(short_dir: Path) -> None:
    port = free_port()
    daemon = start_daemon(short_dir, "--metrics-addr", f"127.0.0.1:{port}")
    try:
        program = short_dir / "silent.py"
        program.write_text("import client_shim\nclient_shim.connect(device=0).close()\n")  # attaches, sends nothing
        run = sanitizerd("run", "--socket", str(daemon.socket), "--", sys.executable, str(program))
        assert "no records received" in run.stdout, run.stdout + run.stderr
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    finally:
        assert stop_daemon(daemon) == 0
    assert "_created" not in text
    assert "sanitizerd_sessions_silent_total 1.0" in text
    assert 'sanitizerd_findings_total{finding_severity="error",kind="illegal_read"} 0.0' in text
    assert 'severity="' not in text.replace('finding_severity="', "")  # Alertmanager's routing label stays the rules'


def test_the_dashboard_is_for_many_hosts() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "sanitizerd.json").read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert {"datasource", "instance", "job"} <= set(variables)
    assert "label_values(" in variables["instance"]["query"]["query"] and variables["instance"]["multi"]
    for panel in dashboard["panels"]:
        assert panel["fieldConfig"]["defaults"].get("unit"), f"{panel['title']} has no unit"
        for target in panel["targets"]:
            for selector in re.findall(r"\b(?:sanitizerd|process)_[a-z_]+(\{[^}]*\})?", target["expr"]):
                assert 'instance=~"$instance"' in selector and 'job=~"$job"' in selector, target["expr"]
        exprs = " ".join(t["expr"] for t in panel["targets"])
        assert not ("_bytes" in exprs and "cpu_seconds" in exprs), f"{panel['title']} mixes bytes and CPU"
    titles = [p["title"] for p in dashboard["panels"]]
    [sdc] = [p for p in dashboard["panels"] if "Silent data corruption" in p["title"]]
    assert "sdc_mismatch|sdc_replica_mismatch" in sdc["targets"][0]["expr"] and len(titles) == len(set(titles))
