"""Rows spread over the QPUs one vector each (``PanelPlan.spread_rows``).

M = R x QPUs + E rows with E x V <= QPUs (V: the panel's vectors): every QPU takes R rows of
its own, as a pass does, and one vector of the E rows left: QPU q takes vector q mod V of row
R x QPUs + q // V, the QPUs past E x V a piece again (storing nothing). 7x7 = 49 pixels on 12
QPUs: 4 rows plus one of pixel 48's 8 vectors, 4 x 9 + 2 instructions per k, against 5 rows on
10 QPUs (the other two computing a block again), 5 x 9: 16% fewer.

The piece is one more group of the k step (panel_kloop): lane R of A's gather holds its row
(``fix_lane``), and its VPM reads take one row of the chunk's k-row, vector q mod V, with a
setup that differs per QPU: a register per k-row of the chunk (``x_read<i>``), added to r3 as
the small immediates are for the other groups. Its accumulator starts at its vector of the
bias (``start_piece``) and goes out with one store of its own (``store_piece``).
"""

from asm import (element_number, null, r0, r2, r3, r5, tmu0_s, uniform, vpm, vpm_read_setup,
                 vr_setup, vw_addr, vw_setup, vw_wait)

from .common import LANES, WORD
from .epilogue import activate
from .panel_plan import MAX_ROWS
from .panel_registers import registers


def piece(plan, q):
    """(row of C, vector of the panel, whether QPU q stores it)."""
    first, pieces = plan.rows * plan.num_qpus, (plan.m - plan.rows * plan.num_qpus) * \
        plan.panel_vectors
    row, vector = divmod(q % pieces, plan.panel_vectors)
    return first + row, vector, q < pieces


def header_words(plan, q):
    """QPU q's words after the header's others, in the order ``read_header`` reads them: the
    read setup offsets of its vector in each k-row of a chunk (from r3, the setup of k-row 1
    with the panel's width), its vector's byte offset, and its piece's store offset from the
    block's row 0 (0: no store)."""
    row, vector, stores = piece(plan, q)
    m0 = q * plan.rows
    delta = vpm_read_setup(1, 0) - vpm_read_setup(plan.panel_vectors, 0)
    reads = [(delta + (i - 1) * plan.panel_vectors + vector) & 0xFFFFFFFF
             for i in range(plan.chunk_rows)]
    column = vector * LANES * WORD
    return reads + [column, (row - m0) * plan.n * WORD + column if stores else 0]


def lane_word(plan, q, m0):
    """The pass's word for ``fix_lane``: from lane R's address (the block's last row, where
    the lanes past the valid rows are clamped) to the piece's row."""
    row, _, _ = piece(plan, q)
    return ((row - (m0 + plan.rows - 1)) * plan.a_lane) & 0xFFFFFFFF


def read_header(a, plan):
    regs = registers(plan)[0]
    for name in [f"x_read{i}" for i in range(plan.chunk_rows)] + ["x_col", "x_off"]:
        a.mov(regs[name], uniform)
    for row in next_rows(plan):
        a.ldi(regs[f"x_next{row}"], (row - 1) * plan.panel_vectors)


def next_rows(plan):
    """The k-rows of a chunk whose group 0 setup is r3 plus a register (``next_row_setup``):
    from the spread group's rotation, which takes the instruction's small immediate."""
    return [row for row in range(2, plan.chunk_rows)]


def next_row_setup(a, plan, row, sig=None):
    """Queue group 0's reads of k-row ``row`` of the chunk (r3: k-row 1's setup) without a
    small immediate."""
    if row == 1:
        return a.mov(vr_setup, r3, sig=sig)
    return a.add(vr_setup, r3, registers(plan)[0][f"x_next{row}"], sig=sig)


def fix_lane(a, plan):
    """Lane R (and R + 8) of ``a_row`` to the piece's row: a uniform added where the lane
    matches (the uniform is read on every lane)."""
    regs = registers(plan)[0]
    a.and_(r3, element_number, MAX_ROWS - 1)
    a.mov(r0, uniform)
    a.sub(null, r3, plan.rows, sf=True)
    a.add(regs["a_row"], regs["a_row"], r0, cond="zs")


def read_setup(a, plan, row, sig=None):
    """Queue the piece's read of k-row ``row`` of the chunk (r3: k-row 1's setup); the MUL
    multiplies by the read before it (the caller's group)."""
    regs = registers(plan)[0]
    return a.add(vr_setup, r3, regs[f"x_read{row}"], sig=sig)


def request_piece(a, plan, base):
    """Gather the piece's vector of the bias (``base``: the bias at the panel's column 0, r2),
    as panel_store.request_vector gathers the others; uses r0 and r3."""
    regs = registers(plan)[0]
    a.add(r3, base, regs["x_col"])
    a.shl(r0, element_number, 2)
    a.add(tmu0_s, r3, r0)


def store_piece(a, plan, reg):
    """Store the piece (alone, one DMA) unless this QPU only computed it again; r5 holds the
    activation's constant (epilogue.prepare_activation)."""
    regs = registers(plan)[0]
    with a.scope():
        a.mov(null, regs["x_off"], sf=True)
        a.branch("skip", cond="all_zs")
        a.add(r2, regs["c_panel"], regs["x_off"])
        a.read(vw_wait)
        a.mov(vw_setup, regs["stage_w"])
        activate(a, vpm, reg, plan.epilogue.activation, r5)
        a.mov(vw_setup, regs["vdw_full"])
        a.mov(vw_addr, r2)
        a.label("skip")
