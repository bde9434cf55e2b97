"""fp16 storage of the panel kernel's B (the pointwise weights): halves in memory, floats in the VPM.

B's k-rows travel as IEEE halves in channel-pair words (docs/kernels.md "fp16 storage"): per
block of 32 columns, word i holds column i (bits 15:0) and column i + 16 (bits 31:16), rows
padded to whole blocks. A loader DMAs its k-row's ceil(V/2) word rows into the last rows of its
k-row's slot of the chunk buffer, half the bytes of float32; at the next chunk boundary, before
it takes its part in the barrier, it widens them in place to V float32 rows (a regfile-A read unpacks
16a / 16b for free; one VPM read and two writes per word row). Word row h fills float rows 2h
and 2h + 1, which lie at or before word row h's own row (V - ceil(V/2) + h), so no word row is
overwritten before it is read. The k loop then reads float32 as before, so its one
multiply-add per instruction stays; the price is the widening on the loaders' path (the
master waits for the slowest loader): 3 instructions per 32 weights, 16 per 8-vector k-row.
Where the chunk splits into one 32-column block per QPU, every QPU gathers its block through
the TMU and widens it itself instead (panel_gather_b), off that path.
"""

import numpy as np

from asm import uniform, vpm, vpm_read_setup, vpm_write_setup, vr_setup, vr_wait, vw_setup

from .common import LANES, ceil_div
from .halves import HALF_HIGH, HALF_LOW, channel_pair_words
from .panel_plan import HALF
from .panel_registers import registers

BLOCK = 2 * LANES           # columns per channel-pair block


def padded_columns(n):
    """Columns of a k-row of fp16 B in memory: N rounded up to whole blocks."""
    return ceil_div(n, BLOCK) * BLOCK


def word_rows(vectors):
    return ceil_div(vectors, 2)


def slot_y(plan, slot, buffer):
    """VPM row of the float32 k-row in ``slot`` of chunk buffer ``buffer``."""
    return buffer * plan.buffer_rows + slot * plan.panel_vectors


def halves_y(plan, variant, slot, buffer):
    """VPM row where the DMA puts the k-row's word rows: the last rows of its float32 rows."""
    return slot_y(plan, slot, buffer) + variant.vectors - word_rows(variant.vectors)


def column_bytes(plan, k, col):
    """Bytes from fp16 B's start to column ``col`` (a block's first) of k-row ``k``."""
    return (k * padded_columns(plan.n) + col) * HALF


def widen_words(plan, variant, slot, buffer):
    """The uniforms a loader reads before widening its k-row: VPM read and write setups."""
    return [vpm_read_setup(word_rows(variant.vectors), halves_y(plan, variant, slot, buffer)),
            vpm_write_setup(slot_y(plan, slot, buffer))]


def widen(a, plan, variant, setups=None, fill=()):
    """A loader's widening of its k-row of this chunk (after its DMA is done), run in its
    barrier code (panel_barrier.master / relay) before it counts arrivals: the barrier
    cannot complete before every loader is through, and leaves pay nothing. ``setups``
    emits the VPM read and write setups (default: from the uniform stream, widen_words);
    ``fill``: emitters of instructions that use neither ``halves`` nor the VPM, in the word
    rows' free slots (at most word_rows(variant.vectors))."""
    halves = registers(plan)[0]["halves"]
    vectors, rows = variant.vectors, word_rows(variant.vectors)
    a.read(vr_wait)
    if setups is None:
        a.mov(vr_setup, uniform)
        a.mov(vw_setup, uniform)
    else:
        setups()
    a.mov(halves, vpm)
    fill = list(fill)
    for h in range(rows):
        (fill.pop(0) if fill else a.nop)()  # halves is not readable in the next instruction
        low = a.fmax(vpm, halves.unpack(HALF_LOW), halves.unpack(HALF_LOW))
        high = low
        if 2 * h + 1 < vectors:
            high = a.fmax(vpm, halves.unpack(HALF_HIGH), halves.unpack(HALF_HIGH))
        if h + 1 < rows:                    # the next word row, read while this one is written
            high.mov(halves, vpm)


def lay_out(b):
    """fp16 B (K, N) as the kernel reads it: (K, padded_columns(N) // 2) channel-pair words,
    as float16 pairs (the zero padding multiplies columns nobody stores)."""
    k, n = b.shape
    padded = np.zeros((k, padded_columns(n)), np.float16)
    padded[:, :n] = b
    return channel_pair_words(padded)
