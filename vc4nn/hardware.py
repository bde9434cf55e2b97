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
