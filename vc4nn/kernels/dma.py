"""DMA between memory and a QPU's own VPM rows, in small steps that read like what they emit.

Setup words are split into a *base* that depends on the tile (row length, the QPU's first VPM
row: it arrives through the uniform stream) and a *delta* that the code generator knows (rows
in this DMA, which buffer). The fields do not overlap, so base + delta is the setup word: one
``ldi`` and one ``add`` per DMA, no per-QPU code.
"""

from asm import isa, r0, vdr_setup, vdw_setup, vpm_read_setup, vpm_write_setup, vr_addr, vr_setup, \
    vw_addr, vw_setup

MAX_ROWS_FIELD = 16         # a load setup with 16 rows stores 0 in NROWS
MAX_UNITS_FIELD = 128       # a store setup with 128 units (depth) stores 0 in UNITS (DEPTH)
WORD_BITS = isa.WORD_BITS


def load_setup_base(rowlen, y, size):
    """VDR setup with NROWS 0: add ``load_setup_delta`` for the rows and the buffer."""
    return vdr_setup(MAX_ROWS_FIELD, rowlen, y, size=size)


def load_setup_delta(rows, y, size, x=0):
    """NROWS and the VPM place (row ``y``, word ``x``) of a load, over ``load_setup_base``."""
    return vdr_setup(rows, 16, y, x, size=size) - vdr_setup(MAX_ROWS_FIELD, 16, 0, size=size)


def store_setup_base(lanes, y, size, horizontal=True):
    """VDW setup with the pixel count 0: add ``store_setup_delta``. A pixel is a VPM row of
    ``lanes`` elements: horizontal, each pixel is a memory row (UNITS = pixels, DEPTH = lanes);
    vertical, each lane's column is a memory row (UNITS = lanes, DEPTH = pixels), which stores
    the rows transposed (channel-major)."""
    if horizontal:
        return vdw_setup(MAX_UNITS_FIELD, lanes, y, size=size)
    return vdw_setup(lanes, MAX_UNITS_FIELD, y, size=size, horizontal=False)


def store_setup_delta(pixels, y, size, horizontal=True):
    if horizontal:
        return vdw_setup(pixels, 16, y, size=size) - vdw_setup(MAX_UNITS_FIELD, 16, 0, size=size)
    return (vdw_setup(16, pixels, y, size=size, horizontal=False)
            - vdw_setup(16, MAX_UNITS_FIELD, 0, size=size, horizontal=False))


def add_constant(a, dst, base, value, scratch=r0):
    """dst = base + value (a Python int): a small immediate (unless ``base`` is in regfile B,
    whose read port the immediate takes), or an ldi into ``scratch``."""
    for step in add_constant_steps(a, dst, base, value, scratch):
        step()


def add_constant_steps(a, dst, base, value, scratch=r0):
    """``add_constant`` as one-instruction steps (callables), for code that places them (in a
    branch's delay slots, say)."""
    if value == 0:
        return [lambda: a.mov(dst, base)]
    if -16 <= value <= 15 and not base.name.startswith("rb"):
        return [lambda: a.add(dst, base, value)]
    return [lambda: a.ldi(scratch, value), lambda: a.add(dst, base, scratch)]


def start_load(a, setup_base, rows, y, size, row_address, offset):
    """DMA ``rows`` memory rows from ``row_address`` + ``offset`` bytes into VPM row ``y``
    (relative to the QPU's rows, which ``setup_base`` holds)."""
    add_constant(a, vr_setup, setup_base, load_setup_delta(rows, y, size))
    add_constant(a, vr_addr, row_address, offset)


def start_store(a, setup_base, units, y, size, address, offset, horizontal=True):
    """DMA ``units`` pixels (VPM rows, or pixel pairs per row: ``store_setup_base``) from row
    ``y`` (relative) to ``address`` + ``offset`` bytes."""
    add_constant(a, vw_setup, setup_base, store_setup_delta(units, y, size, horizontal))
    add_constant(a, vw_addr, address, offset)


def generic_row_offset(y, size):
    """What VPM row ``y`` adds to a generic read or write setup of ``size``-bit elements (the
    ADDR field counts sub-words for 8/16-bit access): the QPU's ``first_row`` register."""
    return vpm_read_setup(1, y, size=size) - vpm_read_setup(1, 0, size=size)


def generic_offset(y, word, size):
    """What VPM row ``y``, from word ``word`` (a multiple of the words one 8/16-bit packed vector
    spans: 4 or 8), adds to a generic read or write setup of ``size``-bit elements."""
    per_vector = size * isa.SIMD_WIDTH // WORD_BITS
    return vpm_read_setup(1, y, size=size, offset=word // per_vector) - vpm_read_setup(1, 0,
                                                                                      size=size)


def row_stride(size):
    """The generic access STRIDE that steps one VPM row: ADDR counts {Y, H} or {Y, B} for
    16/8-bit elements, so a narrow vector per row reads (or writes) elements 0..15 of each."""
    return WORD_BITS // size


def read_rows(a, first_row, num, y, size):
    """Queue a generic read of ``num`` VPM rows from row ``y`` (relative to ``first_row``):
    one vector per row (16/8-bit: its first 16 elements, zero-extended)."""
    add_constant(a, vr_setup, first_row, vpm_read_setup(num, y, size=size,
                                                          stride=row_stride(size)))


def write_rows(a, first_row, y, size):
    """Set generic VPM writes to start at row ``y`` (relative to ``first_row``), one vector
    per row (16/8-bit: bits 15:0 / 7:0 of each lane into the row's first 16 elements)."""
    add_constant(a, vw_setup, first_row, vpm_write_setup(y, size=size,
                                                         stride=row_stride(size)))
