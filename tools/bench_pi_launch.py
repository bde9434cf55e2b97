#!/usr/bin/env python3
"""The Pi backend's own host work per launch, without a Pi: what vc4nn.pi's Python costs around
each launch (building and parsing the mailbox message, or writing the V3D registers and polling),
which the cycle model's launch overhead (calibrated on GPU_FFT's C code) does not contain.

    python tools/bench_pi_launch.py                  # 38 launches of 12 QPUs, as MobileNet v1
    python tools/bench_pi_launch.py --launches 29 --json

A real PiDevice runs on an instant OS boundary: the firmware answers every mailbox call at once
and every program completes at once (SRQCS reads "all completed"), GPU memory is anonymous
memory. What is timed is vc4nn's code only; the Pi Zero figure scales it by the runtime bench's
assumed factor (vc4nn/runtime/bench.py, PI_ZERO_HOST_FACTOR): an estimate, not a measurement.
"""

import argparse
import json
import mmap
import os
import statistics
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from vc4nn.pi import PiDevice, v3d_registers  # noqa: E402
from vc4nn.pi.os_boundary import RegisterWindow  # noqa: E402
from vc4nn.runtime.bench import PI_ZERO_HOST_FACTOR  # noqa: E402

PAGE = 4096
PI_ZERO_REVISION = 0x9000C1
# Mailbox answers by tag id: board and firmware revision, V3D clock, enable_qpu, execute_qpu,
# mem_unlock, mem_release (mem_alloc and mem_lock are answered by InstantOs).
ANSWERS = {0x00010002: [PI_ZERO_REVISION], 0x00000001: [1], 0x00030002: [5, 300_000_000],
           0x00030012: [0], 0x00030011: [0], 0x0003000E: [0], 0x0003000F: [0]}
# The blocks a MobileNet v1 session holds (arena, weights, packed recordings, programs): the
# backend looks a control list up among them.
SESSION_BLOCKS = 60


class AllCompleted(RegisterWindow):
    """V3D registers in anonymous memory; SRQCS reads as ``programs`` requests made and
    completed (every launch of the benchmark has that many)."""

    def __init__(self, mapping, programs):
        super().__init__(mapping)
        self.programs = programs

    def read(self, offset):
        if offset == v3d_registers.SRQCS:
            return self.programs << 8 | self.programs << 16
        return super().read(offset)


class InstantOs:
    """A Pi Zero whose firmware answers at once (the OS boundary of vc4nn.pi.os_boundary)."""

    def __init__(self, programs):
        self.programs = programs            # per launch
        self.next_handle, self.blocks, self.next_bus = 1, {}, 0x40000000 + PAGE

    def pointer_size(self):
        return 8

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
        window = AllCompleted(mmap.mmap(-1, length), self.programs)
        window._words[v3d_registers.IDENT0 // 4] = v3d_registers.IDENT0_VC4
        return window

    def monotonic(self):
        return time.monotonic()

    def yield_cpu(self):
        pass

    def ioctl(self, fd, request, buffer):
        tag, value_bytes = struct.unpack_from("<2I", buffer, 8)
        args = struct.unpack_from(f"<{value_bytes // 4}I", buffer, 20)
        if tag == 0x0003000C:                       # mem_alloc: a handle
            answer = [self.next_handle]
            self.blocks[self.next_handle] = args[0]
            self.next_handle += 1
        elif tag == 0x0003000D:                     # mem_lock: the block's bus address
            answer = [self.next_bus]
            self.next_bus += -(-self.blocks[args[0]] // PAGE) * PAGE
        else:
            answer = ANSWERS[tag]
        struct.pack_into("<I", buffer, 4, 0x80000000)
        struct.pack_into("<I", buffer, 16, 0x80000000 | 4 * len(answer))
        struct.pack_into(f"<{len(answer)}I", buffer, 20, *answer)


def time_path(launch, count, qpus, runs):
    """Median host seconds per launch of ``count`` launches in one execute_control_lists
    call, and of the same launches one execute_control_list call each."""
    with PiDevice(InstantOs(qpus), launch=launch) as dev:
        for _ in range(SESSION_BLOCKS):
            dev.alloc(1024)
        code = dev.alloc(16, np.uint64)
        unif = dev.alloc(64, np.uint32)
        lists = [dev.array(np.array([[unif.address, code.address]] * qpus, np.uint32))
                 for _ in range(count)]
        pairs = [(qpus, c.address) for c in lists]
        sequence, single = [], []
        for _ in range(runs):
            start = time.perf_counter()
            dev.execute_control_lists(pairs)
            sequence.append(time.perf_counter() - start)
            start = time.perf_counter()
            for n, address in pairs:
                dev.execute_control_list(n, address)
            single.append(time.perf_counter() - start)
    return statistics.median(sequence) / count, statistics.median(single) / count


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--launches", type=int, default=38, help="launches per sequence")
    p.add_argument("--qpus", type=int, default=12)
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    reports = []
    for launch in ("mailbox", "direct"):
        sequence, single = time_path(launch, args.launches, args.qpus, args.runs)
        reports.append({"launch_path": launch, "qpus": args.qpus, "launches": args.launches,
                        "host_seconds_per_launch": sequence,
                        "host_seconds_per_launch_one_call_each": single,
                        "pi_zero_ms_per_sequence_estimate":
                            sequence * args.launches * PI_ZERO_HOST_FACTOR * 1e3})
    if args.json:
        print(json.dumps(reports, indent=1))
        return 0
    for r in reports:
        print(f"{r['launch_path']:>8}: {r['host_seconds_per_launch'] * 1e6:.1f} us of vc4nn's "
              f"Python per launch of {args.qpus} QPUs here in one execute_control_lists call "
              f"({r['host_seconds_per_launch_one_call_each'] * 1e6:.1f} us one call each); "
              f"{args.launches} launches about {r['pi_zero_ms_per_sequence_estimate']:.1f} ms on "
              f"a Pi Zero (assumed {PI_ZERO_HOST_FACTOR:.0f}x slower; an estimate)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
