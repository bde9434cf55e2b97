"""The Pi backend's own host work per launch, measured without a Pi.

A launch on a Pi costs the firmware's or the V3D's time (the cycle model's launch overhead,
calibrated on GPU_FFT's C code) plus what vc4nn.pi's Python does around it: building and parsing
the mailbox message, or reading the control list, writing the V3D registers and polling. The
second part is timed here: a real PiDevice on ``InstantOs``, an OS boundary whose firmware
answers every call at once and whose V3D completes every program at once, with GPU memory in
anonymous memory. What remains is vc4nn's code (``tools/bench_pi_launch.py``, and the runtime's
bench adds it to its Pi Zero estimate).
"""

import mmap
import statistics
import struct
import time

import numpy as np

from . import v3d_registers
from .backend import PiDevice
from .direct import START_WRITES
from .mailbox import CLOCK_V3D, EXECUTE_OK, RESPONSE_SUCCESS, TAG_RESPONSE_BIT, TAGS
from .os_boundary import RegisterWindow

PAGE = 4096
PI_ZERO_REVISION = 0x9000C1
# Mailbox answers by tag id (mem_alloc, mem_lock and execute_qpu are answered by
# InstantOs.ioctl).
ANSWERS = {TAGS[name].id: answer for name, answer in (
    ("get_board_revision", [PI_ZERO_REVISION]), ("get_firmware_revision", [1]),
    ("get_clock_rate", [CLOCK_V3D, 300_000_000]), ("enable_qpu", [0]), ("mem_unlock", [0]),
    ("mem_release", [0]))}
MEM_ALLOC, MEM_LOCK = TAGS["mem_alloc"].id, TAGS["mem_lock"].id
# execute_qpu's answer (the hot call): code word success, tag answered with 4 bytes, status ok.
EXECUTE_QPU_TAG = struct.pack("<I", TAGS["execute_qpu"].id)
EXECUTE_QPU_ANSWER = (struct.pack("<I", RESPONSE_SUCCESS),
                      struct.pack("<2I", TAG_RESPONSE_BIT | 4, EXECUTE_OK))


class AllCompleted(RegisterWindow):
    """V3D registers in anonymous memory; SRQCS reads as every program of the launch made and
    completed."""

    programs = 0

    def write_all(self, writes):
        super().write_all(writes)
        # DirectLauncher.writes_for's layout: the start writes, then 3 per program (counting
        # the SRQPC writes would cost as much as the writes)
        self.programs = (len(writes) - len(START_WRITES)) // 3

    def read(self, offset):
        if offset == v3d_registers.SRQCS:
            return self.programs << 8 | self.programs << 16
        return super().read(offset)


class InstantOs:
    """A Pi Zero whose firmware answers at once (the OS boundary of vc4nn.pi.os_boundary)."""

    def __init__(self):
        self.next_handle, self.sizes, self.next_bus = 1, {}, 0x40000000 + PAGE

    def pointer_size(self):
        return struct.calcsize("P")

    def page_size(self):
        return PAGE

    def exists(self, path):
        return path == "/dev/vcio"

    def read_text(self, path):
        return None

    def read_bytes(self, path):
        return None

    def open(self, path, write=False, sync=False):
        return 3 if path == "/dev/vcio" else 4

    def close(self, fd):
        pass

    def mmap(self, fd, length, offset):
        return mmap.mmap(-1, length)

    def detach_mapping(self, mapping):
        pass

    def map_registers(self, fd, physical, length):
        window = AllCompleted(mmap.mmap(-1, length))
        window.write(v3d_registers.IDENT0, v3d_registers.IDENT0_VC4)
        return window

    def monotonic(self):
        return time.monotonic()

    def yield_cpu(self):
        pass

    def ioctl(self, fd, request, buffer):
        if buffer[8:12] == EXECUTE_QPU_TAG:
            buffer[4:8], buffer[16:24] = EXECUTE_QPU_ANSWER
            return
        tag, value_bytes = struct.unpack_from("<2I", buffer, 8)
        args = struct.unpack_from(f"<{value_bytes // 4}I", buffer, 20)
        if tag == MEM_ALLOC:
            answer = [self.next_handle]
            self.sizes[self.next_handle] = args[0]
            self.next_handle += 1
        elif tag == MEM_LOCK:
            answer = [self.next_bus]
            self.next_bus += -(-self.sizes[args[0]] // PAGE) * PAGE
        else:
            answer = ANSWERS[tag]
        struct.pack_into("<I", buffer, 4, RESPONSE_SUCCESS)
        struct.pack_into("<I", buffer, 16, TAG_RESPONSE_BIT | 4 * len(answer))
        struct.pack_into(f"<{len(answer)}I", buffer, 20, *answer)


def seconds_per_launch(launch, qpus, blocks=60, runs=50):
    """(median host seconds per launch of ``qpus`` [QPU count of each launch] in one
    execute_control_lists call, and with one execute_control_list call each) on the ``launch``
    path, with ``blocks`` other allocations held (a session's: control lists are looked up)."""
    with PiDevice(InstantOs(), launch=launch) as dev:
        for _ in range(blocks):
            dev.alloc(1024)
        code = dev.alloc(16, np.uint64)
        unif = dev.alloc(64, np.uint32)
        pairs = [(n, dev.array(np.array([[unif.address, code.address]] * n, np.uint32)).address)
                 for n in qpus]
        sequence, single = [], []
        for _ in range(runs):
            start = time.perf_counter()
            dev.execute_control_lists(pairs)
            sequence.append(time.perf_counter() - start)
            start = time.perf_counter()
            for n, address in pairs:
                dev.execute_control_list(n, address)
            single.append(time.perf_counter() - start)
    count = max(len(pairs), 1)
    return statistics.median(sequence) / count, statistics.median(single) / count
