"""SGEMM on the QPUs: ``C = alpha * op(A) @ op(B) + beta * C`` in float32, row-major.

This is the model kernel of vc4nn; docs/sgemm.md explains the design and its performance. Read
this file top to bottom: the plan (what the host decides), the uniform stream (the contract
between host and kernel), then the kernel, built from small Python functions that each emit one
part of the program. Labels, loops and macros are plain Python; the program is generated for one
shape, transpose case and QPU count, and cached.

The idea: a QPU holds a tile of C in its 64 register-file registers (16 lanes x up to 63
registers; one register stays free for bookkeeping). For every k, a TMU gather brings the 16
values of the *vector operand* V[:, k] into r4, and the uniform stream brings the values of the
*scalar operand* S[k, :], one per instruction. Each instruction then does 16 multiply-adds:

    fadd acc[g-1], acc[g-1], r0 ; fmul r0, r4, uniform

the MUL ALU forms the product for register g while the ADD ALU adds the product of register g-1,
computed by the previous instruction: 32 flops per instruction, the QPU's peak (facts §4).
"""

import dataclasses
import functools
import heapq

import numpy as np

from asm import (isa, kernel, null, r0, r1, r2, r3, r4, r5,
                 r5rep, ra, rb, tmu0_s, unif_addr, uniform, vdw_setup, vdw_stride, vpm,
                 vpm_write_setup, vw_addr, vw_setup, vw_wait)

from ..errors import DeviceError
from . import transpose
from .common import GATHER_DEPTH, LANES, MAX_VDW_STRIDE, WORD, each_record, lane_addresses, zero

# The transpose phase's barrier (NT case only): the QPUs count "done" on one semaphore, QPU 0
# answers "go" on the other.
SEMA_DONE, SEMA_GO = 0, 1

# ---------------------------------------------------------------------------------------------
# Registers. The k loop uses every accumulator and all but one or two regfile registers:
# ---------------------------------------------------------------------------------------------
PRODUCT = r0        # fmul result, added to its accumulator by the next instruction
V_ADDR = r1         # per-lane TMU addresses of the next V column
S_ROW = r2          # address of the current S row; only element 0 counts for unif_addr
K_LEFT = r3         # k loop counter
V_COL = r4          # V[:, k], as ldtmu0 delivers it
STRIDE = r5         # a constant byte stride (S rows in the loop, C registers when gathering C)
REST = ra[31]       # address of the second half of the tile's descriptor (read after the loop)
V_K_STRIDE = rb[31]  # V's k stride when it is not a small immediate (TN): the tile loses a register
# Small-immediate ints reach 15 only; a stride of 4 bytes (one float) is the common case.
SMALL_STRIDE = WORD


def accumulators(needs_v_k_stride_register):
    """The C tile's registers, in order: every regfile register the k loop does not reserve.

    A and B sides may interleave in any order: each accumulator is read and written once per k,
    a whole k step apart, so the write-then-read rule (facts §2) never bites, and the uniform
    is read through whichever port the accumulator leaves free.
    """
    reserved = {REST.name, V_K_STRIDE.name} if needs_v_k_stride_register else {REST.name}
    return tuple(reg for rf in (ra, rb) for reg in rf if reg.name not in reserved)


# ---------------------------------------------------------------------------------------------
# The plan: everything the host decides before assembling.
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Layout:
    """Byte strides of the three operands along the tile's axes (see docs/sgemm.md).

    V[l, k] = v_base + l*v_lane + k*v_k  (TMU gather: any strides)
    S[k, g] = s_base + k*s_k + g*4       (uniform stream: contiguous along g)
    C[l, g] = c_base + l*c_lane + g*c_reg
    """

    lanes_are_rows: bool
    lane_extent: int
    reg_extent: int
    v_lane: int
    v_k: int
    s_k: int
    c_lane: int
    c_reg: int


@dataclasses.dataclass(frozen=True)
class SgemmPlan:
    """One generated program: a shape, a transpose case, a QPU count, and what alpha/beta need."""

    m: int
    n: int
    k: int
    trans_a: bool
    trans_b: bool
    num_qpus: int
    alpha_one: bool
    beta_zero: bool

    # -- the NT case runs as NN or TT after transposing one operand in the kernel -------------
    @property
    def transpose(self):
        """None, "a" or "b": which operand the kernel transposes into the workspace first.

        Only NT needs it (both operands are contiguous along k, the uniform stream needs one
        contiguous along the tile's registers). Transposing the smaller one costs less.
        """
        if not (self.trans_b and not self.trans_a):
            return None
        return "a" if self.m < self.n else "b"

    @property
    def workspace_words(self):
        return {None: 0, "a": self.m * self.k, "b": self.k * self.n}[self.transpose]

    @property
    def layout(self):
        m, n, k = self.m, self.n, self.k
        ta, tb = {None: (self.trans_a, self.trans_b), "a": (True, True),
                  "b": (False, False)}[self.transpose]
        if not tb:      # S = op(B) rows: lanes are rows of C, registers its columns
            v_lane, v_k = (WORD, m * WORD) if ta else (k * WORD, WORD)
            return Layout(True, m, n, v_lane, v_k, n * WORD, n * WORD, WORD)
        # ta and tb: S = op(A)^T rows = A^T rows, V = B^T; lanes are columns of C
        return Layout(False, n, m, k * WORD, WORD, m * WORD, WORD, n * WORD)

    @property
    def v_k_in_register(self):
        return self.layout.v_k != SMALL_STRIDE

    @property
    def tile_regs(self):
        """Registers of a full tile: 48, a multiple of 16 below the 62-63 free ones.

        The uniform stream is fetched in 64-byte lines and a QPU waits for each new line
        (facts §4 latencies; timing.uniform_miss_latency). A 63-float S row segment straddles
        5 lines for most tiles, a 48-float one that starts on a line boundary exactly 3: 25%
        fewer waits per multiply-add for 24% fewer registers, a net gain of about 12% on one
        QPU in the cycle model. Tiles start on a boundary when N (or M in the TT layout) is a
        multiple of 16, since device buffers are page aligned.
        """
        free = len(accumulators(self.v_k_in_register))
        return free - free % LANES

    @property
    def widths(self):
        """Tile widths (registers) with their own generated code: full tiles, then the edge."""
        return tuple(sorted({tile[3] for tile in self.tiles()}, reverse=True))

    def tiles(self):
        """(lane offset, lanes valid, register offset, width) of every tile, in an order that
        lets neighbouring QPUs (which share a slice's TMUs and caches) share V rows."""
        lay = self.layout
        out = []
        for l0 in range(0, lay.lane_extent, LANES):
            for g0 in range(0, lay.reg_extent, self.tile_regs):
                out.append((l0, min(LANES, lay.lane_extent - l0), g0,
                            min(self.tile_regs, lay.reg_extent - g0)))
        return out

    def check(self):
        """Limits of this kernel that are not the caller's fault but must be said clearly."""
        if (self.n - 1) * WORD > MAX_VDW_STRIDE:
            raise DeviceError(f"sgemm: N={self.n} is too wide for one VDW stride "
                              f"(at most {MAX_VDW_STRIDE // WORD + 1} columns)")
        if self.transpose:
            rows = self.m if self.transpose == "a" else self.n
            transpose.check_rows(rows, "sgemm: the transposed operand")


# ---------------------------------------------------------------------------------------------
# The uniform stream of one QPU: records the kernel reads in order (the host/kernel contract).
#   NT only:   [is QPU 0] then per transpose block: [1, base, k valid - 1, 16 row offsets,
#              vdw setup, vdw stride, address], then [0]
#   per tile width, per tile: [1, v base, lanes valid - 1, s base, address of part 2]
#                             part 2: [alpha] [beta, c base, lanes valid - 1]
#                                     per VDW block: [setup, stride, address]
#              then [0]
# ---------------------------------------------------------------------------------------------
def vdw_blocks(plan, c_tile_addr, lanes, width):
    """(setup, stride, address) of the DMA stores of one tile, staged at VPM row 0."""
    lay = plan.layout
    if not lay.lanes_are_rows:      # register g is a row of C, written into VPM row g
        return [(vdw_setup(units=width, depth=lanes, y=0), vdw_stride((plan.n - lanes) * WORD),
                 c_tile_addr)]
    blocks = []                     # register g is a column, written into VPM column g % 16
    for b in range(0, width, LANES):
        depth = min(LANES, width - b)
        blocks.append((vdw_setup(units=lanes, depth=depth, y=b), vdw_stride((plan.n - depth) * WORD),
                       c_tile_addr + b * WORD))
    return blocks


def deal(tiles, num_qpus):
    """Tiles per QPU: each tile, in order, to the QPU with the least work so far.

    Work is counted as instructions per k (width + 4), so full and edge tiles balance; plain
    round-robin would give every other QPU only edge tiles when the column count of tiles is
    even. Keeping the order lets QPUs of a slice work on neighbouring tiles at the same time.
    """
    load = [(0, q) for q in range(num_qpus)]
    per_qpu = [[] for _ in range(num_qpus)]
    for tile in tiles:
        work, q = heapq.heappop(load)
        per_qpu[q].append(tile)
        heapq.heappush(load, (work + tile[3] + 4, q))
    return per_qpu


def uniform_streams(plan, addresses, alpha, beta, stream_base):
    """Per QPU, the list of 32-bit uniforms. ``addresses``: bus addresses of a, b, c and the
    workspace; ``stream_base[q]``: where QPU q's stream will live (records point into it)."""
    a_addr, b_addr, c_addr, ws_addr = addresses
    lay = plan.layout
    v_addr, s_addr = (a_addr, b_addr) if lay.lanes_are_rows else (b_addr, a_addr)
    if plan.transpose:      # the transposed operand is the scalar one, read from the workspace
        s_addr = ws_addr
    per_qpu, n = deal(plan.tiles(), plan.num_qpus), plan.num_qpus
    streams = []
    for q in range(n):
        words = []
        if plan.transpose:
            src = a_addr if plan.transpose == "a" else b_addr
            rows = plan.m if plan.transpose == "a" else plan.n
            blocks = transpose.blocks(rows, plan.k)[q::n]
            words += [int(q == 0)] + transpose.records(rows, plan.k, src, ws_addr, blocks)
        for width in plan.widths:
            for l0, lanes, g0, w in per_qpu[q]:
                if w != width:
                    continue
                part2 = stream_base[q] + (len(words) + 5) * WORD
                words += [1, v_addr + l0 * lay.v_lane, lanes - 1, s_addr + g0 * WORD, part2]
                c_tile = c_addr + l0 * lay.c_lane + g0 * lay.c_reg
                if not plan.alpha_one:
                    words.append(float(alpha))
                if not plan.beta_zero:
                    words += [float(beta), c_tile, lanes - 1]
                for block in vdw_blocks(plan, c_tile, lanes, w):
                    words += list(block)
            words.append(0)
        streams.append(words)
    return streams


# ---------------------------------------------------------------------------------------------
# The kernel.
# ---------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=64)
def program_for(plan):
    """The assembled (and hazard-checked) program of a plan; assembled once per plan."""
    plan.check()
    return sgemm_kernel.assemble(plan)


@kernel
def sgemm_kernel(a, plan):
    if plan.transpose:
        transpose_phase(a, plan)
    if plan.v_k_in_register:
        a.ldi(V_K_STRIDE, plan.layout.v_k)
    for width in plan.widths:
        with a.scope(f"width{width}"):
            each_record(a, lambda: gemm_tile(a, plan, width))
    a.exit()


def gemm_tile(a, plan, width):
    """One tile of ``width`` registers: descriptor part 1, the k loop, scale, store."""
    lay, acc = plan.layout, accumulators(plan.v_k_in_register)[:width]
    lane_addresses(a, V_ADDR, lay.v_lane, K_LEFT)
    a.mov(S_ROW, uniform)
    a.mov(REST, uniform)
    a.ldi(r5rep, lay.s_k)
    zero(a, acc)
    # Ask for V[:, 0]; every later column is asked for one k ahead of its use.
    v_k = V_K_STRIDE if plan.v_k_in_register else lay.v_k
    a.add(V_ADDR, V_ADDR, v_k).mov(tmu0_s, V_ADDR)   # the MUL reads r1 before the ADD writes it
    # The loop's first instruction finishes the previous k's last multiply-add; make it add 0.
    a.ldi(PRODUCT, 0)
    if plan.k > 1:
        a.ldi(K_LEFT, plan.k - 1)
        a.label("k_loop")
        k_step(a, acc, v_k, prefetch=True, loop="k_loop")
    k_step(a, acc, v_k, prefetch=False, loop=None)
    # Finish the last multiply-add and point the uniform stream back at the descriptor.
    a.fadd(acc[-1], acc[-1], PRODUCT)
    a.mov(unif_addr, REST)
    a.nop()
    a.nop()
    scale_and_store(a, plan, acc)


def k_step(a, acc, v_k, prefetch, loop):
    """One k: 3 bookkeeping instructions, one multiply-add per register, and (in the loop) the
    branch, whose three delay slots are the last multiply-adds."""
    # S row k starts streaming; the next two instructions must not read uniforms (facts §2).
    # unif_addr exists on the A side only, so its partner op writes an accumulator. The same
    # instruction pops V[:, k] into r4 (the last multiply-add of k-1 has read the old r4); the
    # ldtmu signal cannot ride with a small immediate, so it goes here.
    a.add(S_ROW, S_ROW, STRIDE, sig="ldtmu0").mov(unif_addr, S_ROW)
    finish = a.fadd(acc[-1], acc[-1], PRODUCT)     # the previous k's last multiply-add
    if prefetch:    # ask for V[:, k+1]: 66 instructions before its ldtmu, over the TMU latency
        finish.mov(tmu0_s, V_ADDR)
        a.add(V_ADDR, V_ADDR, v_k)
    else:           # the last k: nothing more to ask for; the uniform gap still needs a slot
        a.nop()
    width = len(acc)
    # The branch goes as late as it can (its three delay slots are the last multiply-adds) but
    # after multiply-add 0, which decrements K_LEFT and sets the flags it tests.
    branch_at = max(1, width - isa.BRANCH_DELAY_SLOTS)
    for g in range(width):
        if loop and g == branch_at:
            a.branch(loop, cond="all_zc")
        if g == 0:
            mac = a.sub(K_LEFT, K_LEFT, 1, sf=True) if loop else None
        else:
            mac = a.fadd(acc[g - 1], acc[g - 1], PRODUCT)
        if mac is None:
            a.fmul(PRODUCT, V_COL, uniform)
        else:
            mac.fmul(PRODUCT, V_COL, uniform)
    if loop:
        if width == 1:
            a.branch(loop, cond="all_zc")
        for _ in range(isa.BRANCH_DELAY_SLOTS - (width - branch_at)):
            a.nop()                                 # narrow edge tiles: fill the delay slots


def scale_and_store(a, plan, acc):
    """Descriptor part 2: C = alpha*acc (+ beta*C), staged through the VPM, stored by the VDW."""
    alpha = r2
    if not plan.alpha_one:
        a.mov(alpha, uniform)
    if not plan.beta_zero:
        add_beta_c(a, plan, acc, alpha)
    scale_on_store = not plan.alpha_one and plan.beta_zero
    # The VPM is shared and generic access reaches 64 rows, one tile (facts §3): take turns.
    a.mutex_acquire()
    a.ldi(vw_setup, vpm_write_setup(y=0, horizontal=not plan.layout.lanes_are_rows))
    for reg in acc:
        if scale_on_store:
            a.fmul(vpm, reg, alpha)
        else:
            a.mov(vpm, reg)
    blocks = -(-len(acc) // LANES) if plan.layout.lanes_are_rows else 1
    for _ in range(blocks):
        a.mov(vw_setup, uniform)        # VDW setup
        a.mov(vw_setup, uniform)        # VDW stride
        a.mov(vw_addr, uniform)         # start the store
        a.read(vw_wait)                 # one store in flight at a time (facts §3)
    a.mutex_release()


def add_beta_c(a, plan, acc, alpha):
    """acc = alpha*acc + beta*C, gathering C one register at a time, GATHER_DEPTH ahead.

    Per register three instructions: pop C (and step the gather address), ask for the column
    GATHER_DEPTH ahead while forming beta*C, add. The stride is in r5 even when it would fit a
    small immediate, because the ldtmu signal cannot ride with one.
    """
    beta, scaled, c_addr = r3, r0, r1
    a.mov(beta, uniform)
    lane_addresses(a, c_addr, plan.layout.c_lane, scaled)
    a.ldi(r5rep, plan.layout.c_reg)
    width = len(acc)
    first = min(GATHER_DEPTH, width)
    for g in range(first):              # c_addr ends at the address of the last request
        if g + 1 < first:
            a.add(c_addr, c_addr, STRIDE).mov(tmu0_s, c_addr)   # the MUL reads the old c_addr
        else:
            a.mov(tmu0_s, c_addr)
    for g, reg in enumerate(acc):
        more = g + GATHER_DEPTH < width
        pop = a.add(c_addr, c_addr, STRIDE, sig="ldtmu0") if more else a.nop(sig="ldtmu0")
        if not plan.alpha_one:
            pop.fmul(reg, reg, alpha)
        beta_c = a.fmul(scaled, r4, beta)
        if more:
            beta_c.mov(tmu0_s, c_addr)
        a.fadd(reg, reg, scaled)


def transpose_phase(a, plan):
    """NT: copy the operand to transpose into the workspace as K x rows (the blocks of
    vc4nn/kernels/transpose.py), then meet at a barrier."""
    a.mov(rb[0], uniform)                           # 1 on QPU 0, which runs the barrier
    with a.scope("transpose"):
        each_record(a, lambda: transpose.block(a))
    barrier(a, plan.num_qpus, is_master=rb[0])


def barrier(a, num_qpus, is_master):
    """Every QPU says "done"; QPU 0 waits for all of them, then says "go" once per QPU.

    The VDW stores were waited for before "done", so after "go" the whole workspace is in memory.
    """
    a.sema_release(SEMA_DONE)
    with a.scope("barrier"):
        a.mov(null, is_master, sf=True)
        a.branch("wait", cond="all_zs")
        a.nop()
        a.nop()
        a.nop()
        for _ in range(num_qpus):
            a.sema_acquire(SEMA_DONE)
        for _ in range(num_qpus):
            a.sema_release(SEMA_GO)
        a.label("wait")
        a.sema_acquire(SEMA_GO)


def reference(a, b, c, alpha, beta, trans_a, trans_b):
    """float64 numpy reference (for tests and the benchmark)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    out = alpha * ((a.T if trans_a else a) @ (b.T if trans_b else b))
    if beta != 0:
        out = out + beta * np.asarray(c, dtype=np.float64)
    return out
