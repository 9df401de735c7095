"""Automatic attach: the identity a launcher gives, the .pth hook, one session per process (and one more per
forked child), and a daemon that goes away mid-training."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from client_shim.attach import PTH_NAME, hook_dir, identity, install
from tests.conftest import ROOT, RunningDaemon, sanitizerd, start_daemon, stop_daemon


class TestIdentity:
    def test_torchrun(self) -> None:
        env = {"TORCHELASTIC_RUN_ID": "abc", "RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8"}
        assert identity(env, user="alice") == {
            "job": "alice/torchrun-abc",
            "rank": 5,
            "local_rank": 1,
            "world_size": 8,
            "device": 1,
        }

    def test_ascend_launch_environment(self) -> None:
        env = {"RANK_ID": "3", "ASCEND_DEVICE_ID": "6", "RANK_SIZE": "8", "RANK_TABLE_FILE": "/etc/hccl_8p.json"}
        assert identity(env, user="alice") == {
            "job": "alice/ranktable-hccl_8p",
            "rank": 3,
            "local_rank": -1,
            "world_size": 8,
            "device": 6,
        }

    def test_visible_devices_map_the_local_rank(self) -> None:
        env = {
            "LOCAL_RANK": "1",
            "ASCEND_RT_VISIBLE_DEVICES": "4,5,6,7",
            "MASTER_ADDR": "10.0.0.1",
            "MASTER_PORT": "29500",
        }
        assert identity(env)["device"] == 5 and identity(env, user="alice")["job"] == "alice/10.0.0.1:29500"

    def test_an_explicit_job_wins(self) -> None:
        assert identity({"SANITIZERD_JOB": "mine", "TORCHELASTIC_RUN_ID": "abc"})["job"] == "mine"

    def test_a_derived_name_is_the_users_own(self) -> None:
        name = pwd.getpwuid(os.geteuid()).pw_name
        assert identity({"TORCHELASTIC_RUN_ID": "none"})["job"] == f"{name}/torchrun-none"

    def test_nothing_known(self) -> None:
        assert identity({}) == {"job": "", "rank": -1, "local_rank": -1, "world_size": 0, "device": -1}


@pytest.mark.parametrize(("value", "enabled"), [("1", "True"), ("", "False")])
def test_the_pth_hook_attaches_only_when_asked(short_dir: Path, value: str, enabled: str) -> None:
    """The installed .pth line marks the process attached when SANITIZERD_ATTACH=1, and does nothing else."""
    pth = install(str(short_dir))
    assert pth.name == PTH_NAME
    code = f"import site; site.addsitedir({str(short_dir)!r}); from client_shim import attach; print(attach.enabled())"
    env = dict(os.environ, SANITIZERD_ATTACH=value)
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == enabled


FORKING = textwrap.dedent(
    """
    import os
    from client_shim import attach, connect
    client = connect(device=3)
    assert client is attach.attached()
    client.signature(1, [("loss", "()", 7)])
    pid = os.fork()
    if pid == 0:
        attach.client().signature(1, [("loss", "()", 7)], replay=1)  # the child's own session
        attach.client().close()
        os._exit(0)
    os.waitpid(pid, 0)
    """
)


def test_one_session_per_process_and_one_per_forked_child(daemon: RunningDaemon) -> None:
    env = dict(
        os.environ, SANITIZERD_ATTACH="1", SANITIZERD_SOCKET=str(daemon.socket), SANITIZERD_JOB="forked",
        PYTHONPATH=str(hook_dir()),
    )  # fmt: skip
    subprocess.run([sys.executable, "-c", FORKING], env=env, cwd=ROOT, check=True, timeout=60)
    sessions = json.loads(sanitizerd("sessions", "--socket", str(daemon.socket), "--format", "json").stdout)
    mine = [s for s in sessions if s["job"] == "forked"]
    assert sorted((s["device"], s["signatures"]) for s in mine) == [(3, 1), (3, 1)]


TRAINING = textwrap.dedent(
    """
    import sys, time, torch
    from client_shim.torch_sdc import SDCReplayer
    w = torch.nn.Parameter(torch.ones(4))
    replayer = SDCReplayer(SDCReplayer.Config(num_steps=-1), modules=[torch.nn.ParameterList([w])])
    for step in range(1, 61):
        replayer.run_fwd_bwd(lambda: (w * w).sum().backward() or (w * w).sum(), step)
        w.grad = None
        if step == 10:
            print("running", flush=True)
        time.sleep(0.05)
    print("done", flush=True)
    """
)


def test_a_daemon_that_dies_mid_training_leaves_one_warning(short_dir: Path) -> None:
    daemon = start_daemon(short_dir)
    env = dict(os.environ, SANITIZERD_ATTACH="1", SANITIZERD_SOCKET=str(daemon.socket), PYTHONPATH=str(hook_dir()))
    proc = subprocess.Popen(
        [sys.executable, "-c", TRAINING], env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "running"
    daemon.process.kill()
    stop_daemon(daemon)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.strip() == "done"
    warnings = [line for line in err.splitlines() if line.startswith("[sanitizerd] WARNING")]
    assert len(warnings) == 1, err
    assert "this process runs unchecked" in warnings[0]
