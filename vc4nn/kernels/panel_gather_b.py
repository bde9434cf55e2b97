"""B's k-rows through the TMU instead of DMA (``PanelPlan.b_gather``).

The DMA path has the first Kc QPUs load one k-row each per chunk. A VDR row of 64 bytes keeps
the memory bus ~27 clocks busy at 300 MHz (the model's 700 MB/s for full rows, facts §4), a TMU
line fill of the same 64 bytes ~16 from SDRAM (timing.line_fill_clocks) and ~4 from the
VideoCore L2 when the weights fit there; and the pointwise layers are bound by that bus (7x7x1024
->1024: 95% busy, most of it the weights' DMA). So here every QPU gathers ``b_rows`` (L) 16-column
rows of each chunk through TMU1 (A uses TMU0: separate FIFOs, each in order) and writes them
into the chunk buffer with generic VPM writes. QPU q owns the chunk's rows qL .. qL + L - 1 (a
chunk's row r is VPM row r of its buffer), L consecutive vectors of one k-row:

- at each chunk boundary (before the barrier), ask for my rows of the chunk after it: one gather
  per row at ``b_next`` (my last row's address plus 4 x the element number), which then steps
  by ``b_step`` (one chunk along the panel's direction). The boundaries that ask for a panel's
  last chunk (whose k-rows past the panel's end re-read its last k-row, as the DMA path does) or
  for the next panel's first take the rows' offsets from ``b_next`` from the uniform stream
  instead (``boundary_offsets``): they are generated outside the chunk loop
  (sgemm_panel.panel). A uniform read at every boundary would queue its line fill behind the
  other QPUs' row fills (14x14x512->512: 4% of the time).
- at the end of the chunk's last k-row (before A's pop of the next gather, since both land in
  r4), pop them and write them: the setup is the next buffer's read setup (``buffer`` xor
  ``toggle``) plus ``b_write``, this QPU's offset from a read setup to its rows' write setup.

fp16 B (``b_halves``, channel-pair words: word i of a 32-column block holds column i in bits
15:0 and column i + 16 in bits 31:16, panel_halves): a QPU's two rows of a chunk are one such
block, so it asks for one gather (a 64-byte line, half the bytes of float32), pops it and
writes the two float32 rows through r4's unpack (16a, 16b), which converts for any op: no
register of its own, so the accumulators keep as many registers as with float32 B (14x14 in
passes of 6 rows of 8 vectors, not 5). With one row per QPU (4-vector panels in chunks of 3
k-rows on 12 QPUs: the chunk's 12 rows are 6 blocks), QPUs 2i and 2i + 1 both gather block i
and both write its two rows, the same values to the same VPM rows: no per-QPU choice of a half
in the shared code, and the pair shares a TMU (hardware.QPUS_PER_TMU), whose cache serves the
second request. The widening is spread over every QPU and sits in the k loop, where the DMA
path's loaders widen their k-rows in their barrier code, on every chunk's critical path.

The rows of chunk c+1 are written after this QPU passed barrier c, when nobody reads the buffer
of chunk c-1 any more, and before it arrives at barrier c+1, so the barrier keeps its meaning
(vc4nn/kernels/panel_barrier.py). Nothing of B is in flight during the bias start and the
stores, whose gathers take the whole TMU FIFO; in the k loop A asks fewer gathers ahead, so that
A's and B's requests together stay within the 4 a QPU may have in flight (facts §5.13).
"""

from asm import element_number, null, r1, r3, r4, r5, r5rep, tmu1_s, uniform, vpm, vpm_read_setup, \
    vpm_write_setup, vw_setup

from .common import LANES, WORD
from .halves import HALF_HIGH, HALF_LOW
from .panel_halves import column_bytes
from .panel_plan import ROW_BYTES, relays
from .panel_registers import registers

# Which of pop_steps' steps sets the role's flags (role_flags).
ROLE_FLAGS_STEP = 2


def arrive_by_done(plan):
    """Whether a relay arrives by its DONE alone (gathered B with relays: gathered_boundary)
    rather than by an ARRIVED token too."""
    return bool(plan.b_gather and relays(plan))


def carries_role_flags(plan):
    """Whether the chunk loop's branch back to its boundary sets the flags of the role in its
    delay slots (fp16 B, gathered_boundary: pop_steps' first write as a MUL op leaves its ADD
    slot free), so that the boundary starts with its branch: one instruction less on every
    QPU's path per chunk."""
    return plan.b_halves and arrive_by_done(plan)


def request_ops(a, plan, stepped):
    """The instructions (emitters) that ask for my rows of the next chunk: at ``b_next`` when
    ``stepped``, else at the uniform stream's offsets from it (``boundary_offsets``). They use
    neither r1, which may hold A's gather across the boundary (PanelPlan.pair_gathers), nor a
    lane-wise temporary: the constant goes to r5, dead between chunks with gathered B (a relay
    only relays). The chunk boundary spreads them over its branches' delay slots
    (panel_barrier)."""
    regs = registers(plan)[0]
    if not stepped:
        return [lambda: a.add(tmu1_s, regs["b_next"], uniform)] * plan.b_gathers
    ops = []
    if plan.b_gathers == 2:         # (PanelPlan allows 1 or 2) the row before my last
        ops += [lambda: a.ldi(r5rep, ROW_BYTES), lambda: a.sub(tmu1_s, regs["b_next"], r5)]
    return ops + [lambda: a.add(regs["b_next"], regs["b_next"], regs["b_step"])
                  .mov(tmu1_s, regs["b_next"])]


def request_first_rows(a, plan):
    """Chunk 0's requests, before the first panel (``b_next`` is not set yet): at the uniform
    stream's addresses."""
    a.shl(r1, element_number, 2)
    for _ in range(plan.b_gathers):
        a.add(tmu1_s, uniform, r1)


def start_panel(a, plan):
    """A panel's ``b_next`` (at its chunk 1) and ``b_step``, from the uniform stream."""
    regs = registers(plan)[0]
    a.shl(r1, element_number, 2)
    a.add(regs["b_next"], uniform, r1)
    a.mov(regs["b_step"], uniform)


def pop_steps(a, plan, carrier=None, role_flags=False):
    """k-loop steps (emit(sig), takes no signal) that write my rows of the next chunk into the
    VPM, r3 free: each pop's row is readable in r4 from the next instruction on. ``carrier``: a
    k-loop step (emit(sig)) that takes the second row's pop instead of a nop. ``role_flags``
    (fp16 B): the first row's write is a MUL op (x 1.0: exact, the unpack converts for any op)
    and its ADD slot sets the flags of the role for the chunk boundary (ROLE_FLAGS_STEP of
    the steps; panel_barrier.carries_role_flags)."""
    regs = registers(plan)[0]
    if plan.b_halves:               # one block of channel-pair words: widened into 2 rows
        low = (lambda sig: a.fmax(vpm, r4.unpack(HALF_LOW), r4.unpack(HALF_LOW)), True)
        if role_flags:
            low = (lambda sig: a.mov(null, regs["role"], sf=True)
                   .fmul(vpm, r4.unpack(HALF_LOW), 1.0), True)
        return [(lambda sig: a.xor(r3, regs["buffer"], regs["toggle"], sig="ldtmu1"), True),
                (lambda sig: a.add(vw_setup, r3, regs["b_write"]), True),
                low,
                (lambda sig: a.fmax(vpm, r4.unpack(HALF_HIGH), r4.unpack(HALF_HIGH)), True)]
    steps = [(lambda sig: a.xor(r3, regs["buffer"], regs["toggle"], sig="ldtmu1"), True),
             (lambda sig: a.add(vw_setup, r3, regs["b_write"]), True),
             (lambda sig: a.mov(vpm, r4), True)]
    for row in range(1, plan.b_rows):
        pop = carrier if carrier and row == 1 else lambda sig: a.nop(sig=sig)
        steps += [(lambda sig, pop=pop: pop("ldtmu1"), True), (lambda sig: a.mov(vpm, r4), True)]
    return steps


def pop_rows(a, plan):
    """The pop steps as plain instructions (chunk 0, before the first panel)."""
    for emit, _ in pop_steps(a, plan):
        emit(None)


def stepped(plan, chunk):
    """Whether the boundary before chunk ``chunk`` of a panel steps ``b_next`` (see above)."""
    return chunk + 2 < plan.chunks


def write_offset(plan, q):
    """``b_write`` of QPU q: its first row's write setup less a buffer's read setup."""
    setup = vpm_write_setup(block_row(plan, q * plan.b_rows)) - \
        vpm_read_setup(plan.panel_vectors, 0)
    return setup & 0xFFFFFFFF


def block_row(plan, row):
    """The chunk's first row gathered for its row ``row``: its block's first (fp16 B, whose
    blocks are pairs of rows of one k-row: panel_vectors is even), else itself."""
    return row - row % 2 if plan.b_halves else row


def row_addresses(plan, b_addr, chunk, q):
    """The addresses of QPU q's rows of one chunk, in the order it asks for them. k-rows past
    the panel's end (in its last chunk) re-read its last k-row, as the DMA path does."""
    variant, col, reverse, first = chunk
    out = []
    for row in range(q * plan.b_rows, (q + 1) * plan.b_rows, plan.b_rows // plan.b_gathers):
        slot, j = divmod(block_row(plan, row), variant.vectors)
        step = min(first + slot, plan.k - 1)
        k = plan.k - 1 - step if reverse else step
        if plan.b_halves:           # the channel-pair block of vectors j and j + 1
            out.append(b_addr + column_bytes(plan, k, col + j * LANES))
        else:
            out.append(b_addr + (k * plan.n + col + j * LANES) * WORD)
    return out


def boundary_offsets(plan, b_addr, chunk, index, panel, q):
    """The uniform words of a boundary that does not step (before chunk ``index`` of a panel
    whose ``panel_words`` are ``panel``; it asks for ``chunk``'s rows): each row's address less
    ``b_next``'s, which stepped at the boundaries before it (the lanes' offsets cancel)."""
    start, step = panel
    step -= (step & 0x80000000) << 1            # (a signed step)
    b_next = start + min(index, max(0, plan.chunks - 2)) * step
    return [(row - b_next) & 0xFFFFFFFF for row in row_addresses(plan, b_addr, chunk, q)]


def panel_words(plan, b_addr, chunk, q):
    """The panel's [b_next, b_step] of QPU q, ``chunk`` its chunk 1 (see start_panel)."""
    _, _, reverse, _ = chunk
    row = column_bytes(plan, 1, 0) if plan.b_halves else plan.n * WORD
    step = plan.chunk_rows * row * (-1 if reverse else 1)
    return [row_addresses(plan, b_addr, chunk, q)[-1], step & 0xFFFFFFFF]
