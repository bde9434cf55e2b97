"""The bus address space: the device's allocations, nothing else.

Bits 31:30 of a bus address select a cache alias and are ignored for addressing (facts §3).
An access that is not wholly inside one live allocation raises MemoryFault naming who did it.
"""

import bisect

import numpy as np

from ..device import BUS_ADDRESS_MASK, Allocation
from ..hardware import BUS_ALIAS_SHIFT, MEM_FLAG_DIRECT, bus_alias
from .errors import MemoryFault

# Where the emulator places its allocations in the bus address space. A nonzero base keeps
# address 0 (and small offsets from a forgotten pointer) outside memory, so they fault.
ARENA_BASE = 0x10000000
ARENA_LIMIT = 0x3F000000


class BusMemory:
    def __init__(self):
        self._starts = []          # sorted allocation start addresses (alias bits cleared)
        self._blocks = {}          # start -> Allocation
        self._next = ARENA_BASE

    def allocate(self, nbytes, align, flags=MEM_FLAG_DIRECT):
        """A block at a bus address whose alias bits follow the mailbox ``flags`` (as the
        firmware's mem_lock gives it, vc4nn.hardware.bus_alias)."""
        start = (self._next + align - 1) & ~(align - 1)
        if start + nbytes > ARENA_LIMIT:
            raise MemoryError(f"emulated GPU memory exhausted asking for {nbytes} bytes")
        # Leave a guard gap after each block so that running off its end faults.
        self._next = start + nbytes + 4096
        alias = bus_alias(flags) << BUS_ALIAS_SHIFT
        allocation = Allocation(bus_address=start | alias, size=nbytes,
                                memory=np.zeros(nbytes, dtype=np.uint8))
        bisect.insort(self._starts, start)
        self._blocks[start] = allocation
        return allocation

    def release(self, allocation):
        start = allocation.bus_address & BUS_ADDRESS_MASK
        if self._blocks.pop(start, None) is not None:
            self._starts.remove(start)

    def locate(self, address, nbytes, unit, qpu=None, pc=None):
        """(uint8 array of the allocation, offset) for [address, address + nbytes)."""
        addr = int(address) & BUS_ADDRESS_MASK
        i = bisect.bisect_right(self._starts, addr) - 1
        if i >= 0:
            start = self._starts[i]
            block = self._blocks[start]
            offset = addr - start
            if offset + nbytes <= block.size:
                return block.memory, offset
        raise MemoryFault(f"{unit} access of {nbytes} bytes at bus address {int(address):#010x} "
                          f"is outside every allocation", qpu=qpu, pc=pc, unit=unit,
                          address=int(address))

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
