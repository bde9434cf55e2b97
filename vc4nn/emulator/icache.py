"""The QPU instruction caches: one per slice, shared by the slice's QPUs, filled through the V3D
L2 (the C core has the same in csrc/icache.c; docs/cycle-model.md "Instruction cache").

Timing only, as the other caches of the model: the emulator decodes the instruction from memory
whatever the cache holds. A QPU asks for a line when its PC enters one it was not running from
(``Qpu.step``); each line keeps the clock at which its fill arrives, so a QPU of the same slice
that asks for a line still on its way waits for that fill instead of making another.
"""

from asm import isa

from ..device import BUS_ADDRESS_MASK, BUS_ALIAS_MASK
from .cache import LruCache


class InstructionCaches:
    """The slices' instruction caches (timing.icache_*) in front of ``bus`` (its L2)."""

    def __init__(self, timing, bus):
        self.timing, self.bus = timing, bus
        self.line = timing.icache_line_bytes
        self.miss_latency = timing.icache_miss_latency
        self.prefetch = timing.icache_prefetch_lines
        self.caches = [LruCache(timing.icache_bytes, self.line, timing.icache_ways)
                       for _ in range(isa.NUM_SLICES)]
        self.hits = self.misses = 0           # line look-ups of the launch

    def line_number(self, address):
        """The number of the cache line that holds bus address ``address`` (any alias)."""
        return (address & BUS_ADDRESS_MASK) // self.line

    def set_of(self, line_number):
        """The set of a slice's cache that holds line ``line_number``."""
        return self.caches[0].set_of(line_number)

    def fetch(self, qpu, now, pc):
        """QPU ``qpu`` at ``now`` runs into the line of ``pc``: the clock at which the line is
        in its slice's cache (``now`` or earlier when it is there already)."""
        cache = self.caches[qpu // isa.QPUS_PER_SLICE]
        number = self.line_number(pc)
        alias = pc & BUS_ALIAS_MASK
        arrives = cache.get(number)
        if arrives is None:
            self.misses += 1
            arrives = self._fill(cache, number, alias, now)
        else:
            self.hits += 1
        for ahead in range(number + 1, number + 1 + self.prefetch):
            if cache.peek(ahead) is None:
                self._fill(cache, ahead, alias, now)
        return arrives

    def _fill(self, cache, number, alias, now):
        """Fetch line ``number`` into ``cache`` through the L2: the clock at which it arrives."""
        arrives = self.bus.read_line(now, number * self.line | alias, self.line,
                                     self.miss_latency)[0]
        cache.put(number, arrives)
        return arrives
