"""Every float16 bit pattern through the emulated QPU's unpack and pack, against numpy.

One run streams all 65,536 halves (2,048 rows of 16 words, two halves a word) through the
regfile-A unpack (float and int consumers) and back through the pack; a second run streams them
through the r4 unpack (pm=1) from TMU loads. A third run packs float32 values around every
rounding boundary of the half format: each midpoint between neighbouring halves and the float32
values just below and above it.

The expected values are numpy's IEEE conversions except where the documented hardware differs
(docs/hardware-choices.md "Float16 pack and unpack"), and each exception is listed below with the
lanes it covers.
"""

import numpy as np

from asm import element_number, r1, r2, r4, ra1, ra2, tmu0_s, vpm

from .halves import IN_ADDRESS, floats_as_halves, halves_as_floats, run_stream

ALL_HALVES = np.arange(1 << 16, dtype=np.uint32)
ROWS = ALL_HALVES.reshape(-1, 32)       # one row: 16 words = 32 halves, lane i = halves 2i, 2i+1
WORDS = ROWS[:, 0::2] | (ROWS[:, 1::2] << 16)

SIGN = ALL_HALVES & 0x8000
EXPONENT, FRACTION = ALL_HALVES & 0x7C00, ALL_HALVES & 0x3FF
DENORMAL = (EXPONENT == 0) & (FRACTION != 0)
NAN = (EXPONENT == 0x7C00) & (FRACTION != 0)
QUIET = (FRACTION & 0x200) != 0


def float_op_sees():
    """float32 bits a float op makes of each half's unpacked value (through x * 1.0)."""
    expected = halves_as_floats(ALL_HALVES).astype(np.uint32)
    # Exception 1: half denormals unpack to a signed zero (the QPU has no denormals).
    expected[DENORMAL] = SIGN[DENORMAL] << 16
    # Exception 2: the ALU takes a NaN operand as +Inf (quiet bit set) or as an infinity of
    # its sign (quiet bit clear); alu.py, facts §1.
    expected[NAN & QUIET] = 0x7F800000
    expected[NAN & ~QUIET] = (SIGN[NAN & ~QUIET] << 16) | 0x7F800000
    return expected


def int_view():
    return np.where(SIGN != 0, ALL_HALVES | 0xFFFF0000, ALL_HALVES).astype(np.uint32)


def _interleave(low, high):
    """Per input row: (lanes of the 16a halves, lanes of the 16b halves) -> halves in order."""
    return np.stack([low, high], axis=-1).reshape(-1)


def _regfile_a_body(a, i):
    a.mov(ra1, vpm)
    a.nop()
    a.fmul(ra2, ra1.unpack("16a"), 1.0, pack="16a")     # and back to half
    a.fmul(ra2, ra1.unpack("16b"), 1.0, pack="16b")
    a.fmul(vpm, ra1.unpack("16a"), 1.0)                # float consumers
    a.fmul(vpm, ra1.unpack("16b"), 1.0)
    a.mov(vpm, ra1.unpack("16a"))                      # int consumers
    a.mov(vpm, ra1.unpack("16b"))
    a.mov(vpm, ra2)


def test_every_half_through_the_regfile_a_unpack_and_back_through_the_pack():
    out, _ = run_stream(_regfile_a_body, WORDS, 5)
    as_float = _interleave(out[:, 0], out[:, 1])
    as_int = _interleave(out[:, 2], out[:, 3])
    repacked = _interleave(out[:, 4] & 0xFFFF, out[:, 4] >> 16)
    expected = float_op_sees()
    assert np.array_equal(as_float, expected), np.flatnonzero(as_float != expected)[:8]
    assert np.array_equal(as_int, int_view())
    # Packing what the float op saw gives the half back, except: denormals come back as signed
    # zeros and NaNs as the infinities the ALU made of them (exceptions 1 and 2 above).
    with np.errstate(over="ignore"):
        expected_halves = floats_as_halves(expected)
    assert np.array_equal(repacked, expected_halves)
    kept = ~DENORMAL & ~NAN
    assert np.array_equal(repacked[kept], ALL_HALVES[kept])


def _r4_body(a, i):
    if i == 0:
        a.shl(ra1, element_number, 2)           # lane i reads word i of its row
    a.ldi(r2, 64 * i)
    a.add(r2, r2, ra1)
    a.add(tmu0_s, IN_ADDRESS, r2)
    a.nop(sig="ldtmu0")
    a.fmul(vpm, r4.unpack("16a"), 1.0)
    a.fmul(vpm, r4.unpack("16b"), 1.0)


def test_every_half_through_the_r4_unpack():
    out, _ = run_stream(_r4_body, WORDS, 2, load=False)
    assert np.array_equal(_interleave(out[:, 0], out[:, 1]), float_op_sees())


def rounding_boundaries():
    """float32 bits of the midpoint between each half and the next one up (for the largest
    finite half, the next is 2**16: the overflow boundary), and of the float32 values just below
    and just above each midpoint; both signs."""
    finite = np.arange(0x7C00, dtype=np.uint32)
    low = halves_as_floats(finite).view(np.float32).astype(np.float64)
    high = np.append(low[1:], 2.0 ** 16)
    middle = ((low + high) / 2).astype(np.float32)          # 12 significant bits: exact
    below = np.nextafter(middle, np.float32(0))
    above = np.nextafter(middle, np.float32(np.inf))
    positive = np.stack([below, middle, above], axis=-1).reshape(-1).view(np.uint32)
    return np.concatenate([positive, positive | 0x80000000])


def _pack_body(a, i):
    """Even rows pack into the low halves of ra2, odd rows into the high halves, then store."""
    a.mov(r1, vpm)
    if i % 2 == 0:
        a.fmul(ra2, r1, 1.0, pack="16a")
    else:
        a.fmul(ra2, r1, 1.0, pack="16b")
        a.nop()
        a.mov(vpm, ra2)
        a.mov(vpm, 0)           # (one output row per input row; the odd one stays empty)


def test_pack_rounding_around_every_half():
    values = rounding_boundaries()
    values = np.append(values, np.zeros(-len(values) % 256, dtype=np.uint32))
    rows = values.reshape(-1, 2, 16)
    out, _ = run_stream(_pack_body, rows.reshape(-1, 16), 1, chunk=16)
    packed = out.reshape(-1, 2, 16)[:, 0]
    got = np.stack([packed & 0xFFFF, packed >> 16], axis=1).reshape(-1)
    with np.errstate(over="ignore"):
        expected = floats_as_halves(values).astype(np.uint32)
    # Exception: a float32 below 2**-14 in magnitude (the smallest normal half) packs to a
    # signed zero, decided before rounding: no half denormals, and the values just below 2**-14
    # that IEEE rounds up to it flush too.
    tiny = (values & 0x7FFFFFFF) < 0x38800000
    expected[tiny] = (values[tiny] >> 16) & 0x8000
    assert np.array_equal(got, expected), values[np.flatnonzero(got != expected)[:8]]
