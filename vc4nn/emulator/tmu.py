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

from ..device import BUS_ADDRESS_MASK, BUS_ALIAS_MASK
from .bus import MemoryBus
from .cache import LruCache
from .checks import Rule
from .errors import MemoryFault
from .vpm_layout import scalar

_WORD = 4
_ZEROS = np.zeros(isa.SIMD_WIDTH, dtype=np.uint32)
_ZEROS.setflags(write=False)

# Dynamic checks of this unit (vc4nn/emulator/checks.py): rule -> Rule(default, catches, hardware).
CHECK_RULES = MappingProxyType({
    "tmu_texture_unsupported": Rule(
        "error", "a write to tmuN_t/r/b: a texture lookup",
        "texture lookups are not modelled; any result would be invented"),
    "tmu_fifo_overflow": Rule(
        "error", "more than tmu_fifo_limit (8) TMU requests outstanding on a QPU",
        "the guide's request FIFO holds 8 (facts §3): a ninth request is lost or stalls the "
        "QPU for good"),
    "tmu_fifo_unreliable": Rule(
        "warn", "more than tmu_fifo_depth (4) TMU requests outstanding on a QPU",
        "the errata found more than 4 direct requests unreliable (facts §5.13); the guide "
        "allows 8"),
    "ldtmu_empty": Rule(
        "error", "ldtmu with no request outstanding on that TMU",
        "the QPU waits for a result that never comes: it hangs (facts §2)"),
    "tmu_outstanding_at_end": Rule(
        "warn", "a QPU ended with TMU results it never read",
        "whether the results are dropped at thrend or met by the QPU's next program is not "
        "documented"),
    "tmu_stale_read": Rule(
        "error", "a TMU read served by a TMU cache or L2 line filled before a DMA store "
        "changed the word read",
        "the VDW writes memory behind the caches and does not invalidate them (facts §3): "
        "the Pi returns the old data"),
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
        units = len(isa.TMU_WRITE_BASE)
        self._caches = [[LruCache(timing.tmu_cache_bytes, timing.tmu_cache_line_bytes,
                                  timing.tmu_cache_ways) for _ in range(units)]
                        for _ in range(isa.NUM_SLICES)]
        self._free_at = [[0] * units for _ in range(isa.NUM_SLICES)]
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
        data = self._gather(addresses, qpu)
        ready = self._lookup(qpu, physical, addresses, now)
        fifo = self._fifos[qpu][physical]
        if fifo:   # results come back in order
            ready = max(ready, fifo[-1].ready)
        fifo.append(_Request(data, ready))
        return now

    def report_overflow(self, qpu, outstanding):
        """A request made with ``outstanding`` >= tmu_fifo_depth requests already in flight."""
        if outstanding >= self.timing.tmu_fifo_limit:
            self.checks.report("tmu_fifo_overflow",
                               f"TMU request with {outstanding} already outstanding; the request "
                               f"FIFO holds {self.timing.tmu_fifo_limit} (facts §3)", qpu)
        else:
            self.checks.report("tmu_fifo_unreliable",
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

    def _lookup(self, qpu, physical, addresses, now):
        """When the request is ready. A request whose lines are all in this TMU's cache is ready
        after tmu_hit_latency; otherwise when its last missing line has come through the L2 or
        over the bus. Each cached line keeps the write epoch its data dates from (MemoryBus), so
        a word the VDW wrote after that is read stale."""
        timing, slice_ = self.timing, qpu // isa.QPUS_PER_SLICE
        begin = max(now, self._free_at[slice_][physical])
        self._free_at[slice_][physical] = begin + timing.tmu_request_clocks
        cache = self._caches[slice_][physical]
        bus_addresses = addresses & np.uint32(BUS_ADDRESS_MASK)
        lines = bus_addresses // np.uint32(cache.line)
        ready = begin + timing.tmu_hit_latency
        # A line keeps the bus alias of the first element that reads it: the alias decides
        # whether the VideoCore L2 serves the fill (MemoryBus._fill).
        aliases = {}
        for line, address in zip(lines.tolist(), addresses.tolist()):
            aliases.setdefault(line, address & BUS_ALIAS_MASK)
        epochs = {}
        for line in sorted(aliases):
            epoch = cache.get(line)
            if epoch is None:
                arrives, epoch = self.bus.read_line(begin, line * cache.line | aliases[line],
                                                    cache.line, timing.tmu_miss_latency)
                cache.put(line, epoch)
                ready = max(ready, arrives)
            epochs[line] = epoch
        if self.bus.written:
            self._check_stale(qpu, bus_addresses, lines, epochs)
        return ready

    def _check_stale(self, qpu, bus_addresses, lines, epochs):
        written = self.bus.written
        stale = [address for address, line in zip(bus_addresses.tolist(), lines.tolist())
                 if written.get(address // _WORD, -1) > epochs[line]]
        if stale:
            self.checks.report("tmu_stale_read",
                               f"TMU read of {len(set(stale))} word(s) (e.g. bus address "
                               f"{min(stale):#010x}) from a cache line filled before a DMA store "
                               f"wrote them: the VDW does not invalidate the TMU cache or the "
                               f"L2, so a Pi returns the old data (facts §3)", qpu)
