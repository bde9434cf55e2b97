"""The memory path the DMA engines, the TMUs, the uniform and the instruction fetches share,
with the V3D L2 and the VideoCore L2 behind it (the C core has the same in csrc/bus.c)."""

import bisect

from ..device import BUS_ADDRESS_MASK, BUS_ALIAS_MASK
from ..hardware import BUS_ALIAS_SHIFT, VC_L2_ALLOCATING_ALIASES, VC_L2_CACHED_ALIASES
from .cache import LruCache
from .timing import Timing
from .vpm_layout import WORD_BYTES


class MemoryBus:
    """The memory path the DMA engines, the TMUs, the uniform and the instruction fetches share,
    with the V3D L2.

    The bus carries one transfer at a time: a transfer takes the first idle stretch at or after
    the clock it is asked for, so transfers of all 12 QPUs queue behind each other (contention).
    The QPUs are stepped one at a time, and one that waited inside a unit (a DMA behind its own
    previous one) books its slot at that later clock before the others have asked for theirs;
    keeping the idle stretches (not just the end of the last booking) lets their earlier
    transfers still use the time before it.

    Writes behind the caches' backs (facts §3: the VDW does not invalidate the TMU, uniform or
    L2 caches) are counted: ``write_epoch`` goes up by one per DMA store, and ``written`` maps
    each bus word address the store wrote to that epoch. Every cached line remembers the epoch
    at which its data was read from memory, so a read served by a line filled before the last
    write to the word it reads is stale (the TMU's ``tmu_stale_read`` check).

    The L2 (timing.l2_cache_*) is shared by all slices and sits in front of the bus for TMU,
    uniform and instruction line fills (``read_line``): a line another QPU has read recently costs no bus time,
    and a line whose fill is still under way is waited for rather than read twice. The DMA
    engines use the bus directly (``reserve``): the VDW writes memory directly (maazl/vc4asm#5,
    after the guide's block diagram, p. 13), and the VDR is assumed to do the same.

    The parameters come from ``timing`` (or the first unit that calls ``use``), so that a bus
    made without one still runs at its machine's board clock.
    """

    # Bookings that ended this many clocks before a new request are forgotten: QPUs ask within
    # a few instructions of each other's clocks (the scheduler runs the one that is behind).
    HISTORY_CLOCKS = 4096
    HISTORY_BOOKINGS = 64           # ... looked for once more bookings than this are kept

    def __init__(self, timing=None):
        self._starts, self._ends = [], []     # booked stretches [start, end), sorted, disjoint
        self.write_epoch = 0
        self.written = {}             # bus word address -> epoch of the DMA store that wrote it
        self.busy_clocks = 0          # statistics of the launch: bus occupancy, L2 hits/misses
        self.l2_hits = self.l2_misses = 0
        self.vc_l2_hits = 0           # V3D L2 misses served by the VideoCore L2
        self.timing = None
        self.use(timing if timing is not None else Timing())

    def use(self, timing):
        """Take the cycle model's parameters (board clock, L2 geometry and latency)."""
        if timing is self.timing:
            return
        self.timing = timing
        self.l2 = LruCache(timing.l2_cache_bytes, timing.l2_cache_line_bytes,
                           timing.l2_cache_ways)
        self._l2_fill = timing.line_fill_clocks(timing.l2_cache_line_bytes)
        self.vc_l2 = LruCache(timing.vc_l2_bytes, timing.vc_l2_line_bytes, timing.vc_l2_ways)
        self._vc_l2_fill = timing.vc_l2_fill_clocks(timing.l2_cache_line_bytes)

    def reserve(self, now, clocks):
        """Occupy the bus for ``clocks`` in the first idle stretch at or after ``now`` that is
        long enough; returns the start."""
        starts, ends = self._starts, self._ends
        if len(starts) > self.HISTORY_BOOKINGS:
            del_to = bisect.bisect_right(ends, now - self.HISTORY_CLOCKS)
            del starts[:del_to], ends[:del_to]
        i = bisect.bisect_right(ends, now)
        begin = now
        while i < len(starts) and starts[i] < begin + clocks:
            begin = max(begin, ends[i])
            i += 1
        end = begin + clocks
        self.busy_clocks += clocks
        if i and ends[i - 1] == begin:          # join the booking before
            i -= 1
            ends[i] = end
        else:
            starts.insert(i, begin)
            ends.insert(i, end)
        if i + 1 < len(starts) and starts[i + 1] == end:     # and the one after
            ends[i] = ends.pop(i + 1)
            del starts[i + 1]
        return begin

    def transfer(self, now, clocks):
        """Occupy the bus for ``clocks`` from ``now`` or when it frees; returns the end."""
        return self.reserve(now, clocks) + clocks

    def record_write(self, address, nbytes):
        """A DMA store wrote ``nbytes`` at bus ``address``, behind the caches."""
        self.write_epoch += 1
        start = (address & BUS_ADDRESS_MASK) // WORD_BYTES
        end = ((address & BUS_ADDRESS_MASK) + nbytes - 1) // WORD_BYTES + 1
        self.written.update(dict.fromkeys(range(start, end), self.write_epoch))

    def read_line(self, now, address, nbytes, miss_latency):
        """A TMU, uniform or instruction cache asks at ``now`` for its ``nbytes`` line at bus ``address``:
        (the clock at which the line is there, the write epoch its data dates from).

        Per L2 line: a hit arrives after ``l2_hit_latency``, or when the fill under way brings
        it, with the data the L2 read when it was filled; a miss takes its turn on the bus and
        arrives ``miss_latency`` after the request, or when its bus slot ends if the queue made
        it later, and is kept in the L2.
        """
        line = self.l2.line
        first = (address & BUS_ADDRESS_MASK) // line
        last = ((address & BUS_ADDRESS_MASK) + nbytes - 1) // line
        ready, epoch = now, self.write_epoch
        for number in range(first, last + 1):
            cached = self.l2.get(number)
            if cached is not None:
                self.l2_hits += 1
                arrives, filled = cached
                arrives = max(arrives, now + self.timing.l2_hit_latency)
                epoch = min(epoch, filled)
            else:
                self.l2_misses += 1
                arrives = self._fill(now, number * line, address >> BUS_ALIAS_SHIFT,
                                     miss_latency)
                self.l2.put(number, (arrives, self.write_epoch))
            ready = max(ready, arrives)
        return ready, epoch

    def _fill(self, now, bus_byte, alias, miss_latency):
        """A V3D L2 line fill asked at ``now``: from the VideoCore L2 when the memory's bus
        ``alias`` is cached there and the line is in it, else from SDRAM (kept in the
        VideoCore L2 for the allocating aliases). The clock at which the line arrives."""
        if alias in VC_L2_CACHED_ALIASES and self.vc_l2.ways:
            vc_line = bus_byte // self.vc_l2.line
            if self.vc_l2.get(vc_line) is not None:
                self.vc_l2_hits += 1
                end = self.transfer(now, self._vc_l2_fill)
                return max(now + self.timing.vc_l2_hit_latency, end)
            if alias in VC_L2_ALLOCATING_ALIASES:
                self.vc_l2.put(vc_line, True)
        end = self.transfer(now, self._l2_fill)
        return max(now + miss_latency, end)

    def uniform_line(self, now, address):
        """The uniform stream reaches a new line at bus ``address``: when it is there (for the
        QPU core, which keeps the line it has; see docs/cycle-model.md)."""
        timing = self.timing
        size = timing.uniform_line_bytes
        start = (address & BUS_ADDRESS_MASK) // size * size | (address & BUS_ALIAS_MASK)
        return self.read_line(now, start, size, timing.uniform_miss_latency)[0]
