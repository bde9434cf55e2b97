"""The panel kernel's epilogue side: accumulators started at the bias, C stored through VDW.

Per row of C the QPU owns: the residual (or beta*C) gathered and added, the activation applied
on the VPM write (vc4nn/kernels/epilogue.py), one DMA store per 16-column vector.
"""

import functools

from asm import (element_number, null, r0, r1, r2, r3, r4, r5, tmu0_s, vpm, vw_addr, vw_setup,
                 vw_wait)

from .common import GATHER_DEPTH, LANES, WORD, ops_then_branch, paired_moves
from .epilogue import activate, prepare_activation
from .halves import HALF_LOW, gathered_half
from .panel_act_halves import pack_register, scaled_address
from .panel_plan import HALF
from .panel_registers import registers
from .panel_spread import request_piece, store_piece


def start_at_bias(a, plan, variant, acc):
    """The epilogue's bias as the accumulators' start: one gather per vector of the panel
    (lanes clamped to its stored columns, so no gather leaves the bias), copied into that
    vector's accumulator of every row. Done before the panel asks for A, so the TMU FIFO holds
    only these gathers."""
    regs = registers(plan)[0]
    base = r2
    a.mov(r3, regs["bias"])                 # c_panel and bias are both on regfile B (and
    if plan.c_bytes != WORD:                # c_panel may be written just before the panel)
        scaled_address(a, base, regs["c_panel"], r3, plan.c_bytes, WORD)  # a float32 bias
    else:
        a.add(base, r3, regs["c_panel"])
    vectors = variant.vectors
    # (a piece, panel_spread: its vectors of the bias are gathers of their own)
    rows = acc[:-1] if acc.piece else acc
    targets = [[row[i] for row in rows] for i in range(vectors)] + \
        ([[reg] for reg in acc[-1]] if acc.piece else [])
    # Without a partial vector, r3 walks the vectors' lanes (r0: a vector's bytes), one
    # instruction per request, and the copies go two at a time: this runs once per panel,
    # and its code is fetched again each time (the instruction cache).
    walk = not variant.partial
    if walk:
        a.shl(r0, element_number, 2)
        a.add(r3, base, r0)
        a.ldi(r0, LANES * WORD)
    for i in range(len(targets) + GATHER_DEPTH):
        if i >= GATHER_DEPTH:
            a.nop(sig="ldtmu0")
            for ops in paired_moves(a, [(reg, r4) for reg in targets[i - GATHER_DEPTH]]):
                ops()
        if i < vectors and walk:
            a.add(r3, r3, r0).mov(tmu0_s, r3)       # (the MUL reads r3 before the step)
        elif i < vectors:
            request_vector(a, variant, i, base, i * LANES * WORD)
        elif i < len(targets):
            request_piece(a, plan, base, i - vectors)


def store(a, plan, variant, acc):
    """C = alpha*acc (+ beta*C) for the rows this QPU owns, one 16-column row of C at a time
    through this QPU's staging row of the VPM. ``store`` holds the number of valid rows (0 on a
    pass this QPU only helps with); rows past it are skipped, since their lanes of A repeated
    the last valid row and their addresses lie past the matrix. The epilogue's residual is
    added like beta*C (from its own address) and its activation applied on the VPM write.

    The rows are one loop whose body stores row 0 and then moves every row down by one (a
    conveyor, ``shift_rows``): no register is addressed indirectly, so a loop over rows must
    bring each row to the same registers. Unrolled, the store was ~6 instructions per vector
    (pw3: ~330 per panel), fetched again through the instruction cache every panel; the
    moves cost no time, since the QPU waits for its previous store's DMA before each vector
    anyway. The count lives in ``a_step``, which every panel reads again before its k loop."""
    regs = registers(plan)[0]
    alpha, address, count = r2, r1, regs["a_step"]
    rows = acc[:-1] if acc.piece else list(acc)
    with a.scope():
        if not rows:                # all parked (panel_park)
            return
        a.min(count, regs["store"], len(rows), sf=True)
        a.branch("skip", cond="all_zs")
        if not plan.alpha_one:
            a.mov(alpha, regs["alpha"])     # an accumulator: acc may sit on either regfile
        else:
            a.nop()
        first = column_offset(variant, 0, plan.c_bytes)
        if first:
            a.ldi(r3, first)
            a.add(address, regs["c_panel"], r3)
        else:
            a.mov(address, regs["c_panel"])
        prepare_activation(a, plan.epilogue)
        if acc.piece:
            store_piece(a, plan, acc[-1])
        a.label("row")
        row = rows[0]
        if not plan.beta_zero:
            add_gathered(a, variant, row, address, functools.partial(pop_beta_c, a, plan, alpha))
        if plan.epilogue.residual:                  # alpha is 1: r2 is free
            if plan.r_bytes != plan.c_bytes:
                scaled_address(a, r2, address, regs["residual"], plan.c_bytes, plan.r_bytes)
            else:
                a.add(r2, address, regs["residual"])
            add_gathered(a, variant, row, r2, functools.partial(pop_residual, a),
                         plan.r_bytes)
        store_row(a, plan, variant, row, address, alpha)
        a.ldi(r3, 1)                # (count is on regfile B: no small immediate)
        a.sub(count, count, r3, sf=True)
        ops_then_branch(a, shift_rows(a, rows), "row", cond="all_zc")
        a.label("skip")


def shift_rows(a, rows):
    """The conveyor of ``store``: emitters of the moves rows[g] = rows[g + 1]."""
    return paired_moves(a, [(dst, src) for g in range(len(rows) - 1)
                         for dst, src in zip(rows[g], rows[g + 1])])


def column_offset(variant, j, size=WORD):
    """Bytes (of ``size``-byte elements) from the panel's first column to the stored part of
    vector j."""
    x = variant.partial[1] if variant.partial and variant.partial[0] == j else 0
    return (j * LANES + x) * size


def store_row(a, plan, variant, row, address, alpha):
    """Write the row's vectors, each stored by one DMA; ``address`` ends at the next row's.

    The VDW setup and r3's address step are written only where they change (a partial vector,
    the step to the next row): a generic write setup leaves the VDW setup as it was, since the
    two are different setups of one register told apart by their ID field (the reference
    guide's VPMVCD_WR_SETUP; docs/hardware-choices.md "VPM and DMA setup fields"). Fewer
    instructions in the store loop keep a panel's code within the instruction cache."""
    regs = registers(plan)[0]
    partial = variant.partial[0] if variant.partial else None
    scale = not plan.alpha_one and plan.beta_zero
    vdw = step_in_r3 = None
    for j, reg in enumerate(row):
        # One store in flight per QPU (facts §3): the previous one still reads the staging row,
        # so wait for it here, not after starting each store. A store's instructions then run
        # while it moves, and the panel's last store drains during the next panel's start.
        a.read(vw_wait)
        if plan.c_halves:       # packed here: readable by the VPM write below
            activate(a, pack_register(plan), reg, plan.epilogue.activation, r5, pack=HALF_LOW)
        a.mov(vw_setup, regs["stage_w"])
        if plan.c_halves:
            a.mov(vpm, pack_register(plan))
        elif scale:
            a.fmul(vpm, reg, alpha)
        else:
            activate(a, vpm, reg, plan.epilogue.activation, r5)
        if vdw != (j == partial):
            vdw = j == partial
            a.mov(vw_setup, regs["vdw_part"] if vdw else regs["vdw_full"])
        # to the next vector; after the last, to the first of the next row
        step = (column_offset(variant, (j + 1) % len(row), plan.c_bytes)
                - column_offset(variant, j, plan.c_bytes))
        if j + 1 == len(row):
            step += plan.n * plan.c_bytes
        if step != step_in_r3:
            step_in_r3 = step
            a.ldi(r3, step)
        a.add(address, address, r3).mov(vw_addr, address)      # the MUL reads the old address


def add_gathered(a, variant, row, base, pop, size=WORD):
    """Gather a row of some matrix shaped like C (``base``: its address at the row's first
    stored column; ``size`` bytes per element) up to GATHER_DEPTH vectors ahead, and let
    ``pop(reg)`` combine each vector into the row's accumulator ``reg`` (halves: added, each
    lane keeping the half its address names). Lanes of a partial vector outside its stored
    columns repeat its nearest stored column, so the gather neither leaves the matrix nor reads
    words this QPU stored in the previous panel (facts §3: stale TMU data)."""
    vectors = len(row)

    def first(i):
        return i * LANES * size - column_offset(variant, 0, size)

    for i in range(vectors + GATHER_DEPTH):
        if i >= GATHER_DEPTH:
            done = i - GATHER_DEPTH
            if size == HALF:
                pop_half(a, variant, done, base, first(done), row[done])
            else:
                pop(row[done])
        if i < vectors:             # r0 and r3 are free: the pop above is done with them
            request_vector(a, variant, i, base, first(i), size)


def pop_beta_c(a, plan, alpha, reg):
    """reg = alpha*reg + beta*C, C's vector arriving in r4."""
    regs = registers(plan)[0]
    if plan.alpha_one:
        a.nop(sig="ldtmu0")
    else:
        a.fmul(reg, reg, alpha, sig="ldtmu0")
    a.fmul(r0, r4, regs["beta"])
    a.fadd(reg, reg, r0)


def pop_residual(a, reg):
    """reg += the residual's vector arriving in r4."""
    a.nop(sig="ldtmu0")
    a.fadd(reg, reg, r4)


def pop_half(a, variant, i, base, first, reg):
    """reg += vector i of a row of halves (request_vector's), arriving in r4: its lanes'
    addresses again, for the flags of their halves."""
    lane_offsets(a, variant, i, base, first, HALF)
    a.add(r0, r3, r0, sig="ldtmu0")
    a.and_(null, r0, HALF, sf=True)
    gathered_half(a, "fmax", r0)        # (reg may sit on a register file: not read twice)
    a.fadd(reg, reg, r0)


def request_vector(a, variant, i, base, first, size=WORD):
    """Gather vector i of a panel-shaped row whose column 0 is at ``base`` + ``first`` bytes,
    lanes clamped to the vector's stored columns. Uses r0 and r3."""
    lane_offsets(a, variant, i, base, first, size)
    a.add(tmu0_s, r3, r0)


def lane_offsets(a, variant, i, base, first, size):
    """r0: the byte offsets of vector i's lanes (request_vector), r3: ``base`` + ``first``."""
    partial = variant.partial[0] if variant.partial else None
    if i == partial:
        _, x, depth = variant.partial
        a.ldi(r0, x + depth - 1)
        a.min(r0, element_number, r0)
        a.max(r0, r0, x)
    else:
        a.mov(r0, element_number)
    a.shl(r0, r0, size.bit_length() - 1)
    a.ldi(r3, first)
    a.add(r3, r3, base)
