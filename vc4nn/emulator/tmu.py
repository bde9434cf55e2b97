"""The TMUs as general memory lookup units (facts §3): one 32-bit word per element.

Each slice of 4 QPUs has two TMUs. QPUs 2 and 3 of a slice have TMU0 and TMU1 swapped unless
they wrote tmu_noswap; the swap applies to the tmuN_* writes and to the ldtmuN signals alike, so
it changes which physical TMU (and cache) serves a request, never which results a program gets.

A request reads memory when it is written (the functional effect); its result is ready after the
cache-dependent latency of the cycle model and is delivered in order, per TMU, by ldtmu.
"""

import collections
from types import MappingProxyType

import numpy as np

from asm import isa

from ..device import BUS_ADDRESS_MASK
from .cache import LruCache
from .errors import MemoryFault
from .vpm import MemoryBus, scalar

_WORD = 4
_ZEROS = np.zeros(isa.SIMD_WIDTH, dtype=np.uint32)
_ZEROS.setflags(write=False)

# Dynamic checks of this unit (vc4nn/emulator/checks.py): rule -> what it catches.
CHECK_RULES = MappingProxyType({
    "tmu_texture_unsupported": "a write to tmuN_t/r/b: a texture lookup, which is not modelled",
    "tmu_fifo_overflow": "more TMU requests outstanding than tmu_fifo_depth (facts §5.13)",
    "ldtmu_empty": "ldtmu with no request outstanding on that TMU: hangs on a Pi (facts §2)",
    "tmu_outstanding_at_end": "a QPU ended with TMU results it never read",
    "tmu_stale_read": "a TMU read of memory a DMA store wrote earlier in the launch: the VDW "
                      "does not invalidate the TMU cache (facts §3)",
})


class _Request:
    __slots__ = ("values", "ready")

    def __init__(self, values, ready):
        self.values, self.ready = values, ready


class Tmu:
    def __init__(self, memory, timing, checks, bus=None):
        self.memory, self.timing, self.checks = memory, timing, checks
        self.bus = bus if bus is not None else MemoryBus(timing)
        self.bus.use(timing)        # the bus's L2 runs with this machine's parameters
        slices = isa.NUM_QPUS // isa.QPUS_PER_SLICE
        units = len(isa.TMU_WRITE_BASE)
        self._caches = [[LruCache(timing.tmu_cache_bytes, timing.tmu_cache_line_bytes,
                                  timing.tmu_cache_ways) for _ in range(units)]
                        for _ in range(slices)]
        self._free_at = [[0] * units for _ in range(slices)]
        self._noswap = [False] * isa.NUM_QPUS
        self._fifos = [[collections.deque() for _ in range(units)] for _ in range(isa.NUM_QPUS)]

    def physical_unit(self, qpu, unit):
        """The TMU that serves ``unit`` as the program names it (0 or 1) for this QPU."""
        swapped = qpu % isa.QPUS_PER_SLICE >= isa.QPUS_PER_SLICE // 2 and not self._noswap[qpu]
        return unit ^ int(swapped)

    def set_noswap(self, qpu, value):
        self._noswap[qpu] = scalar(value) != 0

    def reset(self, qpu):
        self._noswap[qpu] = False
        for fifo in self._fifos[qpu]:
            fifo.clear()

    def write(self, qpu, unit, coord, values, now):
        if coord != "s":
            self.checks.report("tmu_texture_unsupported",
                               f"write to tmu{unit}_{coord}: a request with t/r/b coordinates is a "
                               f"texture lookup, which the emulator does not model (only direct "
                               f"32-bit lookups through tmu{unit}_s)", qpu)
            return now
        outstanding = sum(len(fifo) for fifo in self._fifos[qpu])
        if outstanding >= self.timing.tmu_fifo_depth:
            self.report_overflow(qpu, outstanding)
        physical = self.physical_unit(qpu, unit)
        addresses = np.asarray(values, dtype=np.uint32) & np.uint32(~(_WORD - 1) & 0xFFFFFFFF)
        self._check_stale(qpu, addresses)
        data = self._gather(addresses, qpu)
        ready = self._ready_time(qpu // isa.QPUS_PER_SLICE, physical, addresses, now)
        fifo = self._fifos[qpu][physical]
        if fifo:   # results come back in order
            ready = max(ready, fifo[-1].ready)
        fifo.append(_Request(data, ready))
        return now

    def report_overflow(self, qpu, outstanding):
        self.checks.report("tmu_fifo_overflow",
                           f"TMU request with {outstanding} already outstanding; more than "
                           f"{self.timing.tmu_fifo_depth} is unreliable (facts §5.13)", qpu)

    def load(self, qpu, signal_unit, now):
        """ldtmu0/ldtmu1: the oldest result of that TMU for r4, and when it is there."""
        fifo = self._fifos[qpu][self.physical_unit(qpu, signal_unit)]
        if not fifo:
            self.checks.report("ldtmu_empty", f"ldtmu{signal_unit} with no TMU{signal_unit} "
                               f"request outstanding (hangs on a Pi)", qpu)
            return _ZEROS.copy(), now
        request = fifo.popleft()
        return request.values, max(now, request.ready)

    def finish(self, qpus):
        problems = [(qpu, sum(len(f) for f in self._fifos[qpu])) for qpu in qpus]
        for qpu in qpus:
            self.reset(qpu)
        for qpu, count in problems:
            if count:
                self.checks.report("tmu_outstanding_at_end", f"the program ended with {count} TMU "
                                   f"results not read by ldtmu", qpu)

    # -- helpers --------------------------------------------------------------------------------
    def _gather(self, addresses, qpu):
        bus = addresses & np.uint32(BUS_ADDRESS_MASK)
        low, high = int(bus.min()), int(bus.max())
        try:
            mem, offset = self.memory.locate(low, high - low + _WORD, "tmu", qpu)
        except MemoryFault:
            # The span leaves one allocation: look each element up, so a fault names its address.
            return np.array([int(self.memory.read_words(int(a), 1, "tmu", qpu)[0])
                             for a in addresses], dtype=np.uint32)
        start = offset + (bus.astype(np.int64) - low)
        return mem[start[:, None] + np.arange(_WORD)].view("<u4").reshape(-1).astype(np.uint32)

    def _ready_time(self, slice_, physical, addresses, now):
        """A request whose lines are all in this TMU's cache is ready after tmu_hit_latency;
        otherwise when its last missing line has come through the L2 or over the bus."""
        timing = self.timing
        begin = max(now, self._free_at[slice_][physical])
        self._free_at[slice_][physical] = begin + timing.tmu_request_clocks
        cache = self._caches[slice_][physical]
        lines = np.unique((addresses & np.uint32(BUS_ADDRESS_MASK)) // np.uint32(cache.line))
        ready = begin + timing.tmu_hit_latency
        for line in lines.tolist():
            if not cache.touch(line):
                ready = max(ready, self.bus.read_line(begin, line * cache.line, cache.line,
                                                      timing.tmu_miss_latency))
        return ready

    def _check_stale(self, qpu, addresses):
        written = self.bus.vdw_words
        if not written:
            return
        words = ((addresses & np.uint32(BUS_ADDRESS_MASK)) // np.uint32(_WORD)).tolist()
        stale = written.intersection(words)
        if stale:
            self.checks.report("tmu_stale_read",
                               f"TMU read of {len(stale)} word(s) (e.g. bus address "
                               f"{min(stale) * _WORD:#010x}) written by a DMA store earlier in "
                               f"this launch: the VDW does not invalidate the TMU cache, so a "
                               f"Pi may return the old data (facts §3)", qpu)
