"""Staggered retirement (``PanelPlan.stagger``): the store bursts of the panel kernel overlapped
with its k steps.

The panel kernel stores a pass's rows at its panel's end, every QPU at once, and the memory bus
drains them while the QPUs wait (56x56x128->128: 21% of the time). Here the k-rows run as a
*cycle* that repeats: the K k-rows of B, then the bias as k-row K, whose A is 1 (an immediate,
no gather), so no accumulator starts at the bias. A QPU holds ROWS rows (pixels) of 8 vectors,
and row g *retires* at the start of segment g of the cycle: its sums cover exactly one cycle
(from the same point of the cycle before), so they are the result; they go, activated, into 8
park registers, the row is zeroed, and its lane of A's gather address moves to its next pixel.
The segment's chunks then store the parked vectors, one per chunk through the QPU's staging
row, while the k steps go on: at most one store in flight per QPU, spread over the whole run.

The cycle is the panel kernel's panel (its chunk loop, the chunk that shares the loop's body and
the last chunk, panel_chunks), with the retirements between runs of the chunk loop: the loop is
one piece of code, entered with a link register and left through it, whose body starts with a
store slot (the first park register, then the park registers move down: a conveyor, mostly in
free halves of the k steps). A chunk the segments leave over runs after the last one's slots,
entered past its slot. A retiring row's lane moves in the k-row that asks for its first gather
of the new pixel: the chunk loop adds LANE_DELTA (that lane's step, else 0) to A's address in
its last chunk (the count's flags), and a_row, from which every cycle's first gathers start,
takes the step too.

Pixels: blocks of ROWS x QPUs, row g of every QPU QPUs consecutive pixels (``pixel_indices``);
a row past the pixels repeats its QPU's last one (its value stored again by the same QPU). The
first cycle (warm-up) retires partial sums, stored at the QPU's first pixel before its real
values; one cycle more than the blocks retires the last, and ends after the segment of the last
row with a pixel (``last_row``). Panels of B one after another, each with its cycles.

fp16 x and y (B and the bias float32): x's halves are copied as the panel kernel copies them
(panel_act_halves), whose flags would clobber the count's, so the lane moves on a test of the
count to come (``panel_kloop.lane_step_row``); y is packed by the writes into the first park
register, the one the slots store (``packing``).
"""

import functools

from asm import (AssemblerError, element_number, isa, kernel, null, r0, r1, r2, r5, uniform, vpm,
                 vpm_read_setup, vw_addr, vw_setup, vw_wait)

from . import chain
from .common import LANES, WORD, ceil_div, lane_addresses, ops_then_branch, paired_moves, zero
from .epilogue import activate, prepare_activation
from .halves import HALF_LOW
from .panel_barrier import boundary
from .panel_gather_b import pop_rows, request_first_rows, start_panel, stepped, write_offset
from .panel_kloop import (ChunkLoop, gathers_ahead, k_kinds, k_step, request_a, shared_chunk,
                          steady_chunks, steady_kinds)
from .panel_plan import MAX_ROWS
from .panel_registers import LANE_DELTA, accumulators, registers
from .panel_uniforms import read_stream_head, role_word, staging_words

ROWS = 5        # rows per QPU: 5 x 8 accumulators and 8 park registers
DELAY = isa.BRANCH_DELAY_SLOTS


def check(plan):
    """Why ``plan`` cannot run staggered (None: it can)."""
    if not (plan.b_gather and plan.trans_a and plan.gather_k == 1) or plan.b_halves:
        # (fp16 B would gather the bias row as halves too)
        return "it needs gathered float32 B, transposed A, one k per gather"
    if plan.a_halves and plan.qpus % 2:
        return (f"fp16 A on {plan.qpus} QPUs: a lane's step of pixels must keep bit 1 of its "
                f"halves' address (an even number of QPUs)")
    if not plan.epilogue.bias or plan.epilogue.residual or plan.edge:
        return "it needs a bias (its k-row), no residual and whole panels"
    if plan.max_rows != ROWS or plan.spread_rows or plan.park_rows or plan.pair_gathers:
        return f"it takes {ROWS} rows per QPU, no spread, parked or paired rows"
    if shared_chunk(plan) != "plain" or steady_chunks(plan) + 2 != plan.chunks:
        return (f"K = {plan.k - 1}: the chunk after the loop must run its body as it is and be "
                f"followed by the last chunk")
    if plan.m < ROWS * plan.qpus:
        return f"M = {plan.m} is less than {ROWS} rows on each of {plan.qpus} QPUs"
    park = park_registers(plan)
    if park is None:
        return "the park registers do not fit"
    if plan.c_halves and "a" not in park[0].writes:
        return "fp16 C: the first park register, which packs, must be on regfile A"
    if segments(plan) is None:
        return f"{steady_chunks(plan)} chunks in the loop do not make {ROWS} segments"
    return None


def segments(plan):
    """The chunk loop's chunks of each segment, as many as the parked vectors, and 0 or 1 more
    at the end of the last, entered past its store slot (its conveyor's moves only move the
    last vector down again); the shared chunk and the last one follow, which have no slot.
    None if the loop's chunks do not split so."""
    steady, vectors = steady_chunks(plan), plan.panel_vectors
    if plan.chunk_period != 1 or not vectors * ROWS <= steady <= vectors * ROWS + 1:
        return None
    return [vectors] * (ROWS - 1) + [steady - vectors * (ROWS - 1)]


def park_registers(plan):
    """The 8 registers the accumulators leave, regfile A and B in turn (paired conveyor moves)."""
    used = {reg for row in accumulators(plan, plan.panel_vectors, ROWS) for reg in row}
    _, a_free, b_free = registers(plan)
    spare_a = [reg for reg in a_free if reg not in used]
    spare_b = [reg for reg in b_free if reg not in used]
    spare = [reg for pair in zip(spare_a, spare_b) for reg in pair]
    spare += spare_a[len(spare_b):] + spare_b[len(spare_a):]
    return spare[:plan.panel_vectors] if len(spare) >= plan.panel_vectors else None


def own_registers(plan):
    """The staggered kernel's registers, taken from bookkeeping it does not use: the link of
    the chunk loop (regfile A: a branch adds a regfile-A register), the cycle count, the store
    slots' address and its step, the retiring lane's step."""
    regs = registers(plan)[0]
    return {"link": regs["panels_left"], "cycles": regs["passes_left"], "drain": regs["store"],
            "step": regs["vdw_full"], "delta": regs[LANE_DELTA]}


@functools.lru_cache(maxsize=16)
def program_for(plan):
    """The assembled program of a staggered plan; assembled once per plan. The conveyor's
    first moves are instructions of their own, as few as leave the rest to free halves of the
    k steps (``chunk_loop``)."""
    # (fp16 C: the move into the first park register packs, ``packing``: one of their own)
    for own_moves in range(plan.c_halves and plan.panel_vectors > 1, plan.panel_vectors):
        try:
            return stagger_kernel.assemble(plan, own_moves)
        except _ConveyorLeft:
            continue
    raise AssertionError("the conveyor's moves, all of their own, always fit")


class _ConveyorLeft(Exception):
    """The k steps' free halves did not take the conveyor's remaining moves."""


@kernel
def stagger_kernel(a, plan, own_moves):
    """The program (see the module docstring); ``sgemm_panel.panel_kernel``'s start."""
    regs = registers(plan)[0]
    own = own_registers(plan)
    variant = plan.variants[0]
    acc = accumulators(plan, plan.panel_vectors, ROWS)
    park = park_registers(plan)
    masters = []
    read_stream_head(a, regs)
    a.mov(regs["b_write"], uniform)
    vectors = plan.panel_vectors
    a.ldi(regs["buffer"], vpm_read_setup(vectors, plan.buffer_rows))
    a.ldi(regs["toggle"], vpm_read_setup(vectors, 0) ^ vpm_read_setup(vectors, plan.buffer_rows))
    request_first_rows(a, plan)
    pop_rows(a, plan)
    # Only the store slots write a VDW setup, and a generic write setup leaves it as it was
    # (panel_store.store_row): written once, its register then holds the slots' step.
    a.mov(vw_setup, regs["vdw_full"])
    a.ldi(own["step"], LANES * plan.c_bytes)
    a.ldi(regs["a_step"], plan.a_k)
    lane_addresses(a, regs["a_row"], plan.a_lane, r1, group=MAX_ROWS)      # reads 2 uniforms
    zero(a, [reg for row in acc for reg in row])
    a.ldi(own["cycles"], cycles(plan) * plan.full_panels)
    lengths = segments(plan)
    first = retire(a, plan, acc, park, 0)
    for op in first[:DELAY]:        # (the cycle loop's branch runs these in its delay slots)
        op()
    a.label("cycle")
    for op in first[DELAY:] + lane_step(a, plan, 0):
        op()
    start_cycle(a, plan)
    for g, length in enumerate(lengths):
        if g:
            for op in ops:
                op()
        # the segment: the chunk loop (returns here). The delay slots: the next row's lane
        # step.
        steps = lane_step(a, plan, g + 1) if g + 1 < ROWS else [lambda: a.ldi(own["delta"], 0)]
        steps = [lambda: a.ldi(regs["chunks_left"], 1 - 2 * vectors)] + steps
        ops_then_branch(a, steps, "slot", link=own["link"])
        if length > vectors:        # the chunk past the last segment's slots
            ops_then_branch(a, [lambda: a.ldi(regs["chunks_left"], -1)], "entry",
                            link=own["link"])
        ops = retire(a, plan, acc, park, g + 1) if g + 1 < ROWS else []
        if g == last_row(plan) and g + 1 < ROWS:     # the last cycle ends here
            a.sub(null, own["cycles"], 1, sf=True)
            ops_then_branch(a, ops[:DELAY], "finish", cond="all_zs")
            ops = ops[DELAY:]
    # The shared chunk and the last: one boundary before both; the count says which follows
    # (1: the loop's end, then the shared chunk, which returns here too; 0: the last chunk).
    with a.scope():
        boundary(a, plan, variant, masters, stepped(plan, plan.chunks - 2))
    a.mov(null, regs["chunks_left"], sf=True)
    a.branch("body", cond="all_zc")
    a.ldi(regs["chunks_left"], -2)
    a.nop()
    a.nop()
    kinds = k_kinds(plan)[(plan.chunks - 1) * plan.chunk_rows:]
    for row, kind in enumerate(kinds):
        k_step(a, plan, acc, kind, row, row + 1 == len(kinds))
    a.fadd(acc[-1][-1], acc[-1][-1], r0)
    a.sub(own["cycles"], own["cycles"], 1, sf=True)
    ops_then_branch(a, first[:DELAY], "cycle", cond="all_zc")
    a.branch("done")
    a.nop()
    a.nop()
    a.nop()
    chunk_loop(a, plan, acc, park, masters, own_moves)
    for emit in masters:
        emit()
    a.label("finish")               # (after a loop chunk: its last request of A is out)
    a.nop(sig="ldtmu0")
    a.label("done")
    a.read(vw_wait)                 # the last slot's store
    a.label("exit")
    chain.end(a)


def chunk_loop(a, plan, acc, park, masters, own_moves):
    """The chunk loop: a store slot, the boundary, the k steps; left through the link. The
    conveyor's moves (park[i] = park[i + 1], in that order: each reads its source before the
    next move overwrites it): the first ``own_moves`` after the slot (two per instruction where
    the files allow), the others in free halves of the k steps' instructions (raises
    _ConveyorLeft if they do not all fit). A chunk entered past the slot makes the last moves
    only: the extra chunk of the last segment, when every register holds the last vector."""
    regs, own = registers(plan)[0], own_registers(plan)
    moves = [(park[i], park[i + 1]) for i in range(len(park) - 1)]
    a.label("slot")
    a.read(vw_wait)
    a.mov(vw_setup, regs["stage_w"])
    a.mov(vpm, park[0])
    a.add(own["drain"], own["drain"], own["step"]).mov(vw_addr, own["drain"])
    for move in paired_moves(a, moves[:own_moves], packing(a, plan)):
        move()
    moves = moves[own_moves:]
    a.label("entry")
    boundary(a, plan, plan.variants[0], masters, True)
    a.label("body")
    loop = ChunkLoop("slot", "all_ns", -2)
    body = steady_kinds(plan)
    handles = []
    for row in range(plan.chunk_rows):
        k_step(a, plan, acc, body[row], row, row + 1 == plan.chunk_rows, loop=loop,
               handles=handles)
    for handle in handles:
        if moves and handle is not None and _added(handle, *moves[0]):
            moves.pop(0)
    if moves:
        raise _ConveyorLeft()
    a.branch(0, absolute=True, reg=own["link"])
    a.nop()
    a.nop()
    a.nop()


def packing(a, plan):
    """fp16 C: the op that moves a vector into the first park register, the one the slots
    store, converting it to a half in bits 15:0 (a float op packing on regfile A: the 16-bit
    staging write takes bits 15:0); None for float32 C (a mov)."""
    if not plan.c_halves:
        return None
    return lambda dst, src: a.fmax(dst, src, src, pack=HALF_LOW)


def _added(handle, dst, src):
    """Whether ``mov dst, src`` fits the instruction's free half (an op that does not fit
    leaves it as it was)."""
    try:
        handle.mov(dst, src)
    except AssemblerError:
        return False
    return True


def retire(a, plan, acc, park, g):
    """Emitters: row g's sums, activated, into the park registers; the row zeroed; the store
    slots' address of its pixel from the uniform stream. The last row's last vector waits for
    the product in r0 (the next k adds it): added here, and r0 zeroed."""
    own = own_registers(plan)
    row = acc[g]
    ops = []
    # fp16 C: the first park register takes its vector as a half (``packing``)
    packs = [HALF_LOW if plan.c_halves and not i else None for i in range(len(park))]
    if g + 1 == len(acc):
        ops += [lambda: a.fadd(row[-1], row[-1], r0), lambda: a.ldi(r0, 0)]
    if plan.epilogue.activation:    # (one instruction: every emitter here is one)
        ops.append(lambda: prepare_activation(a, plan.epilogue))
    if plan.epilogue.activation == "relu6":
        # relu6's first instruction writes an accumulator: its MUL zeroes the vector it
        # reads (r1 - r1; the reads come before the writes)
        for dst, src, pack in zip(park, row, packs):
            ops += [lambda src=src: a.fmin(r1, src, r5).v8subs(src, r1, r1),
                    lambda dst=dst, pack=pack: a.fmax(dst, r1, 0, pack=pack)]
    else:
        ops += [lambda dst=dst, src=src, pack=pack: activate(
                    a, dst, src, plan.epilogue.activation, r5, pack=pack)
                for dst, src, pack in zip(park, row, packs)]
        ops += [lambda reg=reg: zero(a, [reg]) for reg in row]
    return ops + [lambda: a.mov(own["drain"], uniform)]


def lane_step(a, plan, g):
    """Emitters: row g's lane of a_row moves by the uniform stream's step (bytes); for g > 0
    the chunk loop's last chunk adds the same to A's gather address (LANE_DELTA), row 0's
    takes it at the cycle's start."""
    regs, own = registers(plan)[0], own_registers(plan)
    if not g:
        return [lambda: a.mov(r1, uniform), lambda: a.sub(null, element_number, g, sf=True),
                lambda: a.add(regs["a_row"], regs["a_row"], r1, cond="zs")]
    # LANE_DELTA: r1 on lane g, 0 elsewhere (zeroed by the MUL next to the flags)
    return [lambda: a.mov(r1, uniform),
            lambda: a.sub(null, element_number, g, sf=True).v8subs(own["delta"], r1, r1),
            lambda: a.add(regs["a_row"], regs["a_row"], r1, cond="zs"),
            lambda: a.mov(own["delta"], r1, cond="zs")]


def start_cycle(a, plan):
    """A cycle's start: its first gathers of A from a_row, B's address registers."""
    regs = registers(plan)[0]
    start_panel(a, plan)
    a.mov(r2, regs["a_row"])
    for _ in range(gathers_ahead(plan)):
        request_a(a, plan, "full")
    a.nop(sig="ldtmu0")
    a.ldi(r0, 0)


# ---------------------------------------------------------------------------------------------
# The uniform stream of one QPU, in the order the kernel reads it:
#   [1, role, staging write setup, VDW setup, 0, b_write, its rows of chunk 0 (addresses)]
#   [A address of its first pixel, 4 (lanes past 4 repeat lane 4)]
#   per cycle: [row 0's store address, row 0's lane step, b_next, b_step, row 1's lane step]
#              per row g = 1..4: [its store address, (g < 4) row g+1's lane step]
#              [its rows of the last chunk as offsets from b_next] [the same for the next
#              cycle's chunk 0]
# ---------------------------------------------------------------------------------------------
def cycles(plan):
    """Cycles per panel: one per block of pixels and one more."""
    return ceil_div(plan.m, ROWS * plan.qpus) + 1


def last_row(plan):
    """The last row with a pixel in the last block: the last cycle ends after its segment."""
    left = plan.m - (cycles(plan) - 2) * ROWS * plan.qpus
    return (left - 1) // plan.qpus


def pixel_indices(plan, q):
    """QPU q's pixel of each (block, row), in retirement order; past the pixels its last one.
    Row g of every QPU is QPUs consecutive pixels, which retire together: the lines of x they
    gather are read within one cycle. (With each QPU's rows consecutive pixels instead, a
    line held pixels of rows retiring at different points, read in two cycles, from SDRAM
    each time: 56x56x128->128 8.04 ms, TMU stalls 17% of QPU time, against 6.00.)"""
    out, last = [], None
    for block in range(cycles(plan) - 1):
        for g in range(ROWS):
            p = (block * ROWS + g) * plan.qpus + q
            last = p if p < plan.m else last
            out.append(last)
    return out


def b_row_address(plan, b_addr, bias, col, k, row):
    """The address of a chunk row: vector ``row`` of k-row ``k`` (k = K - 1 of the plan: the
    bias)."""
    if k == plan.k - 1:
        return bias + (col + row * LANES) * WORD
    return b_addr + (k * plan.n + col + row * LANES) * WORD


def chunk_rows(plan, b_addr, bias, col, chunk, q):
    """QPU q's rows of ``chunk`` of a cycle (k-rows past K repeat the last)."""
    out = []
    for row in range(q * plan.b_rows, (q + 1) * plan.b_rows):
        slot, j = divmod(row, plan.panel_vectors)
        k = min(chunk * plan.chunk_rows + slot, plan.k - 1)
        out.append(b_row_address(plan, b_addr, bias, col, k, j))
    return out


def uniform_streams(plan, addresses, bias):
    """Per QPU, its list of 32-bit uniforms. ``addresses``: bus addresses of a (x, [K, M]),
    b (the weights, [K - 1, N]) and c (y, [M, N]); ``bias``: the bias's."""
    a_addr, b_addr, c_addr = addresses
    width = plan.panel_vectors * LANES
    chunks = plan.chunks
    streams = []
    for q in range(plan.num_qpus):
        pixels = pixel_indices(plan, q)
        words = [1, role_word(plan, q), *staging_words(plan, q, None), write_offset(plan, q)]
        words += chunk_rows(plan, b_addr, bias, 0, 0, q)
        # every lane starts at the first pixel; the warm-up cycle's lane steps move them
        words += [a_addr + pixels[0] * plan.a_lane, 0]
        lane = [pixels[0]] * ROWS           # each row's pixel
        for panel in range(plan.full_panels):
            col = panel * width
            next_col = col if panel + 1 == plan.full_panels else col + width
            for c in range(cycles(plan)):
                step = plan.chunk_rows * plan.n * WORD
                start = chunk_rows(plan, b_addr, bias, col, 1, q)[-1]
                cycle_words = []
                for g in range(ROWS):
                    retired = pixels[(c - 1) * ROWS + g] if c else pixels[0]
                    store = c_addr + (retired * plan.n + col) * plan.c_bytes
                    new = pixels[c * ROWS + g] if c + 1 < cycles(plan) else lane[g]
                    moved = (new - lane[g]) * plan.a_lane
                    lane[g] = new
                    if g == 0:
                        cycle_words += [store, moved & 0xFFFFFFFF, start, step]
                    else:
                        cycle_words += [store]
                    if g + 1 < ROWS:
                        nxt = pixels[c * ROWS + g + 1] if c + 1 < cycles(plan) else lane[g + 1]
                        cycle_words.append(((nxt - lane[g + 1]) * plan.a_lane) & 0xFFFFFFFF)
                        lane[g + 1] = nxt
                # the boundaries that do not step: before the last chunk and after it
                b_next = start + (chunks - 2) * step
                last = chunk_rows(plan, b_addr, bias, col, chunks - 1, q)
                after = chunk_rows(plan, b_addr, bias,
                                   col if c + 1 < cycles(plan) else next_col, 0, q)
                cycle_words += [(r - b_next) & 0xFFFFFFFF for r in last + after]
                if panel + 1 == plan.full_panels and c + 1 == cycles(plan) and \
                        last_row(plan) + 1 < ROWS:      # the last cycle ends early
                    cycle_words = cycle_words[:5 + 2 * last_row(plan)]
                words += cycle_words
        streams.append(words)
    return chain.with_tail(streams)
