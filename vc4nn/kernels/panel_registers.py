"""The panel kernel's registers: accumulators and bookkeeping on the two register files."""

import functools

from asm import ra, rb


# ---------------------------------------------------------------------------------------------
# Registers. Accumulators r0-r5 all have a job in the k loop:
#   r0 product (added by the next instruction)   r1 the current gather of A (8 rows x 1-2 k)
#   r2 TMU address of the next gather to ask for r3 VPM read setup of the chunk's k-row 1
#   r4 the next gather as ldtmu0 delivers it     r5 the broadcast scalar A[m0+g, k]
# (r5 is dead between chunks: a relay of DMA'd B keeps the address of its next load there
# across the barrier, see relay; with gathered B the boundary's requests put a constant there,
# panel_gather_b. r1 is not free there with paired gathers: see PanelPlan.pair_gathers.)
# The regfile holds the R x V accumulators and the bookkeeping below. A counter decremented
# with a small immediate must be on regfile A (a small-immediate instruction cannot read
# regfile B, facts §1), and so must acc[g][V-1]: it is added in the instruction that rotates
# (the rotation amount is a small immediate).
# ---------------------------------------------------------------------------------------------
# role is tested with a small immediate and toggle is xored with the B-side buffer: both on
# regfile A too.
# A staggered plan (panel_stagger) uses no pass, panel or store count, nor c_panel: its own
# registers take theirs (name -> the bookkeeping register it takes). LANE_DELTA is added to
# A's gather address in the chunk loop (panel_kloop.k_step).
LANE_DELTA = "c_panel"
A_SIDE_BOOKKEEPING = ("buffer", "chunks_left", "panels_left", "passes_left", "a_row", "store",
                      "role")


def bookkeeping_names(plan):
    names = _plain_bookkeeping(plan)
    if stepped_loads(plan):
        names = _without_unused(plan, names) + load_names(plan)
    return names


def load_names(plan):
    """The loaders' registers with stepped loads: the address of the k-row they loaded last
    and (fp16 B) their widening's read setup less ``buffer`` (panel_uniforms)."""
    return ["load_next"] + (["widen_x"] if plan.b_halves else [])


def _without_unused(plan, names):
    """vdw_part holds nothing without a partial vector."""
    partial = any(variant.partial for variant in plan.variants)
    return [name for name in names if partial or name != "vdw_part"]


@functools.lru_cache(maxsize=64)
def stepped_loads(plan):
    """Whether the loaders step the address of their k-row from chunk to chunk in a register
    (and, fp16 B, derive their widening's setups from ``buffer`` and r3) instead of reading it
    from the uniform stream at every chunk (panel_uniforms): when B is DMA'd one piece per
    k-row, the master does not load, and the registers the accumulators leave hold
    ``load_names`` (with vdw_part's, which a plan without a partial vector does not use)."""
    if plan.b_gather or plan.loader_slot(0) is not None:
        return False
    if not plan.b_halves and any(variant.narrow for variant in plan.variants):
        return False
    b_names = _without_unused(plan, _plain_bookkeeping(plan)) + load_names(plan)
    a_free = len(ra) - len(a_side_names(plan))
    b_free = len(rb) - len(b_names)
    rows, vectors = plan.rows, max(variant.vectors for variant in plan.variants)
    return b_free >= 0 and a_free >= rows and a_free + b_free >= rows * vectors


def _plain_bookkeeping(plan):
    names = ["toggle", "c_panel", "stage_w", "vdw_full", "vdw_part"]
    if not plan.alpha_one:
        names.append("alpha")
    if not plan.beta_zero:
        names.append("beta")
    if plan.epilogue.bias:
        names.append("bias")            # the bias's address - C's address of the block's row 0
    if plan.epilogue.residual:
        names.append("residual")        # the residual's address - C's address
    if plan.gather_k == 2 and plan.k % 2:     # see request_a
        names.append("lane_k")
    if plan.b_gather:                   # see panel_gather_b; no partial vector, no vdw_part
        names.remove("vdw_part")
        names += ["b_step", "b_write"]
    return names + ["a_step"]


def free_registers(plan):
    """How many registers the bookkeeping leaves for accumulators (it depends on the plan's
    options, not on its rows)."""
    return len(ra) + len(rb) - len(a_side_names(plan)) - len(bookkeeping_names(plan))


def a_side_names(plan):
    # halves: DMA'd fp16 B's words on their way to float32 (unpacked on a regfile-A read;
    # gathered ones are unpacked from r4, panel_gather_b)
    return A_SIDE_BOOKKEEPING + (("halves",) if plan.b_halves and not plan.b_gather else ()) + \
        (("b_next",) if plan.b_gather else ())


@functools.lru_cache(maxsize=64)
def registers(plan):
    """(bookkeeping name -> register, free A-side registers, free B-side registers)."""
    a_free, b_free = list(ra), list(rb)
    regs = {name: a_free.pop() for name in a_side_names(plan)}
    regs.update({name: b_free.pop() for name in bookkeeping_names(plan)})
    return regs, tuple(a_free), tuple(b_free)


class Accumulators(list):
    """The accumulators of a pass: acc[g][j] (a list of rows). ``piece``: the last row is the
    pass's spread piece (panel_spread), a row of W vectors."""

    piece = False


def accumulators(plan, vectors, rows, piece=False):
    """acc[g][j]: row g (of ``rows``) of the QPU's block, vector j of the panel. Column V-1 on
    regfile A (see above); the others alternate sides, which lets any of them pair with a vpm
    read. ``piece``: one more row of ``plan.piece_vectors`` follows, the QPU's spread piece
    (panel_spread)."""
    _, a_free, b_free = registers(plan)
    a_free, b_free = list(a_free), list(b_free)
    acc = Accumulators([None] * vectors for _ in range(rows))
    if piece:
        acc.append([None] * plan.piece_vectors)
        acc.piece = True
    for row in acc:
        row[-1] = a_free.pop(0)
    pool = [reg for pair in zip(a_free, b_free) for reg in pair]
    pool += a_free[len(b_free):] + b_free[len(a_free):]
    for row in acc:
        for j in range(len(row) - 1):
            row[j] = pool.pop(0)
    return acc


@functools.lru_cache(maxsize=64)
def piece_registers(plan):
    """The last pass's registers for its piece (spread_rows, panel_spread): name -> register,
    taken from the accumulators the earlier passes use and the last one leaves free (loaded at
    its start). x_off and x_count are added to a regfile-B register or compared with a small
    immediate, x_next<i> read next to a rotation (a small immediate): regfile A."""
    acc = accumulators(plan, plan.panel_vectors, plan.last_rows, True)
    used = {reg for row in acc for reg in row}
    _, a_free, b_free = registers(plan)
    a_left = [reg for reg in a_free if reg not in used]
    pool = [reg for reg in b_free if reg not in used]
    regs = {}
    for name in ["x_off", "x_count"] + [f"x_next{row}" for row in range(2, plan.chunk_rows)]:
        if not a_left:
            raise ValueError("spread_rows: too few registers left for the piece")
        regs[name] = a_left.pop()
    pool += a_left
    for name in [f"x_read{row}" for row in range(plan.chunk_rows)] + ["x_col"]:
        if not pool:
            raise ValueError("spread_rows: too few registers left for the piece")
        regs[name] = pool.pop()
    return regs
