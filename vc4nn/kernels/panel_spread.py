"""The last pass's leftover rows spread over the QPUs in pieces (``PanelPlan.spread_rows``).

The last pass has M' rows: every QPU takes L = M' // QPUs of them, as a pass does, and the
E = M' - L x QPUs rows left over go in pieces: each row to QPUs // E QPUs, W = V / (QPUs // E)
vectors each (rounded up; V: the panel's vectors); QPUs past E rows compute a piece again and
store nothing. 7x7 = 49 pixels on 12 QPUs (one pass): 4 rows plus one of pixel 48's 8 vectors,
4 x 9 + 2 instructions per k, against 5 rows on 10 QPUs (the other two computing a block
again), 5 x 9; 14x14 = 196 in passes of 6, 6 and 4 rows plus pieces of 3 vectors of the last 4
pixels (4 x 9 + 4 against 5 x 9).

The piece is one more group of the k step (panel_kloop): lane L of A's gather holds its row
(``fix_lane``), and its VPM reads take W rows of the chunk's k-row from the piece's first
vector, with a setup that differs per QPU: a register per k-row of the chunk (``x_read<i>``),
added to r3 as the small immediates are for the other groups. A row's last piece starts at
V - W so as not to read past the panel, and stores only its own vectors. Its accumulators start
at its vectors of the bias (``request_piece``) and go out by stores of their own, last vector
first (``store_piece``). With halves (panel_act_halves) nothing changes but the element size
of the store's addresses and its pack: the piece's lane of A copies its half as the others do
(the flag of bit 1 is per lane).
"""

from asm import (element_number, null, r0, r2, r3, r5, tmu0_s, uniform, vpm, vpm_read_setup,
                 vr_setup, vw_addr, vw_setup, vw_wait)

from .common import LANES
from .epilogue import activate
from .panel_act_halves import pack_register
from .halves import HALF_LOW
from .panel_plan import MAX_ROWS, ROW_BYTES
from .panel_registers import piece_registers, registers


def last_pass(plan):
    """(first row, rows per QPU) of the last pass, whose leftover rows are the pieces."""
    return plan.pass_blocks()[-1]


def has_piece(plan, q):
    """Whether QPU q takes a piece in the last pass (``PanelPlan.piece_qpus``)."""
    return plan.piece_qpus[0] <= q


def piece(plan, q):
    """QPU q's piece: (its row of C, its first vector, vectors it stores: the last ones)."""
    first, rows = last_pass(plan)
    extra = plan.m - first - rows * plan.num_qpus
    row, index = divmod(q - plan.piece_qpus[0], plan.pieces_per_row)
    width, vectors = plan.piece_vectors, plan.panel_vectors
    start = min(index * width, vectors - width)
    stores = max(0, min((index + 1) * width, vectors) - index * width)
    if row >= extra:                # a piece of its own last row again, not stored: its
        return first + (q + 1) * rows - 1, start, 0     # gathers touch no other line
    return first + rows * plan.num_qpus + row, start, stores


def header_words(plan, q):
    """QPU q's words at the start of the last pass, in the order ``read_header`` reads them: the read setup offsets of its
    piece in each k-row of a chunk (from r3, the setup of k-row 1 with the panel's width), the
    byte offset of its first vector, the store offset of its last vector from the last pass's
    block row 0, and how many vectors it stores (0: none)."""
    row, start, stores = piece(plan, q)
    m0 = last_pass(plan)[0] + q * last_pass(plan)[1]
    delta = vpm_read_setup(plan.piece_vectors, 0) - vpm_read_setup(plan.panel_vectors, 0)
    reads = [(delta + (i - 1) * plan.panel_vectors + start) & 0xFFFFFFFF
             for i in range(plan.chunk_rows)]
    last = start + plan.piece_vectors - 1
    return reads + [start * ROW_BYTES, ((row - m0) * plan.n + last * LANES) * plan.c_bytes,
                    stores]


def lane_word(plan, q, m0):
    """The last pass's word for ``fix_lane``: from lane L's address (the block's last row,
    where the lanes past the valid rows are clamped) to the piece's row."""
    row, _, _ = piece(plan, q)
    return ((row - (m0 + last_pass(plan)[1] - 1)) * plan.a_lane) & 0xFFFFFFFF


def read_header(a, plan):
    """The piece's words (``header_words``), at the start of the last pass: its registers are
    the earlier passes' accumulators (panel_registers.piece_registers)."""
    regs = piece_registers(plan)
    names = [f"x_read{i}" for i in range(plan.chunk_rows)] + ["x_col", "x_off", "x_count"]
    for name in names:
        a.mov(regs[name], uniform)
    for row in range(2, plan.chunk_rows):
        a.ldi(regs[f"x_next{row}"], (row - 1) * plan.panel_vectors)


def next_row_setup(a, plan, row, sig=None):
    """Queue group 0's reads of k-row ``row`` of the chunk (r3: k-row 1's setup) without a
    small immediate (the piece's rotation, which carries it, takes the small immediate)."""
    if row == 1:
        return a.mov(vr_setup, r3, sig=sig)
    return a.add(vr_setup, r3, piece_registers(plan)[f"x_next{row}"], sig=sig)


def fix_lane(a, plan):
    """Lane L (and L + 8) of ``a_row`` to the piece's row: a uniform added where the lane
    matches (the uniform is read on every lane)."""
    regs = registers(plan)[0]
    a.and_(r3, element_number, MAX_ROWS - 1)
    a.mov(r0, uniform)
    a.sub(null, r3, last_pass(plan)[1], sf=True)
    a.add(regs["a_row"], regs["a_row"], r0, cond="zs")


def read_setup(a, plan, row, sig=None):
    """Queue the piece's reads of k-row ``row`` of the chunk (r3: k-row 1's setup)."""
    return a.add(vr_setup, r3, piece_registers(plan)[f"x_read{row}"], sig=sig)


def request_piece(a, plan, base, j):
    """Gather the piece's vector j of the bias (``base``: the bias at the panel's column 0),
    as panel_store.request_vector gathers the others; uses r0 and r3."""
    a.add(r3, base, piece_registers(plan)["x_col"])
    if j:
        a.ldi(r0, j * ROW_BYTES)
        a.add(r3, r3, r0)
    a.shl(r0, element_number, 2)
    a.add(tmu0_s, r3, r0)


def store_piece(a, plan, regs_of_piece):
    """Store the piece's last ``x_count`` vectors, last first, one DMA each (none when this
    QPU computed it again); r5 holds the activation's constant (epilogue.prepare_activation).
    r2 steps down the vectors' addresses."""
    regs = dict(registers(plan)[0], **piece_registers(plan))
    with a.scope():
        a.mov(null, regs["x_count"], sf=True)
        a.branch("skip", cond="all_zs")
        a.add(r2, regs["c_panel"], regs["x_off"])
        a.nop()
        a.nop()
        for done, reg in enumerate(reversed(regs_of_piece)):
            if done:                # stored all it owns?
                a.sub(null, regs["x_count"], done, sf=True)
                a.branch("skip", cond="all_zs")
                a.ldi(r3, LANES * plan.c_bytes)
                a.sub(r2, r2, r3)
                a.nop()
            a.read(vw_wait)
            if plan.c_halves:       # packed as store_row packs (panel_store)
                activate(a, pack_register(plan), reg, plan.epilogue.activation, r5,
                         pack=HALF_LOW)
            a.mov(vw_setup, regs["stage_w"])
            if plan.c_halves:
                a.mov(vpm, pack_register(plan))
            else:
                activate(a, vpm, reg, plan.epilogue.activation, r5)
            a.mov(vw_setup, regs["vdw_full"])
            a.mov(vw_addr, r2)
        a.label("skip")
