"""The panel kernel's uniform streams: the host/kernel contract, one list of words per QPU.

What each QPU reads, in the order the kernel reads it (the table below), including every DMA
load of B a loader issues: the host computes all addresses, so the kernel has no address
arithmetic for B.
"""

from asm import null, uniform, vdr_setup, vdw_setup, vpm_read_setup, vpm_write_setup

from . import dma
from . import chain
from . import panel_park as park
from . import panel_spread as spread
from .common import LANES, MASK, WORD, ceil_div
from .panel_act_halves import scaled_offset
from .panel_gather_b import boundary_offsets, panel_words, row_addresses, stepped, write_offset
from .panel_halves import column_bytes, halves_y, padded_columns, slot_y, widen_words, word_rows
from .panel_plan import HALF, ROLE_LOADER, ROLE_MASTER, ROW_BYTES
from .panel_kloop import shared_chunk, steady_chunks
from .panel_registers import stepped_loads



# ---------------------------------------------------------------------------------------------
# The uniform stream of one QPU (the host/kernel contract), in the order the kernel reads it:
#   [participates]                         0: this QPU exits at once
#   [role, staging write setup, VDW setup full vector, VDW setup partial vector] [alpha] [beta]
#   [residual: its address - C's address (scaled to the residual's element size,
#             panel_act_halves.scaled_offset)] [b_gather: b_write, panel_gather_b]
#   loaders: [(stepped loads, fp16 B) widen_offset] the DMA pieces of chunk 0, each [vdr setup,
#             address]; (b_gather) every QPU: the addresses of its rows of chunk 0
#             (panel_gather_b)
#   per pass: [(spread_rows, the last pass) its piece's words, panel_spread] [A address of
#             the block's first row, rows valid - 1, (the piece's) lane offset, rows to store (0: a pass
#             this QPU only helps with), C address of the block's row 0, (bias) the bias's
#             address - that C address (scaled to float32 elements)]
#      per panel: [A's gather step in bytes (negative: k runs backwards), bytes to its first
#                 k, (two-k gathers) A's k step] [b_gather: b_next, b_step, panel_gather_b]
#         per chunk: loaders: (fp16 B) the VPM read and write setups that widen my k-row of
#                    the chunk (panel_halves), the DMA pieces of the chunk after it; with
#                    stepped loads only [vdr setup] (or nothing: setup_in_registers), [vdr setup,
#                    address] on the panel's last two chunks (the rest comes from registers:
#                    see stepped_loads);
#                    (b_gather) every QPU, on a panel's last two chunks: its rows of the
#                    next chunk as offsets from b_next (panel_gather_b.boundary_offsets)
# ---------------------------------------------------------------------------------------------
def dma_pieces(plan, variant, slot, buffer):
    """(vdr setup, column offset) of the loads that bring one k-row of a panel into ``slot``."""
    y = buffer * plan.buffer_rows + slot * plan.panel_vectors
    pitch = ROW_BYTES
    if plan.b_halves:           # whole word rows of channel pairs (panel_halves)
        y = halves_y(plan, variant, slot, buffer)
        return [(vdr_setup(word_rows(variant.vectors), LANES, y, pitch=pitch), 0)]
    if not variant.narrow:
        return [(vdr_setup(variant.vectors, LANES, y, pitch=pitch), 0)]
    full = variant.vectors - 1          # narrow: the last vector has fewer than 16 columns
    pieces = [(vdr_setup(full, LANES, y, pitch=pitch), 0)] if full else []
    return pieces + [(vdr_setup(1, variant.partial[2], y + full, pitch=pitch), full * LANES)]


def pieces_per_load(plan):
    """DMA loads per k-row: the same for every chunk, since a narrow panel is the only panel."""
    return len(dma_pieces(plan, plan.variants[-1], 0, 0))


# ---------------------------------------------------------------------------------------------
# Stepped loads (panel_registers.stepped_loads): a loader's k-row of the next chunk lies one
# chunk (``load_step`` bytes) along the panel's direction from the one it loaded last, so the
# address stays in a register (load_next) and only the chunks whose k-rows do not step (a
# panel's last, whose k-rows past the end reload its last k-row, and the next panel's first)
# read it from the stream. With fp16 B the widening's setups follow the chunk's buffer: its
# read setup is ``buffer`` + widen_offset (register widen_x), its write setup r3 (``buffer`` +
# row_base) - the relay's role word (relay_role), both the same for either buffer. A plan's
# narrower panel adds the difference of its offsets to the first variant's (panel_barrier).
# So does, with fp16 B in 8-vector panels, the vdr setup of the next chunk's k-row
# (next_setup_offset, setup_in_registers): a loader then reads nothing per chunk but on a
# panel's last two (4 words before), else the vdr setup.
# ---------------------------------------------------------------------------------------------
def load_step(plan):
    """Bytes between a loader's k-rows of consecutive chunks of a panel (k running forwards)."""
    row = padded_columns(plan.n) * HALF if plan.b_halves else plan.n * WORD
    return plan.chunk_rows * row


def _same_for_both_buffers(offset):
    """offset(buffer) for buffers 0 and 1, checked equal."""
    first, second = offset(0), offset(1)
    assert first == second, "setup fields overflow between the chunk buffers"
    return first


def widen_offset(plan, variant, slot):
    """The widening's VPM read setup of loader ``slot`` less ``buffer`` (a k-row 0 read setup
    of ``variant``'s width): what widen_x holds for the first variant."""
    return _same_for_both_buffers(lambda buf: (
        vpm_read_setup(word_rows(variant.vectors), halves_y(plan, variant, slot, buf))
        - vpm_read_setup(variant.vectors, buf * plan.buffer_rows)) & MASK)


def relay_role(plan, variant, slot):
    """r3 (``buffer`` + row_base) less the widening's VPM write setup of loader ``slot``: its
    role word. Positive (bit 31 clear) and not 0, so the barrier still tells a relay by it."""
    role = _same_for_both_buffers(lambda buf: (
        vpm_read_setup(variant.vectors, buf * plan.buffer_rows) + plan.row_base
        - vpm_write_setup(slot_y(plan, slot, buf))) & MASK)
    assert role and not role & ROLE_MASTER
    return role


# The instructions of panel_barrier.next_setup_ops before its last: they go into the
# widening's free slots, one per word row of the k-row.
NEXT_SETUP_STEPS = 4


def setup_in_registers(plan):
    """(stepped loads, fp16 B) Whether the loaders compute the next chunk's vdr setup: where
    every panel's widening has a free slot for each step but the last (8-vector panels); with
    fewer the setup is a uniform, cheaper than instructions on the loaders' path (pw1, 4-vector
    panels: +0.08% computed, -0.05% read)."""
    return plan.b_halves and stepped_loads(plan) and \
        min(word_rows(v.vectors) for v in plan.variants) >= NEXT_SETUP_STEPS


def next_setup_offset(plan, variant):
    """(fp16 B) A loader's vdr setup for its k-row of the next chunk of a ``variant`` panel
    less 16 x (the other buffer's k-row 0 read setup + widen_x): the vdr setup's VPM address is
    16 x its row, the read setup's its row, so the difference is the same for every loader and
    both buffers."""
    first = plan.variants[0]
    offsets = {(vdr - 16 * (vpm_read_setup(variant.vectors, other * plan.buffer_rows)
                            + widen_offset(plan, first, slot))) & MASK
               for slot in range(plan.chunk_rows) for other in (0, 1)
               for (vdr, _), in [dma_pieces(plan, variant, slot, other)]}
    assert len(offsets) == 1, "vdr setups do not follow the read setups"
    return offsets.pop()


def role_word(plan, q):
    """QPU q's role: ROLE_MASTER for QPU 0, ROLE_LOADER for a loader (with stepped loads of
    fp16 B a relay's relay_role instead)."""
    slot = plan.loader_slot(q)
    if slot is not None and stepped_loads(plan) and plan.b_halves:
        return relay_role(plan, plan.variants[0], slot)
    return (ROLE_MASTER if q == 0 else 0) | (ROLE_LOADER if slot is not None else 0)


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
    if plan.b_halves:
        (setup, _), = dma_pieces(plan, variant, slot, index % 2)
        return [setup, b_addr + column_bytes(plan, k, col)]
    words = []
    for setup, offset in dma_pieces(plan, variant, slot, index % 2):
        words += [setup, b_addr + (k * plan.n + col + offset) * WORD]
    return words


def staging_words(plan, q, partial):
    """QPU q's staging write setup and the VDW setups of a full and of the partial vector
    (``partial``: a PanelVariant's, or None). fp16 C: 16-bit writes of bits 15:0, one row per
    vector, and 16-bit stores; the partial vector's first half sits at word x // 2, half x % 2."""
    y, bits = plan.staging_y + q, plan.c_bytes * 8
    if bits == 32:
        return [vpm_write_setup(y), vdw_setup(units=1, depth=LANES, y=y),
                vdw_setup(units=1, depth=partial[2], y=y, x=partial[1]) if partial else 0]
    part = 0
    if partial:
        x = partial[1]
        part = vdw_setup(units=1, depth=partial[2], y=y, x=x // 2, size=bits, offset=x % 2)
    return [vpm_write_setup(y, size=bits, stride=dma.row_stride(bits)),
            vdw_setup(units=1, depth=LANES, y=y, size=bits), part]


def uniform_streams(plan, addresses, alpha, beta, bias=None, residual=None):
    """Per QPU, the list of 32-bit uniforms. ``addresses``: bus addresses of a, b and c;
    ``bias``, ``residual``: bus addresses of the epilogue's operands, when the plan has them."""
    a_addr, b_addr, c_addr = addresses
    chunks = chunk_sequence(plan)
    shared, steady = shared_chunk(plan), steady_chunks(plan)
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
        steps = loader and stepped_loads(plan)
        words = [1, role_word(plan, q), *staging_words(plan, q, partial)]
        if not plan.alpha_one:
            words.append(float(alpha))
        if not plan.beta_zero:
            words.append(float(beta))
        if plan.epilogue.residual:
            words.append(scaled_offset(residual, c_addr, plan.c_bytes, plan.r_bytes))
        if plan.b_gather:
            words += [write_offset(plan, q)] + row_addresses(plan, b_addr, chunks[0], q)
        elif loader:
            if steps and plan.b_halves:
                words.append(widen_offset(plan, plan.variants[0], slot))
            words += load_words(plan, b_addr, chunks[0], 0, slot)
        panels = iter(panel_sequence(plan))
        index = 0
        for pass_index, (first, rows) in enumerate(plan.pass_blocks()):
            m0_before = m0 if pass_index else None
            m0 = first + q * rows
            store = m0 < plan.m
            if not store:               # past the end: repeat the last block
                m0 = first + (ceil_div(plan.m - first, rows) - 1) * rows
            piece = plan.spread_rows and pass_index + 1 == plan.passes and \
                spread.has_piece(plan, q)
            if piece:
                words += spread.header_words(plan, q)
            words += [a_addr + m0 * plan.a_lane, min(rows, plan.m - m0) - 1]
            if piece:
                words.append(spread.lane_word(plan, q, m0))
            words += [min(rows, plan.m - m0) if store else 0,
                      c_addr + m0 * plan.n * plan.c_bytes]
            if plan.epilogue.bias:
                words.append(scaled_offset(bias, c_addr + m0 * plan.n * plan.c_bytes,
                                           plan.c_bytes, WORD))
            for _ in plan.panel_starts():
                words += panel_direction(plan, next(panels)[2])
                if plan.b_gather:
                    b_panel = panel_words(plan, b_addr, loads_after[index], q)
                    words += b_panel
                drains = []
                if plan.park_rows and pass_index:       # the store slots (panel_park)
                    drains = park.drain_words(plan, c_addr, m0_before)
                    # the shared chunk's run of the body stores after its boundary's words
                    # (with the slots' addresses in a register, none is read there)
                    first = len(drains) - (bool(shared) and not park.drain_registers(plan)) \
                        * park.slots_per_body(plan)
                    words += drains[:first]
                    drains = drains[first:]
                for c in range(plan.chunks):
                    if plan.b_gather and not stepped(plan, c):
                        words += boundary_offsets(plan, b_addr, loads_after[index], c,
                                                  b_panel, q)
                    if shared and c == steady:
                        words += drains
                    if loader and plan.b_halves and not steps and not plan.b_gather:
                        words += widen_words(plan, chunks[index][0], slot, index % 2)
                    if loader and not plan.b_gather:
                        load = load_words(plan, b_addr, loads_after[index], index + 1, slot)
                        if steps and stepped(plan, c):      # the setup maybe computed too
                            load = [] if setup_in_registers(plan) else load[:1]
                        words += load
                    index += 1
        streams.append(words)
    return chain.with_tail(streams)


def read_stream_head(a, regs):
    """The kernel's side of a stream's first words (``uniform_streams``): a QPU whose word 0
    is 0 is not needed for this shape and exits, the others read their role, the staging
    row's write setup and the two VDW setups."""
    a.mov(null, uniform, sf=True)
    a.branch("exit", cond="all_zs")
    a.nop()
    a.nop()
    a.nop()
    for name in ("role", "stage_w", "vdw_full", "vdw_part"):
        a.mov(regs.get(name, null), uniform)
