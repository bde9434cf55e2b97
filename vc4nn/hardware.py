"""Hardware facts that both kernels (to choose a layout) and the cycle model (to time it) use.

Written once here; vc4nn/emulator/timing.py quotes them in its parameter table.
"""

# The TMU cache: 4 KB per TMU, 64-byte lines, direct-mapped (facts §4 (ADD); the errata's cache
# table gives no associativity and one read 4 KB away evicts a line).
TMU_CACHE_BYTES = 4096
TMU_CACHE_LINE_BYTES = 64
TMU_CACHE_WAYS = 1
# QPUs whose TMU0 requests share one TMU (and its cache): each slice of 4 QPUs has two TMUs, and
# QPUs 2-3 have TMU0 and TMU1 swapped by default, so QPUs 0-1 share one, QPUs 2-3 the other
# (facts §4; vc4nn/emulator/tmu.py models the same).
QPUS_PER_TMU = 2

# Mailbox mem_alloc flags, bits 3:2 (facts §3), and the bus alias (address bits 31:30) of the
# memory they give: the alias selects how the VideoCore's own L2 cache (between the whole GPU and
# SDRAM, separate from the V3D's L2) treats an access. Normal: alias 0, cached (not for the ARM);
# direct: alias 3 (0xC), uncached; coherent: alias 2 (0x8), looked up in the VideoCore L2 but
# not allocated in it; L1 non-allocating: alias 1 (0x4), allocated in the VideoCore L2.
MEM_FLAG_NORMAL = 0 << 2
MEM_FLAG_DIRECT = 1 << 2
MEM_FLAG_COHERENT = 2 << 2
MEM_FLAG_L1_NONALLOCATING = MEM_FLAG_DIRECT | MEM_FLAG_COHERENT
MEM_FLAG_ALIAS_MASK = 3 << 2
BUS_ALIAS_SHIFT = 30
_ALIAS_OF_FLAGS = {MEM_FLAG_NORMAL: 0, MEM_FLAG_DIRECT: 3, MEM_FLAG_COHERENT: 2,
                   MEM_FLAG_L1_NONALLOCATING: 1}
VC_L2_ALLOCATING_ALIASES = frozenset((0, 1))
VC_L2_CACHED_ALIASES = frozenset((0, 1, 2))


def bus_alias(flags):
    """Bus alias (address bits 31:30) of memory allocated with mailbox ``flags``."""
    return _ALIAS_OF_FLAGS[flags & MEM_FLAG_ALIAS_MASK]


# Which flags GPU memory is allocated with by default, per SoC (vc4nn.pi and the emulator alike).
# BCM2835 (Pi 1, Zero): the ARM reaches SDRAM through the VideoCore's L2 cache, so the GPU may
# cache in L2 too and both sides stay coherent: L1-non-allocating (0xC), as hello_fft does.
# BCM2836/7 (Pi 2, 3): the ARM bypasses the VideoCore L2 and cannot see it, so GPU memory must
# be uncached on the GPU side as well: direct (0x4). See docs/hardware-choices.md.
MEM_FLAGS_BY_PROCESSOR = {
    "BCM2835": MEM_FLAG_L1_NONALLOCATING,
    "BCM2836": MEM_FLAG_DIRECT,
    "BCM2837": MEM_FLAG_DIRECT,
}
