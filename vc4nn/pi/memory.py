"""GPU memory from the firmware: allocate, lock (-> bus address), map for the ARM, and give back.

The ARM sees a block at its bus address with the alias bits 31:30 cleared (facts §3), through
/dev/mem opened O_SYNC so the ARM side of the mapping is uncached. Every block handed out is
remembered until released, so ``release_all`` can always give everything back.
"""

import bisect
import dataclasses

import numpy as np

from ..device import BUS_ADDRESS_MASK, Allocation
from . import system
from .errors import MailboxError, PiOutOfMemory


@dataclasses.dataclass
class GpuBlock:
    handle: int
    bus_address: int
    size: int
    mapping: object


class GpuMemory:
    def __init__(self, mailbox, os_, mem_fd, mem_flags):
        self._mailbox, self._os, self._mem_fd, self.mem_flags = mailbox, os_, mem_fd, mem_flags
        self._blocks = {}          # handle -> GpuBlock, every block not yet released
        self._by_start = self._starts = None    # read_bytes' index, made when first needed

    def allocate(self, nbytes, align, flags=None):
        """``flags``: mem_alloc flags; None uses the board's (``mem_flags``)."""
        flags = self.mem_flags if flags is None else flags
        handle = self._mailbox.call("mem_alloc", nbytes, align, flags)[0]
        if handle == 0:
            raise PiOutOfMemory(f"the firmware has no {nbytes} bytes of GPU memory left "
                                f"({self.allocated_bytes()} bytes held by this process)",
                                fix=system.gpu_mem_fix(self._os))
        block = self._blocks[handle] = GpuBlock(handle, 0, nbytes, None)
        try:
            block.bus_address = self._mailbox.call("mem_lock", handle)[0]
            if block.bus_address == 0:
                raise MailboxError("mem_lock", f"the firmware would not lock handle {handle}")
            physical = block.bus_address & BUS_ADDRESS_MASK
            page = self._os.page_size()
            start = physical - physical % page
            length = -(-(physical - start + nbytes) // page) * page
            block.mapping = self._os.mmap(self._mem_fd, length, start)
        except BaseException:
            self.release(block)
            raise
        memory = np.frombuffer(block.mapping, dtype=np.uint8, count=nbytes, offset=physical - start)
        self._by_start = None
        return Allocation(bus_address=block.bus_address, size=nbytes, memory=memory, handle=block)

    def release(self, block):
        """Detach the ARM mapping from GPU memory, then unlock and free the block. The mapping
        itself goes with its last view (docs/pi-backend.md)."""
        if self._blocks.pop(block.handle, None) is None:
            return
        self._by_start = None
        mapping, block.mapping = block.mapping, None
        try:
            if mapping is not None:
                self._os.detach_mapping(mapping)
            if block.bus_address:
                self._mailbox.call("mem_unlock", block.handle)
        finally:
            self._mailbox.call("mem_release", block.handle)

    def read_bytes(self, bus_address, nbytes):
        """The ``nbytes`` at ``bus_address``, which must lie in a block of this process (None
        if they do not)."""
        physical = bus_address & BUS_ADDRESS_MASK
        if self._by_start is None:          # blocks by physical start, for a bisection
            self._by_start = sorted((b.bus_address & BUS_ADDRESS_MASK, b.handle, b)
                                    for b in self._blocks.values() if b.mapping is not None)
            self._starts = [start for start, _, _ in self._by_start]
        index = bisect.bisect_right(self._starts, physical) - 1
        if index < 0:
            return None
        start, _, block = self._by_start[index]
        if physical + nbytes > start + block.size:
            return None
        offset = physical - start + start % self._os.page_size()
        return bytes(block.mapping[offset:offset + nbytes])

    def release_all(self):
        for block in list(self._blocks.values()):
            self.release(block)

    def allocated_bytes(self):
        return sum(block.size for block in self._blocks.values())
