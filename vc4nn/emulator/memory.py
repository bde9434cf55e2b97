"""The bus address space: the device's allocations, nothing else.

Bits 31:30 of a bus address select a cache alias and are ignored for addressing (facts §3).
An access that is not wholly inside one live allocation raises MemoryFault naming who did it.

Every allocation is followed by an unmapped guard gap of ``guard_bytes`` (default 4 KiB), so a
pointer that runs up to that far past the end of a buffer faults (and the fault names the
buffer it ran off) instead of silently writing the next buffer. Freed address space goes back to
a free list whose neighbouring ranges coalesce, so a long-running program that allocates and
frees does not run out of addresses.
"""

import bisect
import numbers

import numpy as np

from ..device import BUS_ADDRESS_MASK, Allocation
from ..errors import DeviceError, DeviceMemoryError
from ..hardware import BUS_ALIAS_SHIFT, MEM_FLAG_DIRECT, bus_alias
from .errors import MemoryFault

# Where the emulator places its allocations in the bus address space. A nonzero base keeps
# address 0 (and small offsets from a forgotten pointer) outside memory, so they fault.
ARENA_BASE = 0x10000000
ARENA_LIMIT = 0x3F000000
DEFAULT_GUARD_BYTES = 4096


class BusMemory:
    def __init__(self, guard_bytes=DEFAULT_GUARD_BYTES):
        if isinstance(guard_bytes, bool) or not isinstance(guard_bytes, numbers.Integral) \
                or not 0 <= guard_bytes <= (ARENA_LIMIT - ARENA_BASE) // 2:
            raise DeviceError(f"guard_bytes must be an int 0..{(ARENA_LIMIT - ARENA_BASE) // 2}, "
                              f"got {guard_bytes!r}")
        self.guard_bytes = int(guard_bytes)
        self._starts = []          # sorted allocation start addresses (alias bits cleared)
        self._blocks = {}          # start -> Allocation
        self._free = [(ARENA_BASE, ARENA_LIMIT)]    # sorted, disjoint, non-adjacent [start, end)

    def allocate(self, nbytes, align, flags=MEM_FLAG_DIRECT):
        """First fit: the lowest free range that holds ``nbytes`` at ``align`` plus the guard,
        at a bus address whose alias bits follow the mailbox ``flags`` (as the firmware's
        mem_lock gives it, vc4nn.hardware.bus_alias)."""
        span = nbytes + self.guard_bytes
        for i, (free_start, free_end) in enumerate(self._free):
            start = (free_start + align - 1) & ~(align - 1)
            if start + span <= free_end:
                break
        else:
            raise DeviceMemoryError(f"alloc: emulated GPU memory exhausted asking for {nbytes} "
                                    f"bytes aligned to {align} ({len(self._blocks)} "
                                    f"allocations live)")
        pieces = [(a, b) for a, b in ((free_start, start), (start + span, free_end)) if a < b]
        self._free[i:i + 1] = pieces
        alias = bus_alias(flags) << BUS_ALIAS_SHIFT
        allocation = Allocation(bus_address=start | alias, size=nbytes,
                                memory=np.zeros(nbytes, dtype=np.uint8))
        bisect.insort(self._starts, start)
        self._blocks[start] = allocation
        return allocation

    def release(self, allocation):
        start = allocation.bus_address & BUS_ADDRESS_MASK
        if self._blocks.pop(start, None) is None:
            return
        self._starts.remove(start)
        end = start + allocation.size + self.guard_bytes
        i = bisect.bisect_left(self._free, (start, start))
        # Merge with the free range just before and just after, if they touch.
        if i > 0 and self._free[i - 1][1] == start:
            i -= 1
            start = self._free.pop(i)[0]
        if i < len(self._free) and self._free[i][0] == end:
            end = self._free.pop(i)[1]
        self._free.insert(i, (start, end))

    @property
    def free_ranges(self):
        """The free address ranges [(start, end)], lowest first (for tests and diagnostics)."""
        return list(self._free)

    def locate(self, address, nbytes, unit, qpu=None, pc=None):
        """(uint8 array of the allocation, offset) for [address, address + nbytes)."""
        addr = int(address) & BUS_ADDRESS_MASK
        i = bisect.bisect_right(self._starts, addr) - 1
        where = "is outside every allocation"
        if i >= 0:
            start = self._starts[i]
            block = self._blocks[start]
            offset = addr - start
            if offset + nbytes <= block.size:
                return block.memory, offset
            past = offset + nbytes - block.size
            if offset < block.size + self.guard_bytes:
                where = (f"runs {past} bytes past the end of the {block.size}-byte buffer at "
                         f"{block.bus_address:#010x}{_label(block)}")
        raise MemoryFault(f"{unit} access of {nbytes} bytes at bus address {int(address):#010x} "
                          f"{where}", qpu=qpu, pc=pc, unit=unit, address=int(address))

    def read_words(self, address, count, unit, qpu=None, pc=None):
        """``count`` little-endian 32-bit words starting at ``address`` (copy)."""
        mem, offset = self.locate(address, 4 * count, unit, qpu, pc)
        return mem[offset:offset + 4 * count].view("<u4").copy()

    def write_words(self, address, words, unit, qpu=None, pc=None):
        data = np.ascontiguousarray(words, dtype="<u4").view(np.uint8)
        mem, offset = self.locate(address, data.size, unit, qpu, pc)
        mem[offset:offset + data.size] = data

    def read_bytes(self, address, nbytes, unit, qpu=None, pc=None):
        mem, offset = self.locate(address, nbytes, unit, qpu, pc)
        return mem[offset:offset + nbytes].copy()

    def write_bytes(self, address, data, unit, qpu=None, pc=None):
        data = np.asarray(data, dtype=np.uint8)
        mem, offset = self.locate(address, data.size, unit, qpu, pc)
        mem[offset:offset + data.size] = data


def _label(block):
    label = getattr(block, "label", None)
    return f" ({label})" if label else ""
