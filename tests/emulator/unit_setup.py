"""Shared set-up for the unit tests of the VPM/DMA, TMU and sync units (no QPU core involved).

Setup words are built here from the bit positions of facts §3, written out by hand, so that the
tests do not share the field tables of asm.isa with the code under test.
"""

import numpy as np

from vc4nn.emulator.checks import Checks
from vc4nn.emulator.memory import BusMemory
from vc4nn.emulator.timing import Timing
from vc4nn.emulator.tmu import Tmu
from vc4nn.emulator.bus import MemoryBus
from vc4nn.emulator.vpm import Vpm

SIZE_CODE = {8: 0, 16: 1, 32: 2}          # facts §3: SIZE 0 8-bit, 1 16-bit, 2 32-bit


STRICT = Checks(default="error")          # every rule stops, warn-by-default ones included


class Units:
    def __init__(self, checks=None, board="pi_zero"):
        self.memory = BusMemory()
        self.timing = Timing.for_board(board)
        self.checks = checks if checks is not None else Checks()
        self.bus = MemoryBus()
        self.vpm = Vpm(self.memory, self.timing, self.checks, bus=self.bus)
        self.tmu = Tmu(self.memory, self.timing, self.checks, bus=self.bus)

    def buffer(self, array):
        """Copy ``array`` into a new allocation; returns (bus address, uint8 view of it)."""
        data = np.ascontiguousarray(array)
        allocation = self.memory.allocate(max(data.nbytes, 1), 4096)
        allocation.memory[:data.nbytes] = data.view(np.uint8).reshape(-1)
        return allocation.bus_address, allocation.memory

    def vpm_rows(self, rows=64):
        return self.vpm.words.reshape(-1, 16)[:rows]


def generic_read(num, addr, size=32, horizontal=True, laned=False, stride=1):
    # NUM 23:20 (0 = 16), STRIDE 17:12 (0 = 64), HORIZ 11, LANED 10, SIZE 9:8, ADDR 7:0
    return ((num % 16) << 20 | (stride % 64) << 12 | int(horizontal) << 11 | int(laned) << 10
            | SIZE_CODE[size] << 8 | addr)


def generic_write(addr, size=32, horizontal=True, laned=False, stride=1):
    return generic_read(0, addr, size, horizontal, laned, stride)


def vdr(rows, rowlen, y, x=0, modew=0, mpitch=0, vpitch=1, vertical=False):
    # bit 31 = 1, MODEW 30:28, MPITCH 27:24, ROWLEN 23:20, NROWS 19:16, VPITCH 15:12, VERT 11,
    # ADDRXY 10:0 = {Y[6:0], X[3:0]}
    return (1 << 31 | modew << 28 | mpitch << 24 | (rowlen % 16) << 20 | (rows % 16) << 16
            | (vpitch % 16) << 12 | int(vertical) << 11 | y << 4 | x)


def vdr_pitch(pitch):
    return 0b1001 << 28 | pitch                   # MPITCHB 13:0 (facts §5.18)


def vdw(units, depth, y, x=0, modew=0, horizontal=True, laned=False):
    # bits 31:30 = 10, UNITS 29:23, DEPTH 22:16, LANED 15, HORIZ 14, VPMBASE 13:3, MODEW 2:0
    return (2 << 30 | (units % 128) << 23 | (depth % 128) << 16 | int(laned) << 15
            | int(horizontal) << 14 | (y << 4 | x) << 3 | modew)


def vdw_stride(stride, blockmode=False):
    return 3 << 30 | int(blockmode) << 16 | stride
