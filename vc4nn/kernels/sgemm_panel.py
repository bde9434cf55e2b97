"""SGEMM with a shared B panel: the high-throughput kernel for the cases where B is shared.

``C = alpha * op(A) @ B + beta * C`` (NN and TN), float32, row-major. docs/sgemm.md ("The panel
kernel") explains the design and its performance; vc4nn/kernels/sgemm.py is the general kernel
this one borrows its helpers from. Read it first: this file assumes its vocabulary.

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
"""

import collections
import dataclasses
import functools
import typing

from asm import (element_number, isa, kernel, null, r0, r1, r2, r3, r4, r5, r5rep, ra, rb,
                 tmu0_s, uniform, vdr_setup, vdw_setup, vpm, vpm_read_setup, vpm_write_setup,
                 vr_addr, vr_setup, vr_wait, vw_addr, vw_setup, vw_wait)

from .. import hardware
from .common import GATHER_DEPTH, LANES, WORD, lane_addresses, ops_then_branch, zero
from .epilogue import Epilogue, prepare_activation, write_vpm
from .sgemm import SEMA_DONE, SEMA_GO

# The barrier's other two semaphores (see boundary); sgemm.py uses only DONE and GO.
SEMA_RELAY, SEMA_ARRIVED = SEMA_GO + 1, SEMA_GO + 2

# By default a panel is 6 vectors (96 columns): 8 rows x 6 vectors = 48 accumulators per QPU,
# and with 12 QPUs the 96 rows of AlexNet conv1 in one pass (docs/sgemm.md: the bus table for
# W = 96). A plan may take another width (``panel_vectors``) and chunk depth (``chunk_depth``):
# rows x vectors <= ACCUMULATORS, and both chunk buffers plus one staging row per QPU within the
# VPM rows a QPU can read (isa.VPM_ROWS): 6 x 4, 8 x 3 (128 columns) or 12 x 2 k-rows.
PANEL_VECTORS = 6
ACCUMULATORS = 48               # registers for accumulators besides the 16 of bookkeeping
MAX_ROWS = 8                    # rows of A (of C) per QPU: lanes 0-7 of a two-k gather
CHUNK_ROWS = 4                  # k-rows per chunk: 2 x 4 x 6 = 48 VPM rows double-buffered
ROW_BYTES = LANES * WORD
SMALL_IMMEDIATES = range(-16, 16)
# A is gathered two k at a time when a chunk holds an even number of k-rows: lanes 0-7 hold
# A[rows, k], lanes 8-15 A[rows, k+1] (a QPU has at most 8 rows), which halves the TMU requests
# and the copies out of r4. A gather is asked for this many gathers ahead of its use: 4 k (or
# 3 single ones), well past the TMU latency and a line fill queued on the bus behind the other
# QPUs' fills and the chunk DMAs; at most that many requests are outstanding, within the FIFO
# depth of 4 (facts §5.13), and none reads past A (see KStep).
GATHERS_AHEAD = {1: 3, 2: 2}
# ROLE word (first word after "participates"): bit 31 = barrier master (so the N flag of the
# word tests it), bit 0 = loader. Any other QPU that does not load has role 0 (the Z flag).
ROLE_MASTER, ROLE_LOADER = 1 << 31, 1


def ceil_div(a, b):
    return -(-a // b)


# ---------------------------------------------------------------------------------------------
# The plan: everything the host decides before assembling.
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class PanelVariant:
    """The code of one kind of panel: ``vectors`` of B's columns starting at column ``start``.

    ``partial`` is (vector index, VPM x, depth) of the one vector that is stored only in part,
    or None. Two kinds of edge: when N >= 96 the last panel's window is shifted
    left to end at column N (its first vector overlaps the panel before and stores only its
    last ``depth`` lanes); when N < 96 is not a multiple of 16 the window starts at 0 and its
    last vector is loaded and stored with ``depth`` < 16 columns ("narrow").
    """

    vectors: int
    start: int
    partial: tuple = None
    narrow: bool = False


@dataclasses.dataclass(frozen=True)
class PanelPlan:
    m: int
    n: int
    k: int
    trans_a: bool
    num_qpus: int
    alpha_one: bool
    beta_zero: bool
    # The layers' fused bias / residual / activation (vc4nn/kernels/epilogue.py): the bias is
    # where the accumulators start, the residual is gathered and added before the store, the
    # activation is applied on the VPM write. It replaces alpha and beta (their registers).
    epilogue: Epilogue = Epilogue()
    # At most this many rows per QPU (1..MAX_ROWS): fewer keep the rows that the QPUs sharing a
    # TMU cache gather from aliasing (vc4nn/kernels/pointwise.py), at the price of more passes.
    max_rows: int = MAX_ROWS
    # The panel's width in vectors of 16 columns and the k-rows per chunk (see PANEL_VECTORS).
    panel_vectors: int = PANEL_VECTORS
    chunk_depth: int = CHUNK_ROWS

    def __post_init__(self):
        if not 1 <= self.max_rows <= MAX_ROWS:
            raise ValueError(f"max_rows must be 1..{MAX_ROWS}")
        if not 1 <= self.panel_vectors <= LANES:
            raise ValueError(f"panel_vectors must be 1..{LANES}")
        if self.chunk_depth < 1 or self.staging_y + self.num_qpus > isa.VPM_ROWS:
            raise ValueError(f"chunk_depth {self.chunk_depth} x panel_vectors "
                             f"{self.panel_vectors}, double-buffered, and {self.num_qpus} "
                             f"staging rows exceed the {isa.VPM_ROWS} VPM rows")
        offsets = [(row - 1) * self.panel_vectors for row in range(self.chunk_rows)]
        if any(offset not in SMALL_IMMEDIATES for offset in offsets):
            raise ValueError(f"chunk_depth {self.chunk_depth} x panel_vectors "
                             f"{self.panel_vectors}: the k-rows' VPM read setups lie too far "
                             f"apart for small-immediate offsets")
        if not self.epilogue.is_identity and not (self.alpha_one and self.beta_zero):
            raise ValueError("a panel plan with an epilogue takes alpha = 1 and beta = 0")

    # -- rows: R rows of C per QPU, in passes of (participating QPUs) x R rows ----------------
    @property
    def rows(self):
        """R: as many as fit (8, or fewer accumulators of wider panels) unless fewer balance the
        QPUs better in the last pass."""
        most = min(self.max_rows, ACCUMULATORS // self.panel_vectors)
        passes = ceil_div(self.m, most * self.num_qpus)
        return ceil_div(self.m, self.num_qpus * passes)

    @property
    def blocks(self):
        return ceil_div(self.m, self.rows)

    @property
    def qpus(self):
        """QPUs that take part (the others exit at once): there is no point in more than the
        row blocks, since every participant computes a whole block on every panel."""
        return min(self.num_qpus, self.blocks)

    @property
    def passes(self):
        return ceil_div(self.blocks, self.qpus)

    # -- k: chunks of Kc k-rows, one k-row loaded by each of the first Kc QPUs ----------------
    @property
    def chunk_rows(self):
        return min(self.chunk_depth, self.qpus)

    @property
    def buffer_rows(self):
        """VPM rows of one chunk buffer; buffer 1 follows buffer 0."""
        return self.chunk_depth * self.panel_vectors

    @property
    def staging_y(self):
        """QPU q stages C in VPM row staging_y + q, after both buffers."""
        return 2 * self.buffer_rows

    @property
    def row_base(self):
        """r3 during a chunk: the read setup of its k-row 1, so that every k-row's setup is r3
        plus a small immediate (-6, 0, 6, 12 for 6-vector panels)."""
        return self.panel_vectors

    @property
    def chunks(self):
        return ceil_div(self.k, self.chunk_rows)

    def loader_slot(self, q):
        """The k-row of each chunk QPU ``q`` loads, or None. The loaders are QPUs 1..Kc: not
        the master, whose barrier work is on everybody's path, unless every QPU must load
        (QPUs <= 4). A loader reads its load words just after the barrier, and the emulator hands
        out the "go" tokens in QPU order: the first ones out find the bus free of the others'
        loads (loaders as the last QPUs waited up to 5% of the run for their uniforms)."""
        first = 1 if self.qpus > self.chunk_rows else 0
        return q - first if first <= q < first + self.chunk_rows else None

    @property
    def gather_k(self):
        """k per TMU gather of A: 2 when every chunk's k-rows pair up (see GATHERS_AHEAD)."""
        return 2 if self.chunk_rows % 2 == 0 else 1

    @property
    def last_chunk_rows(self):
        return self.k - (self.chunks - 1) * self.chunk_rows

    # -- n: full panels, then one edge variant ------------------------------------------------
    @property
    def full_panels(self):
        return self.n // (self.panel_vectors * LANES)

    @property
    def edge(self):
        """The variant of the last, narrower panel, or None when N is a multiple of 96."""
        width = self.panel_vectors * LANES
        rest = self.n % width
        if not rest:
            return None
        vectors = ceil_div(rest, LANES)
        tail = rest - (vectors - 1) * LANES          # columns of the partial vector
        if self.full_panels:                         # shift the window to end at column N
            start = self.n - vectors * LANES
            partial = None if tail == LANES else (0, LANES - tail, tail)
            return PanelVariant(vectors, start, partial)
        partial = None if tail == LANES else (vectors - 1, 0, tail)
        return PanelVariant(vectors, 0, partial, narrow=partial is not None)

    @property
    def variants(self):
        full = [PanelVariant(self.panel_vectors, 0)] if self.full_panels else []
        return tuple(full + ([self.edge] if self.edge else []))

    def panel_starts(self):
        """(variant, first column) of every panel, in the order the kernel runs them."""
        width = self.panel_vectors * LANES
        out = [(self.variants[0], p * width) for p in range(self.full_panels)]
        if self.edge:
            out.append((self.edge, self.edge.start))
        return out

    # -- strides of op(A) ---------------------------------------------------------------------
    @property
    def a_lane(self):
        """Bytes between rows of op(A) (the gather's lanes)."""
        return WORD if self.trans_a else self.k * WORD

    @property
    def a_k(self):
        """Bytes between k of op(A) (the gather address step)."""
        return self.m * WORD if self.trans_a else WORD


def deepest_chunk(vectors, num_qpus):
    """The most k-rows per chunk a panel of ``vectors`` can take on ``num_qpus`` QPUs (see
    PanelPlan's checks: VPM rows and small-immediate read setups)."""
    rows = (isa.VPM_ROWS - num_qpus) // (2 * vectors)
    while rows > 2 and (rows - 2) * vectors not in SMALL_IMMEDIATES:
        rows -= 1
    return rows


# What one chunk boundary costs besides its k-rows, in instructions' time (barrier, loads,
# waits), and what a panel costs besides its chunks (bias, store): fitted to the cycle model
# (pi_zero, 12 QPUs), 14x14x512->512 with 6- and 8-vector panels.
BOUNDARY_COST = 40
PANEL_COST = 30


def issue_estimate(plan):
    """Instructions' time one QPU spends on a plan, roughly: per k of each panel, R broadcasts
    and R x V multiply-adds plus the gather's copy and request, per chunk BOUNDARY_COST, per
    panel PANEL_COST plus its stores. For choosing a panel width, not for reporting."""
    per_k_gather = 2 / plan.gather_k
    total = 0
    for variant, _ in plan.panel_starts():
        k_loop = plan.k * (plan.rows * (variant.vectors + 1) + per_k_gather)
        total += k_loop + plan.chunks * BOUNDARY_COST + PANEL_COST + 6 * plan.rows * variant.vectors
    return total * plan.passes


def a_rows_per_set(plan):
    """How many of the rows of A that one gather reads (NN: K floats apart) fall on the same set
    of the TMU cache (vc4nn/hardware.py); more than its ways and every gather misses. With K a
    multiple of 256, as in most of MobileNet's pointwise layers: K = 256 puts rows g and g+4
    together, K = 1024 all of them. The rows of A^T that a TN gather reads are one row, so the
    SGEMM API can transpose such an A on the GPU first (transpose_a_first)."""
    if plan.trans_a:
        return 1
    line, ways = hardware.TMU_CACHE_LINE_BYTES, hardware.TMU_CACHE_WAYS
    sets = hardware.TMU_CACHE_BYTES // (line * ways)
    return max(collections.Counter(g * plan.a_lane // line % sets for g in range(plan.rows))
               .values())


def transpose_a_first(plan):
    """Whether the SGEMM API should transpose A on the GPU and run the TN path instead: when A's
    rows alias (a_rows_per_set) on more than 4 QPUs, or 4 rows or more share a set on 3 or 4
    QPUs. With fewer QPUs the misses are served by the L2 without queueing on the bus and the
    transpose launch costs more than it saves. Measured in the cycle model (pi1; clocks direct
    -> transposed, the transpose launch included):

    - 12 QPUs: 49x128x256 285 612 -> 124 576; 96x96x256 279 704 -> 135 992; 96x192x1024
      2 269 536 -> 786 300; 392x64x256 1 079 072 -> 528 400. 8 QPUs: 49x128x256 241 480 ->
      139 512. 6 QPUs: 96x192x256 605 908 -> 339 056.
    - 4 QPUs: 49x128x256 (2 rows per set) 215 220 -> 240 490; 96x192x256 (2) 424 810 ->
      469 108; 96x192x512 (4) 1 433 164 -> 950 292; 49x128x1024 (7) 1 523 512 -> 971 010.
      3 QPUs: 49x128x256 (2) 301 734 -> 330 660; 49x128x1024 (6) 2 565 274 -> 1 279 998.
    - 2 QPUs: 49x128x1024 1 910 230 -> 1 978 288; 96x192x512 1 781 684 -> 1 901 896. 1 QPU:
      49x128x256 850 346 -> 902 832; 49x128x1024 3 301 802 -> 3 513 600.
    """
    shared = a_rows_per_set(plan)
    ways = hardware.TMU_CACHE_WAYS
    return (plan.qpus > 4 and shared > ways) or (plan.qpus > 2 and shared >= 4 * ways)


# ---------------------------------------------------------------------------------------------
# The uniform stream of one QPU (the host/kernel contract), in the order the kernel reads it:
#   [participates]                         0: this QPU exits at once
#   [role, staging write setup, VDW setup full vector, VDW setup partial vector] [alpha] [beta]
#   [residual: its address - C's address]
#   loaders: the DMA pieces of chunk 0, each [vdr setup, address]
#   per pass: [A address of the block's first row, rows valid - 1, rows to store (0: a pass
#             this QPU only helps with), C address of the block's row 0, (bias) the bias's
#             address - that C address]
#      per panel: [A's gather step in bytes (negative: k runs backwards), bytes to its first
#                 k, (two-k gathers) A's k step]
#         per chunk: loaders: the DMA pieces of the chunk after it
# ---------------------------------------------------------------------------------------------
def dma_pieces(plan, variant, slot, buffer):
    """(vdr setup, column offset) of the loads that bring one k-row of a panel into ``slot``."""
    y = buffer * plan.buffer_rows + slot * plan.panel_vectors
    pitch = ROW_BYTES
    if not variant.narrow:
        return [(vdr_setup(variant.vectors, LANES, y, pitch=pitch), 0)]
    full = variant.vectors - 1          # narrow: the last vector has fewer than 16 columns
    pieces = [(vdr_setup(full, LANES, y, pitch=pitch), 0)] if full else []
    return pieces + [(vdr_setup(1, variant.partial[2], y + full, pitch=pitch), full * LANES)]


def pieces_per_load(plan):
    """DMA loads per k-row: the same for every chunk, since a narrow panel is the only panel."""
    return len(dma_pieces(plan, plan.variants[-1], 0, 0))


def panel_sequence(plan):
    """Every panel the QPUs run together, in order: (variant, first column, reversed).

    Every other panel runs k backwards, so it starts on the k where the panel before ended:
    the lines of A the QPUs gathered last are still in the shared L2 (timing.l2_cache_bytes,
    ~32 KB) and the new panel's first ~70 k of A cost no bus time (docs/sgemm.md)."""
    panels = [(variant, col) for _ in range(plan.passes) for variant, col in plan.panel_starts()]
    return [(variant, col, i % 2 == 1) for i, (variant, col) in enumerate(panels)]


def panel_direction(plan, reverse):
    """The panel's uniforms, in the order the kernel reads them: bytes per gather step of A,
    bytes from A's k = 0 to the panel's first k, and (two-k gathers) bytes per k."""
    step = -plan.a_k if reverse else plan.a_k
    words = [(step * plan.gather_k) & 0xFFFFFFFF, (plan.k - 1) * plan.a_k if reverse else 0]
    return words + ([step & 0xFFFFFFFF] if plan.gather_k == 2 else [])


def chunk_sequence(plan):
    """Every chunk the QPUs run together, in order: (variant, first column, reversed, index of
    its first k-row along the panel's direction)."""
    return [(variant, col, reverse, c * plan.chunk_rows)
            for variant, col, reverse in panel_sequence(plan) for c in range(plan.chunks)]


def load_words(plan, b_addr, chunk, index, slot):
    """Uniform words of loader ``slot`` for one chunk (the global ``index``-th one): each piece
    [setup, address]. k-rows past the panel's end (in its last chunk) reload its last k-row
    into a slot nobody reads, so every loader always issues the same number of loads."""
    variant, col, reverse, first = chunk
    step = min(first + slot, plan.k - 1)
    k = plan.k - 1 - step if reverse else step
    words = []
    for setup, offset in dma_pieces(plan, variant, slot, index % 2):
        words += [setup, b_addr + (k * plan.n + col + offset) * WORD]
    return words


def uniform_streams(plan, addresses, alpha, beta, bias=None, residual=None):
    """Per QPU, the list of 32-bit uniforms. ``addresses``: bus addresses of a, b and c;
    ``bias``, ``residual``: bus addresses of the epilogue's operands, when the plan has them."""
    a_addr, b_addr, c_addr = addresses
    chunks = chunk_sequence(plan)
    # A harmless extra load after the last chunk keeps the boundary code the same for every
    # chunk: it refills the buffer of the chunk before the last one, which nobody reads again.
    loads_after = chunks[1:] + chunks[:1]
    partial = next((v.partial for v in plan.variants if v.partial), None)
    streams = []
    for q in range(plan.num_qpus):
        if q >= plan.qpus:
            streams.append([0])
            continue
        slot = plan.loader_slot(q)
        loader = slot is not None
        role = (ROLE_MASTER if q == 0 else 0) | (ROLE_LOADER if loader else 0)
        y = plan.staging_y + q
        words = [1, role, vpm_write_setup(y), vdw_setup(units=1, depth=LANES, y=y),
                 vdw_setup(units=1, depth=partial[2], y=y, x=partial[1]) if partial else 0]
        if not plan.alpha_one:
            words.append(float(alpha))
        if not plan.beta_zero:
            words.append(float(beta))
        if plan.epilogue.residual:
            words.append((residual - c_addr) & 0xFFFFFFFF)
        if loader:
            words += load_words(plan, b_addr, chunks[0], 0, slot)
        panels = iter(panel_sequence(plan))
        index = 0
        for p in range(plan.passes):
            block = min(p * plan.qpus + q, plan.blocks - 1)     # past the end: repeat the last
            m0 = block * plan.rows
            store = p * plan.qpus + q < plan.blocks
            words += [a_addr + m0 * plan.a_lane,
                      min(plan.rows, plan.m - m0) - 1, min(plan.rows, plan.m - m0) if store else 0,
                      c_addr + m0 * plan.n * WORD]
            if plan.epilogue.bias:
                words.append((bias - c_addr - m0 * plan.n * WORD) & 0xFFFFFFFF)
            for _ in plan.panel_starts():
                words += panel_direction(plan, next(panels)[2])
                for _ in range(plan.chunks):
                    if loader:
                        words += load_words(plan, b_addr, loads_after[index], index + 1, slot)
                    index += 1
        streams.append(words)
    return streams


# ---------------------------------------------------------------------------------------------
# Registers. Accumulators r0-r5 all have a job in the k loop:
#   r0 product (added by the next instruction)   r1 the current gather of A (8 rows x 1-2 k)
#   r2 TMU address of the next gather to ask for r3 VPM read setup of the chunk's k-row 1
#   r4 the next gather as ldtmu0 delivers it     r5 the broadcast scalar A[m0+g, k]
# (r5 is dead between chunks: a relay keeps the address of its next load there across the
# barrier, see relay.)
# The regfile holds the R x V accumulators and the bookkeeping below. A counter decremented
# with a small immediate must be on regfile A (a small-immediate instruction cannot read
# regfile B, facts §1), and so must acc[g][V-1]: it is added in the instruction that rotates
# (the rotation amount is a small immediate).
# ---------------------------------------------------------------------------------------------
# role is tested with a small immediate and toggle is xored with the B-side buffer: both on
# regfile A too.
A_SIDE_BOOKKEEPING = ("buffer", "chunks_left", "panels_left", "passes_left", "a_row", "store",
                      "role")


def bookkeeping_names(plan):
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
    return names + ["a_step"]


@functools.lru_cache(maxsize=64)
def registers(plan):
    """(bookkeeping name -> register, free A-side registers, free B-side registers)."""
    a_free, b_free = list(ra), list(rb)
    regs = {name: a_free.pop() for name in A_SIDE_BOOKKEEPING}
    regs.update({name: b_free.pop() for name in bookkeeping_names(plan)})
    return regs, tuple(a_free), tuple(b_free)


def accumulators(plan, vectors):
    """acc[g][j]: row g of the QPU's block, vector j of the panel. Column V-1 on regfile A (see
    above); the others alternate sides, which lets any of them pair with a vpm read."""
    _, a_free, b_free = registers(plan)
    a_free, b_free = list(a_free), list(b_free)
    acc = [[None] * vectors for _ in range(plan.rows)]
    for g in range(plan.rows):
        acc[g][vectors - 1] = a_free.pop(0)
    pool = [reg for pair in zip(a_free, b_free) for reg in pair]
    pool += a_free[len(b_free):] + b_free[len(a_free):]
    for g in range(plan.rows):
        for j in range(vectors - 1):
            acc[g][j] = pool.pop(0)
    return acc


# ---------------------------------------------------------------------------------------------
# The kernel.
# ---------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=64)
def program_for(plan):
    """The assembled (and hazard-checked) program of a plan; assembled once per plan."""
    return panel_kernel.assemble(plan)


@kernel
def panel_kernel(a, plan):
    regs, _, _ = registers(plan)
    masters = []                # the master's barrier code of each boundary, placed after exit
    a.mov(null, uniform, sf=True)                   # 0: not needed for this shape
    a.branch("exit", cond="all_zs")
    a.nop()
    a.nop()
    a.nop()
    for name in ("role", "stage_w", "vdw_full", "vdw_part"):
        a.mov(regs[name], uniform)
    if not plan.alpha_one:
        a.mov(regs["alpha"], uniform)
    if not plan.beta_zero:
        a.mov(regs["beta"], uniform)
    if plan.epilogue.residual:
        a.mov(regs["residual"], uniform)
    # The boundary before each chunk toggles the buffer first: start on buffer 1's setup.
    vectors = plan.panel_vectors
    a.ldi(regs["buffer"], vpm_read_setup(vectors, plan.buffer_rows))
    a.ldi(regs["toggle"], vpm_read_setup(vectors, 0) ^ vpm_read_setup(vectors, plan.buffer_rows))
    a.and_(null, regs["role"], ROLE_LOADER, sf=True)
    with a.scope("first_load"):
        issue_loads(a, plan)
    a.ldi(regs["passes_left"], plan.passes)
    a.label("pass")
    lane_addresses(a, regs["a_row"], plan.a_lane, r3, group=MAX_ROWS)     # reads 2 uniforms
    a.mov(regs["store"], uniform)
    a.mov(regs["c_panel"], uniform)
    if plan.epilogue.bias:
        a.mov(regs["bias"], uniform)
    panel_bytes = vectors * LANES * WORD
    if plan.full_panels:
        a.ldi(regs["panels_left"], plan.full_panels)
        a.label("panel")
        with a.scope("full"):
            panel(a, plan, plan.variants[0], masters)
        a.ldi(r3, panel_bytes)
        a.add(regs["c_panel"], regs["c_panel"], r3)
        a.sub(regs["panels_left"], regs["panels_left"], 1, sf=True)
        a.branch("panel", cond="all_zc")
        a.nop()
        a.nop()
        a.nop()
    if plan.edge:           # c_panel is at column full_panels * 96: move to the edge window
        a.ldi(r3, (plan.edge.start - plan.full_panels * panel_bytes // WORD) * WORD)
        a.add(regs["c_panel"], regs["c_panel"], r3)
        with a.scope("edge"):
            panel(a, plan, plan.edge, masters)
    a.sub(regs["passes_left"], regs["passes_left"], 1, sf=True)
    a.branch("pass", cond="all_zc")
    a.nop()
    a.nop()
    a.nop()
    a.read(vr_wait)                 # the extra load after the last chunk (see uniform_streams)
    a.read(vw_wait)                 # the last store of C (store_row does not wait for its own)
    a.label("exit")
    a.exit()
    for emit in masters:
        emit()


def issue_loads(a, plan):
    """Loaders (flags: Z clear) start the DMA pieces of one chunk, read from the uniform stream.
    The flags must hold ``role``'s test."""
    a.branch("skip", cond="all_zs")
    a.nop()
    a.nop()
    a.nop()
    for _ in range(pieces_per_load(plan)):
        a.mov(vr_setup, uniform)
        a.mov(vr_addr, uniform)
    a.label("skip")


class KStep(typing.NamedTuple):
    """What one k does with A, besides its multiply-adds.

    ``half``: which lanes of the gather hold this k (0: lanes 0-7, 1: lanes 8-15). ``request``:
    on the first k of a gather, ask for the gather GATHERS_AHEAD ahead: "full", or "single" for
    a last gather with one k (odd K), whose upper lanes then repeat the lower ones instead of
    reading past A. ``pop``: on the last k of a gather, wait for the next gather into r4."""

    half: int
    request: typing.Optional[str]
    pop: bool


def gather_kind(plan, gather):
    """"single" for a last two-k gather that holds one k (odd K), else "full"."""
    single = plan.gather_k == 2 and gather * 2 + 1 == plan.k
    return "single" if single else "full"


def k_kinds(plan):
    """The KStep of every k of a panel, in the order the panel runs them."""
    width, ahead = plan.gather_k, GATHERS_AHEAD[plan.gather_k]
    gathers = ceil_div(plan.k, width)
    out = []
    for k in range(plan.k):
        gather, half = divmod(k, width)
        request = gather_kind(plan, gather + ahead) if half == 0 and gather + ahead < gathers else None
        out.append(KStep(half, request, half == width - 1 and k + 1 < plan.k))
    return out


def steady_kinds(plan):
    """The KSteps of a chunk in the middle of a panel: the chunk loop's body."""
    width = plan.gather_k
    return [KStep(row % width, "full" if row % width == 0 else None, row % width == width - 1)
            for row in range(plan.chunk_rows)]


def count_row(plan):
    """The k-row whose first instruction steps the chunk loop's counter: the first after row 0
    that copies a gather (a free ADD slot next to the copy), else row 1 on its own."""
    rows = [row for row, kind in enumerate(steady_kinds(plan)) if row and kind.half == 0]
    return rows[0] if rows else min(1, plan.chunk_rows - 1)


def request_a(a, plan, kind, sig=None, upper=None):
    """Ask for one gather of A at r2 and step r2 to the next (the MUL reads r2 before the ADD
    writes it). A "single" gather is the last: its upper lanes repeat the lower ones, taking
    off ``upper`` (lane_k unless given)."""
    regs = registers(plan)[0]
    if kind == "single":
        return a.sub(tmu0_s, r2, regs["lane_k"] if upper is None else upper, sig=sig)
    return a.add(r2, r2, regs["a_step"], sig=sig).mov(tmu0_s, r2)


def panel(a, plan, variant, masters):
    """One panel of C (R rows x the variant's vectors): its chunks, then the store."""
    regs = registers(plan)[0]
    acc = accumulators(plan, variant.vectors)
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
    # The first GATHERS_AHEAD gathers asked for once per panel, and gather 0 waited for; r2 is
    # left at the first gather the k steps ask for.
    for gather in range(min(GATHERS_AHEAD[plan.gather_k], ceil_div(plan.k, plan.gather_k))):
        request_a(a, plan, gather_kind(plan, gather), upper=r0)
    a.nop(sig="ldtmu0")
    # The first multiply-add of each k finishes the previous k's last one: make it add 0.
    a.ldi(r0, 0)
    kinds, kc = k_kinds(plan), plan.chunk_rows
    chunk_kinds = [kinds[c * kc:(c + 1) * kc] for c in range(plan.chunks)]
    # The chunks in the middle of the panel are one loop; the last chunks, whose k stop asking
    # for gathers, are generated one by one. A chunk's k are unrolled: no k counter, and the
    # read setups of each k-row are small-immediate offsets from r3 (see k_step).
    steady = 0
    while steady < plan.chunks - 1 and chunk_kinds[steady] == steady_kinds(plan):
        steady += 1
    if steady:
        a.ldi(regs["chunks_left"], steady)
        a.label("chunk")
        boundary(a, plan, masters)
        for row, kind in enumerate(steady_kinds(plan)):
            k_step(a, plan, variant, acc, kind, row, row + 1 == kc, loop="chunk")
    for ks in chunk_kinds[steady:]:
        with a.scope():
            boundary(a, plan, masters)
            for row, kind in enumerate(ks):
                k_step(a, plan, variant, acc, kind, row, row + 1 == len(ks))
    a.fadd(acc[-1][-1], acc[-1][-1], r0)
    if delta:
        a.ldi(r3, delta)
        a.sub(regs["buffer"], regs["buffer"], r3)
    store(a, plan, variant, acc)


def boundary(a, plan, masters):
    """Before each chunk: finish my load of it, meet the others, start my load of the next.

    The barrier covers both conditions at once: the chunk's loads were waited for by their
    issuers before they arrived, and nobody reads the previous chunk any more, so its buffer is
    free for the next chunk's loads. The master (QPU 0) is the QPU everyone waits for: it starts
    a chunk after handing out "go" and counts the others' arrivals after computing it, so its
    semaphore instructions are on every chunk's path, and the relays (the loaders other than the
    master) take some of them over:

    - arrive: every QPU but the master releases ARRIVED. Each relay acquires
      ``relay_counts(plan)[0]`` ARRIVED tokens (its own and some leaves', whichever) and then
      releases DONE; the master acquires the remaining ARRIVED tokens and one DONE per relay.
      That consumes exactly one ARRIVED per other QPU, so the master passes when all arrived.
    - go: the master releases RELAY once per relay and GO for some leaves; each relay, in the
      instruction after it gets its RELAY token, releases GO for ``relay_counts(plan)[1]``
      leaves. Exactly one GO per leaf.

    Every token is released while the QPUs it is for are already waiting for it (they arrived,
    or the master would not have passed) and nothing that can stall lies between a relay's
    RELAY and its GO releases, so a QPU gets its token within a few instructions, long before
    anyone could finish a chunk and ask again: the tokens of two chunks are never outstanding
    at once and one semaphore per kind suffices (see ``relay`` for what broke this once).
    Leaves fall through; the master and the relays branch to their code, placed after the end
    of the program (``masters``). Flat arrival, with the master acquiring one DONE per QPU and
    releasing one GO per QPU, measured 15.00 GFLOPS on the quick AlexNet shape, this 15.22.
    """
    regs = registers(plan)[0]
    number = len(masters)
    with a.scope():
        a.mov(null, regs["role"], sf=True)              # N: master; Z: a leaf; else a relay
        a.branch(f"master{number}", cond="all_ns")
        a.xor(regs["buffer"], regs["buffer"], regs["toggle"])   # delay slots: the next buffer
        a.nop()
        a.add(r3, regs["buffer"], plan.row_base)                     # and r3 for the k steps
        if relays(plan):
            a.branch(f"relay{number}", cond="all_zc")
        # (delay slots of the relay branch) a relay's load of this chunk must be done before it
        # arrives; vr_wait returns at once on a leaf, which has no load in flight.
        a.read(vr_wait)
        a.sema_release(SEMA_ARRIVED)
        if relays(plan):
            a.nop()
        a.sema_acquire(SEMA_GO)                         # leaves
        back = a.label("back")
    masters.append(functools.partial(master, a, plan, number, back))
    if relays(plan):
        masters.append(functools.partial(relay, a, plan, number, back))


def relays(plan):
    """The relays: the loaders other than the master (see boundary)."""
    return [q for q in range(1, plan.qpus) if plan.loader_slot(q) is not None]


def relay_counts(plan):
    """(ARRIVED tokens each relay acquires, GO tokens each relay releases): the same for every
    relay, since they run the same code; the master does the rest (``master_counts``)."""
    count = len(relays(plan))
    if not count:
        return 0, 0
    others = plan.qpus - 1
    return others // count, (others - count) // count


def master_counts(plan):
    """(ARRIVED tokens, GO tokens) the master acquires / releases itself."""
    arrived, go = relay_counts(plan)
    count = len(relays(plan))
    return plan.qpus - 1 - arrived * count, plan.qpus - 1 - count - go * count


def load_ops(a, plan):
    """The DMA pieces of this QPU's k-row of the next chunk, read from the uniform stream."""
    ops = []
    for _ in range(pieces_per_load(plan)):
        ops += [lambda: a.mov(vr_setup, uniform), lambda: a.mov(vr_addr, uniform)]
    return ops


def master(a, plan, number, back):
    """The master's part of one boundary's barrier (and its loads, when it loads)."""
    arrived, go = master_counts(plan)
    count = len(relays(plan))
    a.label(f"master{number}")
    loads, wait = [], []
    if plan.loader_slot(0) is not None:     # its load of this chunk, before anyone may read it
        loads, wait = load_ops(a, plan), [lambda: a.read(vr_wait)]
    ops_then_branch(a, wait + [lambda: a.sema_acquire(SEMA_ARRIVED)] * arrived
                    + [lambda: a.sema_acquire(SEMA_DONE)] * count
                    + [lambda: a.sema_release(SEMA_RELAY)] * count
                    + [lambda: a.sema_release(SEMA_GO)] * go + loads, back)


def relay(a, plan, number, back):
    """A relay's part of one boundary's barrier: arrivals, its "go", its leaves' "go", its loads.

    Nothing that can stall (a uniform read of the load words waits for a line fill, possibly
    queued behind the other relays' DMAs) may lie between its DONE and its RELAY, nor between
    its RELAY and its leaves' GO: a token released while the QPU it is for is not yet waiting
    can be taken at the next barrier by a QPU already through this one. The emulator's race
    check caught both: a GO taken by a fast leaf, and, in a revision that read the load words
    between DONE and RELAY, a RELAY taken by a fast relay (40x100x256 on 10 QPUs). So the load
    words of the first DMA piece are read after the arrivals and before DONE: the setup into
    vr_setup (the previous load was waited for), the address into r5, which is dead between
    chunks (see registers), and vr_addr is written after the GO releases.
    """
    arrived, go = relay_counts(plan)
    a.label(f"relay{number}")
    early = [lambda: a.mov(vr_setup, uniform), lambda: a.mov(r5rep, uniform)]
    late = [lambda: a.mov(vr_addr, r5)] + load_ops(a, plan)[2:]
    ops_then_branch(a, [lambda: a.sema_acquire(SEMA_ARRIVED)] * arrived + early
                    + [lambda: a.sema_release(SEMA_DONE), lambda: a.sema_acquire(SEMA_RELAY)]
                    + [lambda: a.sema_release(SEMA_GO)] * go + late, back)


def k_step(a, plan, variant, acc, kind, row, last_row, loop=None):
    """The k of k-row ``row`` of a chunk: up to 2 bookkeeping instructions, then per row g of A
    the broadcast of A[m0+g, k] and its V multiply-adds. ``kind``: a KStep.

    Group g's VPM reads are queued (facts §3: two setups) by group g-1's first multiply-add,
    and group 0's by the previous k-row's last group, except on a chunk's first k-row (the
    chunk before had no next k-row to queue). r3 is the setup of k-row 1 (see boundary), so
    every k-row's setup is r3 plus a small immediate. ``loop``: the chunk loop's label; its
    counter is stepped in a free ADD slot (count_row) and its branch goes 3 instructions
    before the end of the last k-row (the delay slots are multiply-adds)."""
    regs = registers(plan)[0]
    rows, vectors = plan.rows, variant.vectors
    count_here = loop and row == count_row(plan)

    def setup(for_row):
        """(emit(sig), small) of an instruction that queues reads of ``for_row`` and multiplies."""
        offset = for_row * plan.panel_vectors - plan.row_base
        if not offset:
            return lambda sig: a.mov(vr_setup, r3, sig=sig).fmul(r0, r5, vpm), False
        return lambda sig: a.add(vr_setup, r3, offset, sig=sig).fmul(r0, r5, vpm), True

    def count(sig):
        return a.sub(regs["chunks_left"], regs["chunks_left"], 1, sf=True, sig=sig)

    def first(sig):         # group 0's reads or the loop count, and a new gather to r1
        if row == 0:
            ins = a.add(vr_setup, r3, -plan.row_base, sig=sig)
        elif count_here:
            ins = count(sig)
        else:
            return a.mov(r1, r4, sig=sig)
        return ins.mov(r1, r4) if kind.half == 0 else ins   # r1: rotations read it (§5.12)

    # Each step: (emit(sig), True if it uses a small immediate, which excludes a signal).
    steps = []
    if row == 0 or count_here:
        steps.append((first, True))
    elif kind.half == 0:
        steps.append((first, False))
    if kind.request:
        steps.append((lambda sig: request_a(a, plan, kind.request, sig), False))
    if count_here and row == 0:
        steps.append((count, True))
    flags_at = len(steps) if count_here else 0
    prev = acc[-1][-1]
    for g in range(rows):
        rotate = (LANES - MAX_ROWS * kind.half - g) % LANES or None    # element g -> 0
        steps.append((lambda sig, prev=prev, rotate=rotate:
                      a.fadd(prev, prev, r0, sig=sig).v8min(r5rep, r1, r1, rotate=rotate), True))
        last_rotation = len(steps) - 1
        for j in range(vectors):
            if j == 0 and g + 1 < rows:     # queue the next group's reads
                steps.append(setup(row))
            elif j == 0 and not last_row:   # last group: queue the next k-row's group 0
                steps.append(setup(row + 1))
            elif j == 0:
                steps.append((lambda sig: a.fmul(r0, r5, vpm, sig=sig), False))
            else:
                steps.append((lambda sig, reg=acc[g][j - 1]:
                              a.fadd(reg, reg, r0, sig=sig).fmul(r0, r5, vpm), False))
        prev = acc[g][-1]
    nop = (lambda sig: a.nop(sig=sig), False)
    # ldtmu0 pops A(k+1) after the last rotation has read r1 and on an instruction without a
    # small immediate; a one-vector panel has none, so it gets a nop for it.
    if kind.pop and all(small for _, small in steps[last_rotation + 1:]):
        steps.append(nop)
    branch = loop and last_row
    if branch:
        branch_at = max(len(steps) - isa.BRANCH_DELAY_SLOTS, flags_at)
        steps.insert(branch_at, None)
        steps += [nop] * (branch_at + 1 + isa.BRANCH_DELAY_SLOTS - len(steps))
    pop_at = max(i for i, step in enumerate(steps) if step is not None and not step[1])
    for i, step in enumerate(steps):
        if step is None:
            a.branch(loop, cond="all_zc")
        else:
            step[0]("ldtmu0" if kind.pop and i == pop_at else None)


def start_at_bias(a, plan, variant, acc):
    """The epilogue's bias as the accumulators' start: one gather per vector of the panel
    (lanes clamped to its stored columns, so no gather leaves the bias), copied into that
    vector's accumulator of every row. Done before the panel asks for A, so the TMU FIFO holds
    only these gathers."""
    regs = registers(plan)[0]
    base = r2
    a.mov(r3, regs["bias"])                 # c_panel and bias are both on regfile B (and
    a.add(base, r3, regs["c_panel"])        # c_panel may be written just before the panel)
    vectors = variant.vectors
    for i in range(vectors + GATHER_DEPTH):
        if i >= GATHER_DEPTH:
            a.nop(sig="ldtmu0")
            for row in acc:
                a.mov(row[i - GATHER_DEPTH], r4)
        if i < vectors:
            request_vector(a, variant, i, base, i * LANES * WORD)


def store(a, plan, variant, acc):
    """C = alpha*acc (+ beta*C) for the rows this QPU owns, one 16-column row of C at a time
    through this QPU's staging row of the VPM. ``store`` holds the number of valid rows (0 on a
    pass this QPU only helps with); rows past it are skipped, since their lanes of A repeated
    the last valid row and their addresses lie past the matrix. The epilogue's residual is
    added like beta*C (from its own address) and its activation applied on the VPM write."""
    regs = registers(plan)[0]
    alpha, address = r2, r1
    with a.scope():
        a.mov(null, regs["store"], sf=True)
        a.branch("skip", cond="all_zs")
        if not plan.alpha_one:
            a.mov(alpha, regs["alpha"])     # an accumulator: acc may sit on either regfile
        else:
            a.nop()
        a.ldi(r3, column_offset(variant, 0))
        a.add(address, regs["c_panel"], r3)
        prepare_activation(a, plan.epilogue)
        for g, row in enumerate(acc):
            if g:               # rows past the valid ones: done (g == store, since we go up by 1)
                a.sub(null, regs["store"], g, sf=True)
                a.branch("skip", cond="all_zs")
                a.ldi(r3, plan.n * WORD)                # the delay slots step to row g
                a.add(address, address, r3)
                a.nop()
            if not plan.beta_zero:
                add_gathered(a, variant, row, address, functools.partial(pop_beta_c, a, plan, alpha))
            if plan.epilogue.residual:
                a.add(r2, address, regs["residual"])    # alpha is 1: r2 is free
                add_gathered(a, variant, row, r2, functools.partial(pop_residual, a))
            store_row(a, plan, variant, row, address, alpha)
        a.label("skip")


def column_offset(variant, j):
    """Bytes from the panel's first column to the stored part of vector j."""
    x = variant.partial[1] if variant.partial and variant.partial[0] == j else 0
    return (j * LANES + x) * WORD


def store_row(a, plan, variant, row, address, alpha):
    """Write the row's vectors, each stored by one DMA; ``address`` ends where it started."""
    regs = registers(plan)[0]
    partial = variant.partial[0] if variant.partial else None
    scale = not plan.alpha_one and plan.beta_zero
    for j, reg in enumerate(row):
        # One store in flight per QPU (facts §3): the previous one still reads the staging row,
        # so wait for it here, not after starting each store. A store's instructions then run
        # while it moves, and the panel's last store drains during the next panel's start.
        a.read(vw_wait)
        a.mov(vw_setup, regs["stage_w"])
        if scale:
            a.fmul(vpm, reg, alpha)
        else:
            write_vpm(a, plan.epilogue, reg)
        a.mov(vw_setup, regs["vdw_part"] if j == partial else regs["vdw_full"])
        # to the next vector; after the last, back to the first
        step = column_offset(variant, (j + 1) % len(row)) - column_offset(variant, j)
        a.ldi(r3, step)
        a.add(address, address, r3).mov(vw_addr, address)      # the MUL reads the old address


def add_gathered(a, variant, row, base, pop):
    """Gather a row of some matrix shaped like C (``base``: its address at the row's first
    stored column) up to GATHER_DEPTH vectors ahead, and let ``pop(reg)`` combine each vector
    into the row's accumulator ``reg``. Lanes of a partial vector outside its stored columns
    repeat its nearest stored column, so the gather neither leaves the matrix nor reads words
    this QPU stored in the previous panel (facts §3: stale TMU data)."""
    vectors = len(row)
    for i in range(vectors + GATHER_DEPTH):
        if i >= GATHER_DEPTH:
            pop(row[i - GATHER_DEPTH])
        if i < vectors:             # r0 and r3 are free: the pop above is done with them
            request_vector(a, variant, i, base, i * LANES * WORD - column_offset(variant, 0))


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


def request_vector(a, variant, i, base, first):
    """Gather vector i of a panel-shaped row whose column 0 is at ``base`` + ``first`` bytes,
    lanes clamped to the vector's stored columns. Uses r0 and r3."""
    partial = variant.partial[0] if variant.partial else None
    if i == partial:
        _, x, depth = variant.partial
        a.ldi(r0, x + depth - 1)
        a.min(r0, element_number, r0)
        a.max(r0, r0, x)
    else:
        a.mov(r0, element_number)
    a.shl(r0, r0, 2)
    a.ldi(r3, first)
    a.add(r3, r3, base)
    a.add(tmu0_s, r3, r0)
