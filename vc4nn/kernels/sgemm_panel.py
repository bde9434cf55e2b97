"""SGEMM with a shared B panel: the high-throughput kernel for the cases where B is shared.

``C = alpha * op(A) @ B + beta * C`` (NN and TN), float32, row-major. docs/sgemm.md ("The panel
kernel") explains the design and its performance; vc4nn/kernels/sgemm.py is the general kernel
this one borrows its helpers from. Read it first: this file assumes its vocabulary.

The idea. All QPUs work on the same *panel* of B (up to PANEL_VECTORS = 6 vectors of 16 columns)
at the same time. The panel arrives in the VPM in *chunks* of Kc k-rows, double-buffered, each
k-row brought by one DMA load issued by one of the first Kc QPUs (a QPU has one load in flight,
facts §3, so the loads are spread). Every QPU reads the chunk with generic VPM reads, directly
as the MUL operand. A QPU owns R (<= 8) rows of A: per k one TMU gather brings A[rows, k] into
r4; for each row g the MUL rotator moves element g to element 0 and the B-side r5 write
broadcasts it (facts §1, §5.1); that scalar then multiplies the panel's vectors:

    fadd acc[g-1][V-1] += r0   ; v8min r5rep, r1, r1 >> (16-g)   # broadcast A[m0+g, k]
    mov  vr_setup, r3          ; fmul r0, r5, vpm                 # queue the next group's reads
    fadd acc[g][0] += r0       ; fmul r0, r5, vpm                 # ... V multiply-adds
    ...

so the uniform stream is out of the inner loop and B crosses the memory bus once per row pass
instead of once per QPU. Between chunks all QPUs meet at a semaphore barrier, which says both
"the next chunk is in the VPM" and "everyone has finished the chunk before it, so its buffer
may be reloaded". C goes out at the end of a panel through one VPM staging row per QPU, so no
QPU waits for another's store.
"""

import dataclasses
import functools

from asm import (element_number, isa, kernel, null, r0, r1, r2, r3, r4, r5, r5rep, ra, rb,
                 tmu0_s, uniform, vdr_setup, vdw_setup, vpm, vpm_read_setup, vpm_write_setup,
                 vr_addr, vr_setup, vr_wait, vw_addr, vw_setup, vw_wait)

from .sgemm import GATHER_DEPTH, LANES, SEMA_DONE, SEMA_GO, WORD, lane_addresses, zero

# The barrier's other two semaphores (see boundary); sgemm.py uses only DONE and GO.
SEMA_RELAY, SEMA_ARRIVED = SEMA_GO + 1, SEMA_GO + 2

# A panel is 6 vectors (96 columns): 8 rows x 6 vectors = 48 accumulators per QPU, and with 12
# QPUs the 96 rows of AlexNet conv1 in one pass (docs/sgemm.md: the bus table for W = 96).
PANEL_VECTORS = 6
MAX_ROWS = 8                    # rows of A (of C) per QPU: 8 x 6 accumulators + 16 bookkeeping
CHUNK_ROWS = 4                  # k-rows per chunk: 2 x 4 x 6 = 48 VPM rows double-buffered
STAGING_Y = 2 * CHUNK_ROWS * PANEL_VECTORS      # rows 48..59: QPU q stages C in row 48 + q
ROW_BYTES = LANES * WORD
# A[rows, k] is asked for this many k ahead of its use. One k (~60 instructions) covers the TMU
# latency but not a line fill queued on the bus behind the other QPUs' fills and the chunk DMAs
# (all issued at the start of a chunk); at most A_AHEAD requests are outstanding, within the
# FIFO depth of 4 (facts §5.13), and none reads past A (the last k are generated without).
A_AHEAD = 3
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

    # -- rows: R rows of C per QPU, in passes of (participating QPUs) x R rows ----------------
    @property
    def rows(self):
        """R: as many as fit (8) unless fewer balance the QPUs better in the last pass."""
        passes = ceil_div(self.m, MAX_ROWS * self.num_qpus)
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
        return min(CHUNK_ROWS, self.qpus)

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
    def last_chunk_rows(self):
        return self.k - (self.chunks - 1) * self.chunk_rows

    # -- n: full panels, then one edge variant ------------------------------------------------
    @property
    def full_panels(self):
        return self.n // (PANEL_VECTORS * LANES)

    @property
    def edge(self):
        """The variant of the last, narrower panel, or None when N is a multiple of 96."""
        width = PANEL_VECTORS * LANES
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
        full = [PanelVariant(PANEL_VECTORS, 0)] if self.full_panels else []
        return tuple(full + ([self.edge] if self.edge else []))

    def panel_starts(self):
        """(variant, first column) of every panel, in the order the kernel runs them."""
        width = PANEL_VECTORS * LANES
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


# ---------------------------------------------------------------------------------------------
# The uniform stream of one QPU (the host/kernel contract), in the order the kernel reads it:
#   [participates]                         0: this QPU exits at once
#   [role, staging write setup, VDW setup full vector, VDW setup partial vector] [alpha] [beta]
#   loaders: the DMA pieces of chunk 0, each [vdr setup, address]
#   per pass: [A address of the block's first row, rows valid - 1, rows to store (0: a pass
#             this QPU only helps with), C address of the block's row 0]
#      per panel, per chunk: loaders: the DMA pieces of the chunk after it
# ---------------------------------------------------------------------------------------------
def dma_pieces(plan, variant, slot, buffer):
    """(vdr setup, column offset) of the loads that bring one k-row of a panel into ``slot``."""
    y = buffer * CHUNK_ROWS * PANEL_VECTORS + slot * PANEL_VECTORS
    pitch = ROW_BYTES
    if not variant.narrow:
        return [(vdr_setup(variant.vectors, LANES, y, pitch=pitch), 0)]
    full = variant.vectors - 1          # narrow: the last vector has fewer than 16 columns
    pieces = [(vdr_setup(full, LANES, y, pitch=pitch), 0)] if full else []
    return pieces + [(vdr_setup(1, variant.partial[2], y + full, pitch=pitch), full * LANES)]


def pieces_per_load(plan):
    """DMA loads per k-row: the same for every chunk, since a narrow panel is the only panel."""
    return len(dma_pieces(plan, plan.variants[-1], 0, 0))


def chunk_sequence(plan):
    """Every chunk the QPUs run together, in order: (variant, first column, first k)."""
    out = []
    for _ in range(plan.passes):
        for variant, col in plan.panel_starts():
            out += [(variant, col, c * plan.chunk_rows) for c in range(plan.chunks)]
    return out


def load_words(plan, b_addr, chunk, index, slot):
    """Uniform words of loader ``slot`` for one chunk (the global ``index``-th one): each piece
    [setup, address]. k-rows past K (in the last chunk of a panel) reload row K-1 into a slot
    nobody reads, so every loader always issues the same number of loads."""
    variant, col, k0 = chunk
    k = min(k0 + slot, plan.k - 1)
    words = []
    for setup, offset in dma_pieces(plan, variant, slot, index % 2):
        words += [setup, b_addr + (k * plan.n + col + offset) * WORD]
    return words


def uniform_streams(plan, addresses, alpha, beta):
    """Per QPU, the list of 32-bit uniforms. ``addresses``: bus addresses of a, b and c."""
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
        y = STAGING_Y + q
        words = [1, role, vpm_write_setup(y), vdw_setup(units=1, depth=LANES, y=y),
                 vdw_setup(units=1, depth=partial[2], y=y, x=partial[1]) if partial else 0]
        if not plan.alpha_one:
            words.append(float(alpha))
        if not plan.beta_zero:
            words.append(float(beta))
        if loader:
            words += load_words(plan, b_addr, chunks[0], 0, slot)
        index = 0
        for p in range(plan.passes):
            block = min(p * plan.qpus + q, plan.blocks - 1)     # past the end: repeat the last
            m0 = block * plan.rows
            store = p * plan.qpus + q < plan.blocks
            words += [a_addr + m0 * plan.a_lane,
                      min(plan.rows, plan.m - m0) - 1, min(plan.rows, plan.m - m0) if store else 0,
                      c_addr + m0 * plan.n * WORD]
            for _ in range(len(plan.panel_starts()) * plan.chunks):
                if loader:
                    words += load_words(plan, b_addr, loads_after[index], index + 1, slot)
                index += 1
        streams.append(words)
    return streams


# ---------------------------------------------------------------------------------------------
# Registers. Accumulators r0-r5 all have a job in the k loop:
#   r0 product (added by the next instruction)   r1 A[rows, k] (the 8 scalars of this k)
#   r2 TMU address of A[rows, k+A_AHEAD]         r3 VPM read setup of the current k-row
#   r4 A[rows, k+1] as ldtmu0 delivers it        r5 the broadcast scalar A[m0+g, k]
# (r5 is dead between chunks: a relay keeps the address of its next load there across the
# barrier, see relay.)
# The regfile holds the R x V accumulators and the bookkeeping below. A counter decremented
# with a small immediate must be on regfile A (a small-immediate instruction cannot read
# regfile B, facts §1), and so must acc[g][V-1]: it is added in the instruction that rotates
# (the rotation amount is a small immediate).
# ---------------------------------------------------------------------------------------------
# role is tested with a small immediate and toggle is xored with the B-side buffer: both on
# regfile A too.
A_SIDE_BOOKKEEPING = ("k_left", "chunks_left", "panels_left", "passes_left", "a_row", "store",
                      "role", "toggle")


def bookkeeping_names(plan):
    names = ["buffer", "c_panel", "stage_w", "vdw_full", "vdw_part"]
    if not plan.alpha_one:
        names.append("alpha")
    if not plan.beta_zero:
        names.append("beta")
    if plan.a_k > 15:                   # beyond the small immediates
        names.append("a_k")
    return names


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
    if plan.a_k > 15:
        a.ldi(regs["a_k"], plan.a_k)
    # The boundary before each chunk toggles the buffer first: start on buffer 1's setup.
    a.ldi(regs["buffer"], vpm_read_setup(PANEL_VECTORS, CHUNK_ROWS * PANEL_VECTORS))
    a.ldi(regs["toggle"], vpm_read_setup(PANEL_VECTORS, 0)
          ^ vpm_read_setup(PANEL_VECTORS, CHUNK_ROWS * PANEL_VECTORS))
    a.and_(null, regs["role"], ROLE_LOADER, sf=True)
    with a.scope("first_load"):
        issue_loads(a, plan)
    a.ldi(regs["passes_left"], plan.passes)
    a.label("pass")
    lane_addresses(a, regs["a_row"], plan.a_lane, r3)       # reads 2 uniforms
    a.mov(regs["store"], uniform)
    a.mov(regs["c_panel"], uniform)
    panel_bytes = PANEL_VECTORS * LANES * WORD
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


def a_k_operand(plan):
    return registers(plan)[0]["a_k"] if plan.a_k > 15 else plan.a_k


def k_kinds(plan):
    """Per k of a panel, what its step does with A: "both" asks for A(k+A_AHEAD) and pops
    A(k+1); "pop" only pops (there is no k+A_AHEAD); "none" (k = K-1) does neither."""
    return ["both" if k + A_AHEAD < plan.k else "pop" if k + 1 < plan.k else "none"
            for k in range(plan.k)]


def panel(a, plan, variant, masters):
    """One panel of C (R rows x the variant's vectors): its chunks, then the store."""
    regs = registers(plan)[0]
    acc = accumulators(plan, variant.vectors)
    zero(a, [reg for row in acc for reg in row])
    # buffer holds the VPM read setup of a k-row of the panel: a narrower panel reads fewer
    # vectors (the NUM field; the toggle flips the address only).
    delta = vpm_read_setup(variant.vectors, 0) - vpm_read_setup(PANEL_VECTORS, 0)
    if delta:
        a.ldi(r3, delta)
        a.add(regs["buffer"], regs["buffer"], r3)
    # A[rows, k] for the first A_AHEAD k asked for once per panel and A[rows, 0] waited for;
    # r2 is left at the first k the k steps ask for.
    a.add(r2, regs["a_row"], a_k_operand(plan)).mov(tmu0_s, regs["a_row"])
    for _ in range(1, min(A_AHEAD, plan.k)):
        a.add(r2, r2, a_k_operand(plan)).mov(tmu0_s, r2)
    a.nop(sig="ldtmu0")
    # The first multiply-add of each k finishes the previous k's last one: make it add 0.
    a.ldi(r0, 0)
    kinds = k_kinds(plan)
    kc = plan.chunk_rows
    chunk_kinds = [kinds[c * kc:(c + 1) * kc] for c in range(plan.chunks)]
    # The chunks whose every k is "both" are one loop; the last chunks, which hold the "pop"
    # and "none" k, are generated one by one (their "both" k, if any, as a loop).
    steady = sum(1 for ks in chunk_kinds[:-1] if ks == ["both"] * kc)
    if steady:
        a.ldi(regs["chunks_left"], steady)
        a.label("chunk")
        boundary(a, plan, kc, masters)
        a.label("k")
        k_step(a, plan, variant, acc, loop="k", kind="both")
        a.sub(regs["chunks_left"], regs["chunks_left"], 1, sf=True)
        a.branch("chunk", cond="all_zc")
        a.nop()
        a.nop()
        a.nop()
    for ks in chunk_kinds[steady:]:
        with a.scope():
            looped = ks.count("both")
            boundary(a, plan, looped, masters)
            if looped:
                a.label("k")
                k_step(a, plan, variant, acc, loop="k", kind="both")
            for kind in ks[looped:]:
                k_step(a, plan, variant, acc, loop=None, kind=kind)
    a.fadd(acc[-1][-1], acc[-1][-1], r0)
    if delta:
        a.ldi(r3, delta)
        a.sub(regs["buffer"], regs["buffer"], r3)
    store(a, plan, variant, acc)


def boundary(a, plan, k_count, masters):
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
        a.read(vr_wait)         # returns at once on a QPU with no load in flight
        a.mov(null, regs["role"], sf=True)              # N: master; Z: a leaf; else a relay
        a.branch(f"master{number}", cond="all_ns")
        a.xor(regs["buffer"], regs["buffer"], regs["toggle"])   # delay slots: the next buffer,
        if k_count:                                             # the chunk's k count,
            a.ldi(regs["k_left"], k_count)
        else:
            a.nop()
        a.mov(r3, regs["buffer"])                               # its k-row 0 for the k step
        if relays(plan):
            a.branch(f"relay{number}", cond="all_zc")
        a.sema_release(SEMA_ARRIVED)                    # (delay slots of the relay branch)
        if relays(plan):
            a.nop()
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
    loads = load_ops(a, plan) if plan.loader_slot(0) is not None else []
    ops_then_branch(a, [lambda: a.sema_acquire(SEMA_ARRIVED)] * arrived
                    + [lambda: a.sema_acquire(SEMA_DONE)] * count
                    + [lambda: a.sema_release(SEMA_RELAY)] * count
                    + [lambda: a.sema_release(SEMA_GO)] * go + loads, back)


def relay(a, plan, number, back):
    """A relay's part of one boundary's barrier: arrivals, its "go", its leaves' "go", its loads.

    Its leaves' GO goes out in the instruction after its own RELAY: anything that can stall in
    between (a uniform read of the load words waits for a line fill queued behind the other
    relays' DMAs) would leave a GO token outstanding that a leaf already through this barrier
    could take at the next one (the emulator's race check caught exactly that). The load words
    of the first DMA piece are read before the barrier instead, where the relay waits for the
    others anyway and the bus is quiet: the setup into vr_setup (the previous load was waited
    for) and the address into r5, which is dead between chunks (see registers).
    """
    arrived, go = relay_counts(plan)
    a.label(f"relay{number}")
    early = [lambda: a.mov(vr_setup, uniform), lambda: a.mov(r5rep, uniform)]
    late = [lambda: a.mov(vr_addr, r5)] + load_ops(a, plan)[2:]
    ops_then_branch(a, early + [lambda: a.sema_acquire(SEMA_ARRIVED)] * arrived
                    + [lambda: a.sema_release(SEMA_DONE), lambda: a.sema_acquire(SEMA_RELAY)]
                    + [lambda: a.sema_release(SEMA_GO)] * go + late, back)


def ops_then_branch(a, ops, target):
    """Emit ``ops`` and a branch to ``target``, the last ops filling the delay slots."""
    slots = isa.BRANCH_DELAY_SLOTS
    before = max(0, len(ops) - slots)
    for op in ops[:before]:
        op()
    a.branch(target)
    for op in ops[before:]:
        op()
    for _ in range(slots - (len(ops) - before)):
        a.nop()


def k_step(a, plan, variant, acc, loop, kind):
    """One k: 1-3 bookkeeping instructions, then per row g the broadcast of A[m0+g, k] and its
    V multiply-adds; in a loop, the branch goes 3 instructions before the end (its delay slots
    are multiply-adds) and after the instruction that sets its flags. ``kind``: see k_kinds."""
    regs = registers(plan)[0]
    request, pop = kind == "both", kind != "none"
    rows, vectors = plan.rows, variant.vectors
    # Each step: (emit(sig), True if it uses a small immediate, which excludes a signal).
    steps = [(lambda sig: a.mov(vr_setup, r3, sig=sig).mov(r1, r4), False)]  # group 0; A(k)
    if request:     # ask for A(k+A_AHEAD): the MUL reads r2 before the ADD steps it
        steps.append((lambda sig: a.add(r2, r2, a_k_operand(plan), sig=sig).mov(tmu0_s, r2),
                      plan.a_k <= 15))
    if loop:
        steps.append((lambda sig: a.sub(regs["k_left"], regs["k_left"], 1, sf=True, sig=sig),
                      True))
    flags_at = len(steps)
    prev = acc[-1][-1]
    for g in range(rows):
        rotate = (LANES - g) % LANES or None            # element g -> element 0
        steps.append((lambda sig, prev=prev, rotate=rotate:
                      a.fadd(prev, prev, r0, sig=sig).v8min(r5rep, r1, r1, rotate=rotate), True))
        last_rotation = len(steps) - 1
        for j in range(vectors):
            if j == 0 and g + 1 < rows:     # queue the next group's reads (same k-row)
                steps.append((lambda sig: a.mov(vr_setup, r3, sig=sig).fmul(r0, r5, vpm), False))
            elif j == 0:                    # last group: step to the next k-row
                steps.append((lambda sig: a.add(r3, r3, PANEL_VECTORS, sig=sig).fmul(r0, r5, vpm),
                              True))
            else:
                steps.append((lambda sig, reg=acc[g][j - 1]:
                              a.fadd(reg, reg, r0, sig=sig).fmul(r0, r5, vpm), False))
        prev = acc[g][-1]
    nop = (lambda sig: a.nop(sig=sig), False)
    # ldtmu0 pops A(k+1) after the last rotation has read r1 and on an instruction without a
    # small immediate; a one-vector panel has none, so it gets a nop for it.
    if pop and all(small for _, small in steps[last_rotation + 1:]):
        steps.append(nop)
    if loop:
        branch_at = max(flags_at, len(steps) - isa.BRANCH_DELAY_SLOTS)
        steps.insert(branch_at, None)
        steps += [nop] * (branch_at + 1 + isa.BRANCH_DELAY_SLOTS - len(steps))
    pop_at = max(i for i, step in enumerate(steps) if step is not None and not step[1])
    for i, step in enumerate(steps):
        if step is None:
            a.branch(loop, cond="all_zc")
        else:
            step[0]("ldtmu0" if pop and i == pop_at else None)


def store(a, plan, variant, acc):
    """C = alpha*acc (+ beta*C) for the rows this QPU owns, one 16-column row of C at a time
    through this QPU's staging row of the VPM. ``store`` holds the number of valid rows (0 on a
    pass this QPU only helps with); rows past it are skipped, since their lanes of A repeated
    the last valid row and their addresses lie past the matrix."""
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
        for g, row in enumerate(acc):
            if g:               # rows past the valid ones: done (g == store, since we go up by 1)
                a.sub(null, regs["store"], g, sf=True)
                a.branch("skip", cond="all_zs")
                a.ldi(r3, plan.n * WORD)                # the delay slots step to row g
                a.add(address, address, r3)
                a.nop()
            if not plan.beta_zero:
                add_beta_c(a, plan, variant, row, address, alpha)
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
            a.mov(vpm, reg)
        a.mov(vw_setup, regs["vdw_part"] if j == partial else regs["vdw_full"])
        # to the next vector; after the last, back to the first
        step = column_offset(variant, (j + 1) % len(row)) - column_offset(variant, j)
        a.ldi(r3, step)
        a.add(address, address, r3).mov(vw_addr, address)      # the MUL reads the old address


def add_beta_c(a, plan, variant, row, address, alpha):
    """row = alpha*row + beta*C, gathering C up to GATHER_DEPTH vectors ahead. Lanes of a partial
    vector outside its stored columns repeat its nearest stored column, so the gather neither
    leaves C nor reads words this QPU stored in the previous panel (facts §3: stale TMU data)."""
    regs = registers(plan)[0]
    partial = variant.partial[0] if variant.partial else None
    vectors = len(row)
    for i in range(vectors + GATHER_DEPTH):
        if i >= GATHER_DEPTH:
            reg = row[i - GATHER_DEPTH]
            if plan.alpha_one:
                a.nop(sig="ldtmu0")
            else:
                a.fmul(reg, reg, alpha, sig="ldtmu0")
            a.fmul(r0, r4, regs["beta"])
            a.fadd(reg, reg, r0)
        if i < vectors:             # r0 and r3 are free: the pop above is done with them
            first = i * LANES * WORD - column_offset(variant, 0)   # vector i's column 0
            if i == partial:
                _, x, depth = variant.partial
                a.ldi(r0, x + depth - 1)
                a.min(r0, element_number, r0)
                a.max(r0, r0, x)
            else:
                a.mov(r0, element_number)
            a.shl(r0, r0, 2)
            a.ldi(r3, first)
            a.add(r3, r3, address)
            a.add(tmu0_s, r3, r0)
