"""Gathering fp16 tensors element by element through the TMU (docs/kernels.md "fp16 storage").

A lane asking for the half at byte address A gets the 32-bit word at A & ~3 (the TMU ignores
the low two bits: docs/hardware-choices.md, "DMA addresses"), so two lanes fetch the same
word and each keeps the half that bit 1 of its own address names: 16a (bits 15:0) when it is
0, 16b otherwise. r4's unpack turns the kept half into a float32 for the op that reads it.
Selecting by the address (not by lane parity) keeps lanes clamped to a tensor's last element
on that element, whatever the tensor's alignment, so no lane meets a half past the end.
"""

import numpy as np

from asm import null, r4

from .common import LANES

HALF_LOW, HALF_HIGH = "16a", "16b"


def flag_half(a, address, two, sig=None):
    """Flags: zs in the lanes whose half sits in bits 15:0 of the word at ``address``; ``two``
    a register holding 2 (so that the op may ride on a pop's signal, ``sig="ldtmu0"``, which a
    small immediate would displace)."""
    a.and_(null, address, two, sf=True, sig=sig)


def gathered_half(a, op, dst, *srcs):
    """``op(dst, *srcs, r4-as-float)`` in two conditional instructions after ``flag_half``:
    the lane's half of the word in r4, unpacked to float32, as the last operand (``op`` an ADD
    ALU float op name; with no ``srcs`` the half itself: ``fmax(h, h)``)."""
    for half, cond in ((HALF_LOW, "zs"), (HALF_HIGH, "zc")):
        value = r4.unpack(half)
        operands = srcs + (value,) if srcs else (value, value)
        getattr(a, op)(dst, *operands, cond=cond)


def channel_pair_words(halves):
    """fp16 weights (rows, columns a multiple of 32) as channel-pair words: per block of 32
    columns, word i holds column i (16a) and column i + 16 (16b), so that one gathered or DMA'd
    word feeds two output vectors. Returned as float16 pairs, (rows, columns)."""
    rows = halves.shape[0]
    return np.ascontiguousarray(halves.reshape(rows, -1, 2, LANES).swapaxes(2, 3)).reshape(rows, -1)
