"""IPC shared memory across the sessions of one job: the sync session layer, then real processes."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from sanitizerd.sessions import ipc
from sanitizerd.sessions.ipc import IpcTable
from sanitizerd.sessions.session import ForeignFrees, Peer, Session
from sanitizerd_protocol import messages as m
from tests.conftest import RunningDaemon, sanitizerd


def session(ident: int, table: IpcTable) -> Session:
    return Session(ident, m.Hello(version=1, job="j"), m.Config(), Peer(), ipc=table)


def result(items: list[object]) -> m.IpcResult:
    [answer] = [i for i in items if isinstance(i, m.IpcResult)]
    return answer


class TestSessions:
    def test_map_in_another_session_is_an_allocation_there(self) -> None:
        """An export set by one session and mapped by another becomes an allocation of the importer."""
        table = IpcTable()
        exporter, importer = session(1, table), session(2, table)
        assert result(exporter.handle(m.Ipc(op="set", name="kv", address=0x1000, size=4096))).ok
        items = importer.handle(m.Ipc(op="map", name="kv", address=0x9000, serial=7))
        assert result(items).ok
        [malloc] = [i for i in items if isinstance(i, m.HostOp)]
        assert (malloc.op, malloc.address, malloc.size, malloc.source, malloc.desc, malloc.serial) == (
            "malloc", 0x9000, 4096, "bypass", "ipc_memory", 7,
        )  # fmt: skip

    def test_a_jobs_names_and_mappings_are_bounded(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Past the job's bounds an export or a map is refused with the reason and changes nothing; an unmap or a
        destroy makes room again."""
        monkeypatch.setattr(ipc, "MAX_EXPORTS", 2)
        monkeypatch.setattr(ipc, "MAX_MAPPINGS", 2)
        table = IpcTable()
        exporter, importer = session(1, table), session(2, table)
        assert result(exporter.handle(m.Ipc(op="set", name="a", address=0x1000, size=64))).ok
        assert result(exporter.handle(m.Ipc(op="set", name="b", address=0x2000, size=64))).ok
        refused = result(exporter.handle(m.Ipc(op="set", name="c", address=0x3000, size=64)))
        assert not refused.ok and "limit of 2 exported names" in refused.reason and "c" not in table.exports
        assert result(importer.handle(m.Ipc(op="map", name="a", address=0x9000))).ok
        assert result(importer.handle(m.Ipc(op="map", name="a", address=0xA000))).ok
        items = importer.handle(m.Ipc(op="map", name="b", address=0xB000))
        assert not result(items).ok and "limit of 2 mappings" in result(items).reason
        assert not [i for i in items if isinstance(i, m.HostOp)]  # no allocation for a refused map
        assert result(importer.handle(m.Ipc(op="unmap", address=0x9000))).ok
        assert result(importer.handle(m.Ipc(op="map", name="b", address=0xB000))).ok
        assert result(exporter.handle(m.Ipc(op="destroy", name="a"))).ok
        assert result(exporter.handle(m.Ipc(op="set", name="c", address=0x3000, size=64))).ok
        assert len(table.mapped_at) == 1  # the destroyed name's mapping went with it

    def test_refusals_say_why(self) -> None:
        """Unknown names, duplicate exports, double maps and unknown unmaps are refused with a reason."""
        table = IpcTable()
        s = session(1, table)
        assert "no export" in result(s.handle(m.Ipc(op="map", name="nope", address=0x10))).reason
        assert result(s.handle(m.Ipc(op="set", name="kv", address=0x1000, size=64))).ok
        assert "already exported" in result(s.handle(m.Ipc(op="set", name="kv", address=0x2000, size=64))).reason
        assert result(s.handle(m.Ipc(op="map", name="kv", address=0x5000))).ok
        assert "already mapped" in result(s.handle(m.Ipc(op="map", name="kv", address=0x5000))).reason
        assert "not mapped" in result(s.handle(m.Ipc(op="unmap", address=0x6000))).reason
        assert "no export" in result(s.handle(m.Ipc(op="destroy", name="other"))).reason

    def test_unmap_frees(self) -> None:
        """Unmapping frees the importer's allocation."""
        table = IpcTable()
        s = session(1, table)
        s.handle(m.Ipc(op="set", name="kv", address=0x1000, size=64))
        s.handle(m.Ipc(op="map", name="kv", address=0x5000))
        items = s.handle(m.Ipc(op="unmap", address=0x5000))
        assert [(i.op, i.address) for i in items if isinstance(i, m.HostOp)] == [("free", 0x5000)]

    def test_destroy_frees_every_mapping(self) -> None:
        """Destroy frees the exporter's own mappings at once and hands the others' to their sessions."""
        table = IpcTable()
        exporter, importer = session(1, table), session(2, table)
        exporter.handle(m.Ipc(op="set", name="kv", address=0x1000, size=64))
        exporter.handle(m.Ipc(op="map", name="kv", address=0x3000))
        importer.handle(m.Ipc(op="map", name="kv", address=0x5000))
        items = exporter.handle(m.Ipc(op="destroy", name="kv"))
        assert [(i.op, i.address) for i in items if isinstance(i, m.HostOp)] == [("free", 0x3000)]
        [foreign] = [i for i in items if isinstance(i, ForeignFrees)]
        assert foreign.by_session == {2: {0x5000}}
        # The pump hands them to the importer, which applies them before its next message.
        importer.unmapped_elsewhere(foreign.by_session[2])
        first = importer.handle(m.Log(text="next"))
        assert [(i.op, i.address) for i in first if isinstance(i, m.HostOp)] == [("free", 0x5000)]
        assert "no export" in result(importer.handle(m.Ipc(op="map", name="kv", address=0x7000))).reason


class TestProcesses:
    def test_out_of_bounds_through_a_mapping_in_another_process(self, daemon: RunningDaemon, short_dir: Path) -> None:
        """A buffer exported by one process and read past its end through a mapping in another process of the
        same job is reported against the importing session."""
        child = short_dir / "importer.py"
        child.write_text(
            textwrap.dedent(
                """
                import client_shim
                from client_shim import EventKind, Space, accesses
                c = client_shim.connect(device=1)
                c.ipc_map("kv_cache", 0x22000000)
                assert c.wait_ipc(1, timeout=30)[0].ok
                k = c.kernel_begin("reader", 1)
                c.events(k, accesses(EventKind.READ, Space.GM, 0x22000000, 32, block_num=135))
                c.kernel_end(k)
                c.wait_kernel(k, timeout=30)
                c.ipc_unmap(0x22000000)
                c.close()
                print(c.session)
                """
            )
        )
        parent = short_dir / "exporter.py"
        parent.write_text(
            textwrap.dedent(
                f"""
                import subprocess, sys
                import client_shim
                c = client_shim.connect(device=0)
                c.malloc(0x11000000, 4096)
                c.ipc_set("kv_cache", 0x11000000, 4096)
                assert c.wait_ipc(1, timeout=30)[0].ok
                importer = subprocess.run([sys.executable, {str(child)!r}], capture_output=True, text=True)
                assert importer.returncode == 0, importer.stderr
                c.ipc_destroy("kv_cache")
                c.free(0x11000000)
                c.close()
                print(c.session, importer.stdout.strip())
                """
            )
        )
        run = sanitizerd("run", "--socket", str(daemon.socket), "--", sys.executable, str(parent))
        assert run.returncode == 0, run.stderr + run.stdout
        assert "illegal read of size 224" in run.stdout
        exporter_session, importer_session = (int(x) for x in run.stdout.splitlines()[-2].split())
        findings = json.loads(sanitizerd("findings", "--socket", str(daemon.socket), "--format", "json").stdout)
        [read] = [f for f in findings if f["kind"] == "illegal_read"]
        assert (read["session"], read["device"], read["address"], read["size"]) == (
            importer_session, 1, 0x22000000, 224,
        )  # fmt: skip
        assert importer_session != exporter_session
        assert [f["kind"] for f in findings] == ["illegal_read"]  # the mapping is freed: no leak, no stray free
