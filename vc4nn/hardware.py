"""Hardware facts that both kernels (to choose a layout) and the cycle model (to time it) use.

Written once here; vc4nn/emulator/timing.py quotes them in its parameter table.
"""

# The TMU cache: 4 KB per TMU, 64-byte lines, direct-mapped (facts §4 (ADD); the errata's cache
# table gives no associativity and one read 4 KB away evicts a line).
TMU_CACHE_BYTES = 4096
TMU_CACHE_LINE_BYTES = 64
TMU_CACHE_WAYS = 1
