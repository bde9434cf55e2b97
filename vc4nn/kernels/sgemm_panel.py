"""SGEMM with a shared B panel: the high-throughput kernel for the cases where B is shared.

``C = alpha * op(A) @ B + beta * C`` (NN and TN), float32, row-major. docs/sgemm.md ("The panel
kernel") explains the design and its performance; vc4nn/kernels/sgemm.py is the general kernel
this one borrows its helpers from. Read it first: these modules assume its vocabulary.

The idea. All QPUs work on the same *panel* of B (up to PANEL_VECTORS = 6 vectors of 16 columns)
at the same time. The panel arrives in the VPM in *chunks* of Kc k-rows, double-buffered, each
k-row brought by one DMA load issued by one of the first Kc QPUs (a QPU has one load in flight,
facts §3, so the loads are spread). Every QPU reads the chunk with generic VPM reads, directly
as the MUL operand. A QPU owns R (<= 8) rows of A: one TMU gather brings A[rows, k] and
A[rows, k+1] into r4 (lanes 0-7 and 8-15); for each row g the MUL rotator moves element g to
element 0 and the B-side r5 write broadcasts it (facts §1, §5.1); that scalar then multiplies
the panel's vectors:

    fadd acc[g-1][V-1] += r0   ; v8min r5rep, r1, r1 >> (16-g)   # broadcast A[m0+g, k]
    add  vr_setup, r3, 6i-6    ; fmul r0, r5, vpm                 # queue the next group's reads
    fadd acc[g][0] += r0       ; fmul r0, r5, vpm                 # ... V multiply-adds
    ...

so the uniform stream is out of the inner loop and B crosses the memory bus once per row pass
instead of once per QPU. Between chunks all QPUs meet at a semaphore barrier, which says both
"the next chunk is in the VPM" and "everyone has finished the chunk before it, so its buffer
may be reloaded". C goes out at the end of a panel through one VPM staging row per QPU, so no
QPU waits for another's store.

The kernel is this module; its parts, each a module of one job: the plan (panel_plan.py), the
uniform streams (panel_uniforms.py), the registers (panel_registers.py), the chunk boundary
(panel_barrier.py), the k loop (panel_kloop.py), the bias start and the stores (panel_store.py),
the last pass's leftover rows in pieces (panel_spread.py), B gathered through the TMU
(panel_gather_b.py), rows parked and stored during the next pass (panel_park.py).
"""

import functools

from asm import element_number, kernel, null, r0, r2, r3, uniform, vpm_read_setup, vr_wait, vw_wait

from .common import LANES, ceil_div, lane_addresses, zero
from . import chain
from .panel_barrier import issue_loads
from .panel_gather_b import pop_rows, request_first_rows, start_panel
from .panel_chunks import chunks
from .panel_kloop import gather_kind, gathers_ahead, request_a
from . import panel_park as parking
from .panel_plan import MAX_ROWS
from .panel_registers import accumulators, registers
from .panel_spread import fix_lane, read_header
from .panel_store import start_at_bias, store
from .panel_uniforms import read_stream_head

# The panel kernel's public names, wherever they live (vc4nn/linalg.py, kernels/pointwise.py).
from .panel_barrier import master_counts, relay_counts  # noqa: E402,F401
from .panel_plan import (PANEL_VECTORS, PanelPlan, a_rows_per_set, deepest_chunk,  # noqa: E402,F401
                         issue_estimate, transpose_a_first)
from .panel_uniforms import uniform_streams  # noqa: E402,F401


@functools.lru_cache(maxsize=64)
def program_for(plan):
    """The assembled (and hazard-checked) program of a plan; assembled once per plan."""
    return panel_kernel.assemble(plan)


@kernel
def panel_kernel(a, plan):
    regs, _, _ = registers(plan)
    masters = []                # the master's barrier code of each boundary (place_masters)
    read_stream_head(a, regs)
    if not plan.alpha_one:
        a.mov(regs["alpha"], uniform)
    if not plan.beta_zero:
        a.mov(regs["beta"], uniform)
    if plan.epilogue.residual:
        a.mov(regs["residual"], uniform)
    if plan.b_gather:
        a.mov(regs["b_write"], uniform)
    parking.load_drain_step(a, plan)
    # The boundary before each chunk toggles the buffer first: start on buffer 1's setup.
    vectors = plan.panel_vectors
    a.ldi(regs["buffer"], vpm_read_setup(vectors, plan.buffer_rows))
    a.ldi(regs["toggle"], vpm_read_setup(vectors, 0) ^ vpm_read_setup(vectors, plan.buffer_rows))
    if plan.b_gather:              # chunk 0's rows of B, into the VPM before the first barrier
        request_first_rows(a, plan)
        pop_rows(a, plan)
    else:
        with a.scope("first_load"):
            issue_loads(a, plan)
    # The passes: all of ``rows`` rows per QPU, or (``last_rows``) the last one of fewer.
    # park_rows: the first pass and the last are generated on their own (panel_park).
    looped = plan.passes - (plan.last_rows != plan.rows or plan.spread_rows)
    if plan.park_rows:
        with a.scope("first_pass"):
            one_pass(a, plan, plan.rows, masters, park=True)
        place_masters(a, masters, "first_pass_done")
        looped = plan.passes - 2
    if looped:
        a.ldi(regs["passes_left"], looped)
        a.label("pass")
        with a.scope("passes"):
            one_pass(a, plan, plan.rows, masters, drain=bool(plan.park_rows),
                     park=bool(plan.park_rows))
        a.sub(regs["passes_left"], regs["passes_left"], 1, sf=True)
        a.branch("pass", cond="all_zc")
        a.nop()
        a.nop()
        a.nop()
        place_masters(a, masters, "passes_done")
    if plan.park_rows:
        with a.scope("last_pass"):
            one_pass(a, plan, plan.last_rows, masters, drain=True)
    elif looped < plan.passes:
        if plan.spread_leaves:      # the master and the relays: the last pass without a piece
            a.mov(null, regs["role"], sf=True)
            a.branch("plain_last", cond="all_zc")
            a.nop()
            a.nop()
            a.nop()
        with a.scope("last_pass"):
            one_pass(a, plan, plan.last_rows, masters, plan.spread_rows)
        if plan.spread_leaves:
            a.branch("last_done")
            a.nop()
            a.nop()
            a.nop()
            a.label("plain_last")
            with a.scope("plain_last_pass"):       # (the leaves' pass has the pieces)
                one_pass(a, plan, plan.last_rows, masters, leaves_behind=True)
            a.label("last_done")
    place_masters(a, masters, "last_pass_done")
    if not plan.b_gather:
        a.read(vr_wait)             # the extra load after the last chunk (see uniform_streams)
    a.read(vw_wait)                 # the last store of C (store_row does not wait for its own)
    a.label("exit")
    chain.end(a)


def place_masters(a, masters, over):
    """The master's and the relays' barrier code of the boundaries generated since the last
    call: right after the passes that run it, which jump over it. A
    slice's QPUs share a 4 KB, 4-way instruction cache, and the first slice runs this code
    with its loop: placed after the program's end, its lines fell on the sets the loop fills
    most (14x14x256->512: 5 lines in sets 4-7, fetched again every panel); next to the loop,
    the two are one stretch of lines, spread evenly over the sets."""
    if not any(masters):
        return
    a.branch(over)              # (the code's labels are at the top level: no scope here)
    a.nop()
    a.nop()
    a.nop()
    for i, emit in enumerate(masters):
        if emit:            # (placed ones stay as None: boundaries number theirs by the count)
            emit()
            masters[i] = None
    a.label(over)


def one_pass(a, plan, rows, masters, piece=False, drain=False, park=False,
             leaves_behind=False):
    """One pass: ``rows`` rows of A per QPU against every panel of B (``piece``: and the
    QPU's piece of the rows left over, panel_spread; ``drain``: storing the rows the pass
    before parked, ``park``: parking its last rows, panel_park; ``leaves_behind``: the
    master's and the relays' pass while the leaves run theirs with pieces, which take
    longer: panel_barrier.coordinators)."""
    regs = registers(plan)[0]
    if piece:
        read_header(a, plan)
    lane_addresses(a, regs["a_row"], plan.a_lane, r3, group=MAX_ROWS)     # reads 2 uniforms
    if piece:
        fix_lane(a, plan)
    a.mov(regs["store"], uniform)
    a.mov(regs["c_panel"], uniform)
    if plan.epilogue.bias:
        a.mov(regs["bias"], uniform)
    panel_bytes = plan.panel_vectors * LANES * plan.c_bytes
    if plan.full_panels:
        a.ldi(regs["panels_left"], plan.full_panels)
        a.label("panel")
        with a.scope("full"):
            panel(a, plan, plan.variants[0], masters, rows, piece, drain, park, leaves_behind)
        a.sub(regs["panels_left"], regs["panels_left"], 1, sf=True)
        a.branch("panel", cond="all_zc")
        a.ldi(r3, panel_bytes)                          # (delay slots: c_panel steps either way)
        a.add(regs["c_panel"], regs["c_panel"], r3)
        a.nop()
    if plan.edge:           # c_panel is at column full_panels * 96: move to the edge window
        a.ldi(r3, (plan.edge.start - plan.full_panels * plan.panel_vectors * LANES) * plan.c_bytes)
        a.add(regs["c_panel"], regs["c_panel"], r3)
        with a.scope("edge"):
            panel(a, plan, plan.edge, masters, rows, piece, leaves_behind=leaves_behind)


def panel(a, plan, variant, masters, rows, piece=False, drain=False, park=False,
          leaves_behind=False):
    """One panel of C (``rows`` rows x the variant's vectors, and ``piece``): its chunks, then
    the store (``drain``, ``park``: see one_pass)."""
    regs = registers(plan)[0]
    acc = accumulators(plan, variant.vectors, rows, piece)
    if plan.epilogue.bias:
        start_at_bias(a, plan, variant, acc)
    else:
        zero(a, [reg for row in acc for reg in row])
    # buffer holds the VPM read setup of a k-row of the panel: a narrower panel reads fewer
    # vectors (the NUM field; the toggle flips the address only).
    delta = vpm_read_setup(variant.vectors, 0) - vpm_read_setup(plan.panel_vectors, 0)
    if delta:
        a.ldi(r3, delta)
        a.add(regs["buffer"], regs["buffer"], r3)
    # The panel's direction along k comes from the uniform stream (panel_direction). r2: the
    # first gather; with two-k gathers, lanes 8-15 one k further (lane_k: 0 or the k step).
    a.mov(regs["a_step"], uniform)
    a.add(r2, regs["a_row"], uniform)
    if plan.gather_k == 2:
        # Shifts use the low 5 bits of the count: -4 is 28, -1 is 31 (small immediates).
        a.shl(r0, element_number, -4)       # bit 3 of the element number (lane >= 8) ...
        a.asr(r0, r0, -1)                   # ... as a mask
        a.and_(r0, r0, uniform)
        a.add(r2, r2, r0)
        if "lane_k" in regs:
            a.mov(regs["lane_k"], r0)
    if plan.b_gather:
        start_panel(a, plan)
    # The first gathers_ahead gathers asked for once per panel, and gather 0 waited for; r2 is
    # left at the first gather the k steps ask for.
    for gather in range(min(gathers_ahead(plan), ceil_div(plan.k, plan.gather_k))):
        request_a(a, plan, gather_kind(plan, gather), upper=r0)
    a.nop(sig="ldtmu0")
    # The first multiply-add of each k finishes the previous k's last one: make it add 0.
    a.ldi(r0, 0)
    chunks(a, plan, variant, acc, masters, piece and plan.spread_leaves, drain, leaves_behind)
    if delta:
        a.ldi(r3, delta)
        a.sub(regs["buffer"], regs["buffer"], r3)
    if park:
        store(a, plan, variant, parking.store_rows(plan, acc))
        parking.park(a, plan, acc)
    else:
        store(a, plan, variant, acc)
