"""A panel's chunks: the chunk loop, the chunk that shares its body, the last chunks one by one.

The chunks in the middle of a panel are one loop (its body chunk_period chunks: a boundary and
the k steps, panel_barrier and panel_kloop). The chunks after it differ: their boundaries take
B's addresses from the uniform stream (panel_gather_b.stepped) and their k stop asking for
gathers of A. Generated one by one they cost no instructions but code, which every panel
fetches again through the instruction cache (4 KB per slice: the chunk loop of an 8-vector
panel is ~1.5 KB, a chunk ~1.4 KB more; docs/kernels.md "a panel's code within the
instruction cache"). So the first of them runs the loop's body where it
can (``panel_kloop.shared_chunk``): its own boundary, then a branch into the body past the
loop's boundary. The loop then counts up by 2 from 1 - 2 x its chunks, branching back while
the count is negative: it ends at 1, and the shared chunk, started at -2, ends at 0, whose
flags tell the two apart (and, "quiet", hold the body's last requests of A back). The shared
chunk's boundary is the next chunk's too (neither steps B's addresses): one copy serves both.
"""

from asm import null, r0

from .panel_barrier import boundary, buffer_in_r3, first_buffer
from .panel_gather_b import carries_role_flags, stepped
from .panel_kloop import ChunkLoop, k_kinds, k_step, quiet_gathers, shared_chunk, \
    steady_chunks, steady_kinds
from . import panel_park as parking
from .panel_registers import registers


def chunks(a, plan, variant, acc, masters, leaves=False, drain=False, leaves_behind=False):
    """Every chunk of a panel, ending with its last multiply-add and the gathers of A it asked
    for again waited for. ``leaves``: code only leaves run (panel_barrier.leaf_boundary);
    ``drain``: the body stores the rows the pass before parked (panel_park);
    ``leaves_behind``: see sgemm_panel.one_pass."""
    regs = registers(plan)[0]
    kinds, kc, period = k_kinds(plan), plan.chunk_rows, plan.chunk_period
    chunk_kinds = [kinds[c * kc:(c + 1) * kc] for c in range(plan.chunks)]
    body, steady, shared = steady_kinds(plan), steady_chunks(plan), shared_chunk(plan)
    if drain:
        parking.start_drains(a, plan)
    if shared:
        loop = ChunkLoop("chunk", "all_ns", -2, shared == "quiet")
        a.ldi(regs["chunks_left"], 1 - 2 * steady)
    elif steady:
        loop = ChunkLoop("chunk")
        a.ldi(regs["chunks_left"], steady // period)
    if buffer_in_r3(plan, leaves):
        first_buffer(a, plan)
    role_flags = carries_role_flags(plan) and not leaves
    if steady and role_flags:   # (the loop's branch back sets them in its delay slots)
        a.mov(null, regs["role"], sf=True)
    if steady:
        a.label("chunk")
        for part in range(period):
            boundary(a, plan, variant, masters, True, leaves, leaves_behind,
                     role_flags and part == 0)
            if part == 0:
                a.label("body")
            for row in range(kc):
                k_step(a, plan, acc, body[part * kc + row], row, row + 1 == kc,
                       loop=loop if part + 1 == period else None)
                if drain and row < parking.slots_per_chunk(plan):
                    parking.drain_slot(a, plan, part * parking.slots_per_chunk(plan) + row)
                    if part + 1 == period and row + 1 == parking.slots_per_chunk(plan):
                        parking.shift(a, plan)
    merged = None
    if shared:
        # The shared chunk and the one after it have the same boundary (neither steps B's
        # addresses): one copy of it runs before both, and the count says which follows.
        with a.scope():
            boundary(a, plan, variant, masters, stepped(plan, steady), leaves, leaves_behind)
        a.mov(null, regs["chunks_left"], sf=True)       # 1: the loop's end; 0: the shared's
        a.branch("body", cond="all_zc")
        a.ldi(regs["chunks_left"], -2)      # (either way: after the shared chunk, unused)
        a.nop()
        a.nop()
        steady = merged = steady + 1
    for chunk, ks in enumerate(chunk_kinds[steady:], steady):
        with a.scope():
            if chunk != merged:
                boundary(a, plan, variant, masters, stepped(plan, chunk), leaves,
                         leaves_behind)
            for row, kind in enumerate(ks):
                k_step(a, plan, acc, kind, row, row + 1 == len(ks))
    a.fadd(acc[-1][-1], acc[-1][-1], r0)
    for _ in range(quiet_gathers(plan)):
        a.nop(sig="ldtmu0")
