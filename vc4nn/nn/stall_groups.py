"""What the QPUs' time went to (a run's stall causes, emulator.qpu.STALL_CAUSES, and "idle": a QPU
done before the last), grouped into what bounds a layer: the groups of bench-layers' "bound"
column, the order of its ``--stalls`` columns, and the causes a profile counts as memory.
"""

BOUND_GROUPS = (("issue", ("issue",)), ("memory", ("dma", "vpm", "uniform")),
                ("icache", ("icache",)), ("TMU", ("tmu",)),
                ("semaphores", ("semaphore", "mutex")), ("SFU", ("sfu",)), ("imbalance", ("idle",)))
STALL_COLUMNS = tuple(cause for _group, causes in BOUND_GROUPS for cause in causes)
# A profile's memory bound: waits for data from memory, as instruction fetches (through the L2)
MEMORY_GROUPS = ("memory", "icache", "TMU")
MEMORY_STALLS = tuple(cause for group, causes in BOUND_GROUPS if group in MEMORY_GROUPS
                      for cause in causes)
