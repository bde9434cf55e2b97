"""The VPM's geometry and the helpers for setup words that its generic access (vpm.py) and its
DMA engines (dma.py) share.

Storage: rows of 16 little-endian 32-bit words. A VPM *line* is what one vector or one DMA row
runs along: a row (horizontal) or a column (vertical). Along a line, byte ``p`` is byte
``p % 4`` of the line's word ``p // 4``.
"""

import numpy as np

from asm import isa

WORD_BYTES = isa.WORD_BITS // 8
ROW_WORDS = isa.SIMD_WIDTH
ROW_BYTES = ROW_WORDS * WORD_BYTES
VERTICAL_SPAN = isa.SIMD_WIDTH          # a vertical vector covers 16 rows starting at Y[5:4]
ZEROS = np.zeros(isa.SIMD_WIDTH, dtype=np.uint32)
ZEROS.setflags(write=False)


def field_count(word, field):
    """A count field whose maximum is stored as 0 (NUM, STRIDE, ROWLEN, UNITS, ...)."""
    value = isa.field_get(word, field)
    return value or 1 << field[1]


def scalar(value):
    """Element 0 of a register value (setup and address writes only use element 0)."""
    if isinstance(value, (int, np.integer)):
        return int(value) & 0xFFFFFFFF
    return int(np.asarray(value).reshape(-1)[0]) & 0xFFFFFFFF

