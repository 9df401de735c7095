"""A program that speaks msSanitizer's own wire, as its hooks would, to the socket ``sanitizerd run`` opens for it
(MSOP_SOCKET_PATH): every byte packed at the offsets measured for the release named (tests/test_compat_layouts.py's
Client), none through sanitizerd's decoder. Run as ``python -m tests.mssanitizer_job_client <wire> <scenario>`` from
the repository root.

Scenarios (issue 28):

* ``race`` / ``ordered``: two connections of one job, devices 0 and 1, each marking the same GM region shared
  (MEM_REGION_PERMISSION, flag 0x4) and launching ``allgather_custom``: device 0 writes the region (UB -> GM), device
  1 reads it (GM -> UB). ``ordered`` puts msSanitizer's mstx cross-NPU barrier (with pipeBarrierAll) after the write
  and before the read; ``signalled`` orders them by mstx signals: device 0 sets SIGNAL to -1 after the write (and a
  pipe_barrier(PIPE_ALL)), device 1 waits for it to be less than 0 before the read.
* ``hung-close``: a launch of two blocks whose block 0 stops on a wait_flag nothing sets; the hooks send that
  block's records and then the connection closes (the program killed before the second block's slot).
* ``hung-timeout``: the same block alone, every slot sent (the runtime's timeout stopped the kernel and the hooks
  read its record buffer as for any kernel), the verdict awaited, then the close.
* ``paired``: the same launch with PIPE_MTE3 setting the flag before the wait: it ran to its end.
* ``barrier-hung``: a launch of four blocks; block 0's scalar stops on a wait_flag nothing sets, blocks 1-3 stop at
  msSanitizer's mstx cross-core barrier (block 0 never reaches it); every slot sent, the verdict awaited.
* ``barrier-met``: the same four blocks all reach the barrier, then copy out: they ran to their end.
* ``vgather``: one block whose vgather's two ELEMENT records write the same UB bytes, and whose vsel writes where
  its CMPMASK_OP did: one instruction each (msSanitizer aca3f9d), no race. ``vgather-apart``: the same two ELEMENT
  writes with a CMPMASK_OP between them: two instructions, a race.
"""

from __future__ import annotations

import os
import socket
import sys

from sanitizerd.server.compat_socket import abstract_address
from tests.test_compat_layouts import Client, raw_named

SHARED = 0x12C0_4000_0000
UB_BUFFER = 0x100
GM_MEM, UB_MEM = 6, 4  # MemType of a DmaMovRecord
PIPE_S, PIPE_V, PIPE_MTE3 = 0, 1, 5  # PipeType of a SyncRecord
CROSS_CORE_BARRIER, SIGNAL_SET, SIGNAL_WAIT, CROSS_NPU_BARRIER = 4, 7, 8, 9  # InterfaceType of an MstxRecord
LT = 4  # CompareOp
PIPE_ALL = 6
SIGNAL = SHARED + 0x1000
# The lines the reports name (a record's own fileNo/lineNo; no kernel binary is sent).
WRITE_LINE, READ_LINE, WAIT_LINE, BARRIER_LINE = 21, 34, 47, 52


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError(f"the daemon closed after {len(data)} of {size} bytes")
        data += chunk
    return data


class Hooks:
    """One connection of msSanitizer's hooks on one device."""

    def __init__(self, client: Client, device: int) -> None:
        self.client = client
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(abstract_address(os.environ["MSOP_SOCKET_PATH"]))
        summary = client.put("DeviceInfoSummary", {"device": 2, "blockSize": 32, "blockNum": 24, "deviceId": device})
        self.sock.sendall(client.packet("DEVICE_SUMMARY", summary))
        recv_exactly(self.sock, int(client.raw["config"]["size"]))

    def share(self, address: int, size: int, device: int) -> None:
        """mstxMemRegionsSetPermission: read, write and shared."""
        desc = self.client.put("MemRegionPermissionDesc", {"addr": address, "size": size, "deviceId": device,
                                                           "flags": 0x7})  # fmt: skip
        self.sock.sendall(self.client.packet("MEM_REGION_PERMISSION", desc))

    def launch(self, name: str, blocks: list[list[bytes]], block_dim: int, *, await_verdict: bool = True) -> None:
        """A kernel's summary and one slot per block of ``blocks``; the verdict (KERNEL_RECORD_RESPONSE) awaited
        when every slot of the launch was sent."""
        self.sock.sendall(self.client.kernel_summary(name, block_dim=block_dim))
        for block_id, records in enumerate(blocks):
            self.sock.sendall(self.client.slot(records, block_id=block_id, total=block_dim))
        if await_verdict:
            recv_exactly(self.sock, 12)

    def close(self) -> None:
        self.sock.close()


def location(line: int, pc: int, block_id: int = 0) -> dict[str, int]:
    return {"location.fileNo": 0x51, "location.lineNo": line, "location.pc": pc, "location.blockId": block_id}


def copy(client: Client, *, to_gm: bool, line: int, pc: int) -> bytes:
    """A DataCopy of one 32-byte block between UB and the shared region (UB -> GM on MTE3, GM -> UB on MTE2)."""
    dst, src = (SHARED, UB_BUFFER) if to_gm else (UB_BUFFER, SHARED)
    mem = (GM_MEM, UB_MEM) if to_gm else (UB_MEM, GM_MEM)
    values = {"dst": dst, "src": src, "nBurst": 1, "lenBurst": 1, "dstMemType": mem[0], "srcMemType": mem[1]}
    return client.record("DMA_MOV", values | location(line, pc))


def npu_barrier(client: Client, pc: int) -> bytes:
    values = {
        "interfaceType": CROSS_NPU_BARRIER,
        "interface.mstxCrossNpuBarrier.usedDeviceNum": 2,
        "interface.mstxCrossNpuBarrier.usedCoreNum": 1,
        "interface.mstxCrossNpuBarrier.pipeBarrierAll": 1,
    }
    return client.record("MSTX_STUB", values | location(0, pc))  # fmt: skip


def signal_set(client: Client, address: int, value: int, pc: int) -> bytes:
    values = {"interfaceType": SIGNAL_SET, "interface.mstxSignalSet.addr": address,
              "interface.mstxSignalSet.value": value}  # fmt: skip
    return client.record("MSTX_STUB", values | location(0, pc))


def signal_wait(client: Client, address: int, value: int, op: int, pc: int) -> bytes:
    values = {"interfaceType": SIGNAL_WAIT, "interface.mstxSignalWait.addr": address,
              "interface.mstxSignalWait.cmpValue": value, "interface.mstxSignalWait.cmpOp": op}  # fmt: skip
    return client.record("MSTX_STUB", values | location(0, pc))


def pipe_barrier_all(client: Client, pc: int) -> bytes:
    return client.record("PIPE_BARRIER", {"pipe": PIPE_ALL} | location(0, pc))


def wait_flag(client: Client, src: int, dst: int, event_id: int, pc: int) -> bytes:
    return client.record("WAIT_FLAG", {"src": src, "dst": dst, "eventID": event_id} | location(WAIT_LINE, pc))


def core_barrier(client: Client, pc: int, block_id: int) -> bytes:
    values = {"interfaceType": CROSS_CORE_BARRIER, "interface.mstxCrossCoreBarrier.pipeBarrierAll": 0}
    return client.record("MSTX_STUB", values | location(BARRIER_LINE, pc, block_id))


def barrier(client: Client, *, met: bool) -> None:
    """Four blocks meet at the mstx cross-core barrier (``met``), or block 0's scalar waits for PIPE_MTE3's flag
    nobody sets first and never gets there."""
    hooks = Hooks(client, 0)
    blocks = []
    for block_id in range(4):
        if block_id == 0 and not met:
            records = [client.record("WAIT_FLAG", {"src": PIPE_MTE3, "dst": PIPE_S, "eventID": 2}
                                     | location(WAIT_LINE, 0xC4, block_id))]  # fmt: skip
        else:
            records = [core_barrier(client, 0xD0, block_id)]
        if met:
            records.append(copy(client, to_gm=True, line=WRITE_LINE, pc=0xE0))
        blocks.append(records)
    hooks.launch("barrier_kernel", blocks, 4)
    hooks.close()


def cross_npu(client: Client, scenario: str) -> None:
    ordered, signalled = scenario == "ordered", scenario == "signalled"
    for device in (0, 1):
        hooks = Hooks(client, device)
        hooks.share(SHARED, 4096, device)
        if device == 0:
            records = [copy(client, to_gm=True, line=WRITE_LINE, pc=0x40)]
            records += [npu_barrier(client, 0x44)] if ordered else []
            records += [pipe_barrier_all(client, 0x44), signal_set(client, SIGNAL, -1, 0x48)] if signalled else []
        else:
            records = [npu_barrier(client, 0x40)] if ordered else []
            records += [signal_wait(client, SIGNAL, 0, LT, 0x40)] if signalled else []
            records += [copy(client, to_gm=False, line=READ_LINE, pc=0x48)]
        hooks.launch("allgather_custom", [records], 1)
        hooks.close()


def hung(client: Client, *, every_slot: bool, paired: bool = False) -> None:
    """Block 0 copies in, then PIPE_V waits for a flag of PIPE_MTE3 that nothing sets (``paired``: that is set)."""
    hooks = Hooks(client, 0)
    stuck = [copy(client, to_gm=False, line=READ_LINE, pc=0x10), wait_flag(client, PIPE_MTE3, PIPE_V, 1, 0xC4)]
    if paired:
        setter = {"src": PIPE_MTE3, "dst": PIPE_V, "eventID": 1} | location(WAIT_LINE - 1, 0xC0)
        stuck.insert(1, client.record("SET_FLAG", setter))
    if every_slot:
        hooks.launch("hung_kernel", [stuck], 1)
    else:
        hooks.launch("hung_kernel", [stuck], 2, await_verdict=False)
    hooks.close()


def one_instruction(client: Client, *, apart: bool) -> None:
    """A vgather's ELEMENTs writing one place and a vsel over its CMPMASK_OP's bytes; ``apart``: two ELEMENTs
    with a CMPMASK_OP between them."""
    hooks = Hooks(client, 0)
    every = (1 << 64) - 1
    element = {"addr": UB_BUFFER, "blockSize": 32, "blockNum": 1, "dataBits": 16, "accessType": 1}
    gather = {"dst": 0x5000, "src": 0x4000, "dstBlockSize": 32, "srcBlockSize": 32, "dstBlockNum": 1,
              "srcBlockNum": 1, "dstRepeat": 1, "dstDataBits": 16, "vectorMask.mask0": every,
              "vectorMask.mask1": every}  # fmt: skip
    cmpmask = {"addr": 0x3000, "size": 16, "accessType": 1}
    vsel = {"dst": 0x3000, "src0": 0x6000, "src1": 0x6400, "repeat": 1, "vectorMask.mask0": every,
            "vectorMask.mask1": every, "dstBlockSize": 32, "dstBlockNum": 1, "src0BlockSize": 32, "src0BlockNum": 1,
            "src1BlockSize": 32, "src1BlockNum": 1}  # fmt: skip
    if apart:
        records = [client.record("ELEMENT", element | location(WRITE_LINE, 0x40)),
                   client.record("CMPMASK_OP", cmpmask | location(WRITE_LINE + 1, 0x44)),
                   client.record("ELEMENT", element | location(WRITE_LINE + 2, 0x48))]  # fmt: skip
    else:
        records = [client.record("VGATHER", gather | location(WRITE_LINE, 0x40)),
                   client.record("ELEMENT", element | location(WRITE_LINE, 0x40)),
                   client.record("ELEMENT", element | location(WRITE_LINE, 0x40)),
                   client.record("CMPMASK_OP", cmpmask | location(WRITE_LINE + 1, 0x44)),
                   client.record("VSEL_OP", vsel | location(WRITE_LINE + 1, 0x44))]  # fmt: skip
    hooks.launch("gather_kernel", [records], 1)
    hooks.close()


def main(wire_name: str, scenario: str) -> None:
    client = Client(raw_named(wire_name))
    match scenario:
        case "race" | "ordered" | "signalled":
            cross_npu(client, scenario)
        case "hung-close" | "hung-timeout" | "paired":
            hung(client, every_slot=scenario != "hung-close", paired=scenario == "paired")
        case "barrier-hung" | "barrier-met":
            barrier(client, met=scenario == "barrier-met")
        case "vgather" | "vgather-apart":
            one_instruction(client, apart=scenario == "vgather-apart")
        case _:
            raise SystemExit(f"no scenario {scenario!r}")
    sys.stdout.flush()


if __name__ == "__main__":
    main(*sys.argv[1:3])
