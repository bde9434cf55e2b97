"""Float16 unpack and pack, case by case, against hand-derived bit patterns.

Every expected word below was worked out by hand from the float16/float32 layouts (sign,
exponent bias 15/127, 10/23 fraction bits), not by a conversion routine. The readings where the
sources are silent (denormals, rounding, float saturation, NaN) are listed in
docs/hardware-choices.md "Float16 pack and unpack"; the comment of each case names the rule.
"""

import numpy as np
import pytest

from asm import element_number, r1, r2, r3, r4, ra1, ra2, ra3, tmu0_s, vpm
from vc4nn.emulator.errors import UnsupportedInstruction

from .halves import IN_ADDRESS, run_stream

# (half, float32 bits the unpack delivers, what a float op makes of them, int view, rule)
UNPACK_CASES = [
    (0x3C00, 0x3F800000, 0x3F800000, 0x00003C00, "1.0"),
    (0xC000, 0xC0000000, 0xC0000000, 0xFFFFC000, "-2.0; the int view sign-extends"),
    (0x3555, 0x3EAAA000, 0x3EAAA000, 0x00003555, "0.33325: exponent 13 -> 125, fraction up 13"),
    (0x7BFF, 0x477FE000, 0x477FE000, 0x00007BFF, "65504, the largest half"),
    (0x0400, 0x38800000, 0x38800000, 0x00000400, "2**-14, the smallest normal half"),
    (0x0000, 0x00000000, 0x00000000, 0x00000000, "+0"),
    (0x8000, 0x80000000, 0x80000000, 0xFFFF8000, "-0 keeps its sign"),
    (0x0001, 0x00000000, 0x00000000, 0x00000001, "2**-24, the smallest denormal: flushed"),
    (0x03FF, 0x00000000, 0x00000000, 0x000003FF, "the largest denormal: flushed"),
    (0x8200, 0x80000000, 0x80000000, 0xFFFF8200, "-2**-15, a denormal: flushed to -0"),
    (0x7C00, 0x7F800000, 0x7F800000, 0x00007C00, "+Inf"),
    (0xFC00, 0xFF800000, 0xFF800000, 0xFFFFFC00, "-Inf"),
    (0x7E00, 0x7FC00000, 0x7F800000, 0x00007E00, "quiet NaN; the ALU takes it as +Inf"),
    (0xFE01, 0xFFC02000, 0x7F800000, 0xFFFFFE01, "negative quiet NaN, payload 1: +Inf too"),
    (0x7D00, 0x7FA00000, 0x7F800000, 0x00007D00, "quiet bit clear: Inf of its sign"),
    (0xFC01, 0xFF802000, 0xFF800000, 0xFFFFFC01, "negative, quiet bit clear: -Inf"),
]
HALVES = np.array([case[0] for case in UNPACK_CASES], dtype=np.uint32)
UNPACKED = [case[1] for case in UNPACK_CASES]
AS_FLOAT = [case[2] for case in UNPACK_CASES]
AS_INT = [case[3] for case in UNPACK_CASES]
# The same halves in both halves of a word, swapped around so that 16a and 16b differ per lane.
WORDS = (HALVES | (HALVES[::-1] << 16)).reshape(1, 16)

# (float32 result of a float op, half it packs to, rule)
PACK_CASES = [
    (0x3F800000, 0x3C00, "1.0"),
    (0xC0200000, 0xC100, "-2.5"),
    (0x477FE000, 0x7BFF, "65504"),
    (0x477FEFFF, 0x7BFF, "just below 65520 rounds down to 65504"),
    (0x477FF000, 0x7C00, "65520, a tie: to even, which is 2**16: Inf"),
    (0x49742400, 0x7C00, "1e6 overflows to Inf"),
    (0xC9742400, 0xFC00, "-1e6: -Inf"),
    (0x3F801000, 0x3C00, "1 + 2**-11, a tie: to even 1.0"),
    (0x3F803000, 0x3C02, "1 + 3 * 2**-11, a tie: to even 1 + 2**-9"),
    (0x3F801001, 0x3C01, "just above a tie rounds up"),
    (0x44FFFFFF, 0x6800, "rounding carries into the exponent: 2048"),
    (0x38800000, 0x0400, "2**-14, the smallest normal half"),
    (0x387FFFFF, 0x0000, "just below 2**-14: flushed before rounding (IEEE gives 2**-14)"),
    (0x38000000, 0x0000, "2**-15 would be a half denormal: flushed"),
    (0xB5800000, 0x8000, "-2**-20: flushed to -0"),
    (0x80000000, 0x8000, "-0"),
]
MORE_PACK_CASES = [
    (0x7F800000, 0x7C00, "+Inf"),
    (0xFF800000, 0xFC00, "-Inf"),
    (0x00000000, 0x0000, "+0"),
    (0x3EAAAAAB, 0x3555, "1/3: the dropped bits 0xAAB are below half: down"),
    (0x3DCCCCCD, 0x2E66, "0.1: dropped 0xCCD below half: down"),
    (0xC77FE000, 0xFBFF, "-65504"),
    (0x40490FDB, 0x4248, "pi: dropped 0xFDB below 0x1000: down"),
    (0x38C00000, 0x0600, "1.5 * 2**-14"),
    (0x476A6000, 0x7B53, "60000 = 1.8310546875 * 2**15: exact"),
    (0x3FFFF000, 0x4000, "2 - 2**-11, a tie: to even 2.0 (carries into the exponent)"),
    (0x3FFFE000, 0x3FFF, "2 - 2**-10: exact"),
    (0xBF7FF800, 0xBC00, "-(1 - 2**-12), a tie below 1: to even -1.0"),
    (0x33800000, 0x0000, "2**-24, the smallest half denormal: flushed"),
    (0x477FFFFF, 0x7C00, "just below 2**16 rounds up to Inf"),
    (0x7F7FFFFF, 0x7C00, "the largest float32: Inf"),
    (0xC7800000, 0xFC00, "-2**16: -Inf"),
]


def _hex(values):
    return [f"{int(v):#010x}" for v in values]


def _float_rows(cases):
    return np.array([case[0] for case in cases], dtype=np.uint32)


# --- unpack ---------------------------------------------------------------------------------

def _unpack_body(a, i):
    a.mov(ra1, vpm)
    a.nop()
    a.fmul(vpm, ra1.unpack("16a"), 1.0)      # float consumers (x * 1.0 keeps every value)
    a.fmul(vpm, ra1.unpack("16b"), 1.0)
    a.mov(vpm, ra1.unpack("16a"))            # int consumers (or)
    a.mov(vpm, ra1.unpack("16b"))


def test_regfile_a_unpack_to_float_and_int():
    out, _ = run_stream(_unpack_body, WORDS, 4, chunk=1)
    assert _hex(out[0, 0]) == _hex(AS_FLOAT)
    assert _hex(out[0, 1]) == _hex(AS_FLOAT[::-1])
    assert _hex(out[0, 2]) == _hex(AS_INT)
    assert _hex(out[0, 3]) == _hex(AS_INT[::-1])


def _r4_unpack_body(a, i):
    a.shl(r1, element_number, 2)
    a.add(tmu0_s, IN_ADDRESS, r1)            # lane i reads word i of the input row
    a.nop(sig="ldtmu0")
    a.fmul(vpm, r4.unpack("16a"), 1.0)
    a.fmul(vpm, r4.unpack("16b"), 1.0)
    a.mov(vpm, r4.unpack("16a"))             # an int op sees the converted bits as they are


def test_r4_unpack_always_converts_to_float():
    """NaNs keep sign, quiet bit and payload (moved up 13 bits); only a float op turns them
    into infinities."""
    out, _ = run_stream(_r4_unpack_body, WORDS, 3, chunk=1, load=False)
    assert _hex(out[0, 0]) == _hex(AS_FLOAT)
    assert _hex(out[0, 1]) == _hex(AS_FLOAT[::-1])
    assert _hex(out[0, 2]) == _hex(UNPACKED)


@pytest.mark.parametrize("mode, word, alone, mul_op, or_result, mul_result", [
    # a float op on the MUL side: the or sees -1.0's bits too (fmul gives -1 * -1)
    ("16a", 0xBC00, 0xFFFFBC00, "fmul", 0xBF800000, 0x3F800000),
    ("16a", 0xBC00, 0xFFFFBC00, "v8min", 0xFFFFBC00, 0xFFFFBC00),   # both int: the int view
    ("8a", 0xFF, 0xFF, "fmul", 0x3F800000, 0x3F800000),               # byte 255 as a float: 1.0
])
def test_one_float_consumer_makes_the_unpack_float_for_both_alus(mode, word, alone, mul_op,
                                                                 or_result, mul_result):
    """The guide: float16 -> float32 "if any ALU consuming data executes float instruction"."""
    def body(a, i):
        a.mov(ra1, vpm)
        a.nop()
        operand = ra1.unpack(mode)
        a.mov(vpm, operand)
        getattr(a.or_(ra2, operand, operand), mul_op)(r2, operand, operand)
        a.nop()
        a.mov(vpm, ra2)
        a.mov(vpm, r2)
    out, _ = run_stream(body, np.full((1, 16), word, dtype=np.uint32), 3, chunk=1)
    assert out[0, 0, 0] == alone                          # the or alone: the int view
    assert out[0, 1, 0] == or_result and out[0, 2, 0] == mul_result


def test_a_float_op_that_does_not_read_regfile_a_does_not_count():
    def body(a, i):
        a.mov(ra1, vpm)
        a.nop()
        a.fadd(r3, r1, r1).v8min(r2, ra1.unpack("16a"), ra1.unpack("16a"))
        a.mov(vpm, r2)
    out, _ = run_stream(body, np.full((1, 16), 0xBC00, dtype=np.uint32), 1, chunk=1)
    assert out[0, 0, 0] == 0xFFFFBC00


# --- pack -----------------------------------------------------------------------------------

def _pack_body(low, high, keep):
    """Rows 0, 1: float32 inputs packed into the low and high halves of one register, which
    first holds ``keep``; row 2: only the low half packed over ``keep``."""
    def body(a, i):
        if i == 0:
            a.ldi(ra2, keep)
            a.ldi(ra3, keep)
        a.mov(r1 if i == 0 else r2 if i == 1 else r3, vpm)
        if i == 2:
            a.fmul(ra2, r1, 1.0, pack=low)
            a.fmul(ra2, r2, 1.0, pack=high)
            a.fmul(ra3, r3, 1.0, pack=low)
            a.nop()
            a.mov(vpm, ra2)
            a.mov(vpm, ra3)
            a.mov(vpm, 0)
    return body


@pytest.mark.parametrize("low, high", [("16a", "16b"), ("16as", "16bs")])
def test_float_pack_rounds_to_nearest_even_flushes_and_overflows_to_inf(low, high):
    """The saturating forms give the same halves: saturation is for int results only."""
    inputs = np.stack([_float_rows(PACK_CASES), _float_rows(MORE_PACK_CASES),
                       _float_rows(PACK_CASES[::-1])])
    out, _ = run_stream(_pack_body(low, high, 0x5A5AA5A5), inputs, 1, chunk=3)
    packed, partial = out[0, 0], out[1, 0]
    assert _hex(packed & 0xFFFF) == _hex([case[1] for case in PACK_CASES])
    assert _hex(packed >> 16) == _hex([case[1] for case in MORE_PACK_CASES])
    assert _hex(partial & 0xFFFF) == _hex([case[1] for case in PACK_CASES[::-1]])
    assert (partial >> 16 == 0x5A5A).all()                # the other half is kept


def test_int_results_pack_to_16_bits_with_and_without_saturation():
    ints = np.array([70000, -70000, 32767, -32768, 0x12345678, -1, 0x8000, 0] * 2,
                    dtype=np.int64).astype(np.uint32)

    def body(a, i):
        a.mov(r1, vpm)
        a.ldi(ra2, 0)
        a.add(ra2, r1, 0, pack="16a")
        a.add(ra2, r1, 0, pack="16bs")
        a.nop()
        a.mov(vpm, ra2)
    out, _ = run_stream(body, ints.reshape(1, 16), 1, chunk=1)
    assert _hex(out[0, 0, :8] & 0xFFFF) == _hex([0x1170, 0xEE90, 0x7FFF, 0x8000, 0x5678,
                                                 0xFFFF, 0x8000, 0x0000])
    assert _hex(out[0, 0, :8] >> 16) == _hex([0x7FFF, 0x8000, 0x7FFF, 0x8000, 0x7FFF,
                                              0xFFFF, 0x7FFF, 0x0000])


def test_pitfalls_mov_packs_bits_and_only_regfile_a_writes_pack():
    """``mov`` is an int op: its 16a pack keeps the low 16 bits of the float's bits (0x3FC00000
    for 1.5 gives 0x0000); a float op converts (0x3E00). A pm=0 pack of a write to an
    accumulator or to the VPM leaves the value as it is."""
    def body(a, i):
        a.mov(r1, vpm)
        a.ldi(ra2, 0xFFFFFFFF)
        a.mov(ra2, r1, pack="16a")
        a.fmul(ra3, r1, 1.0, pack="16a")
        a.fmul(r2, r1, 1.0, pack="16a")
        a.mov(vpm, ra2)
        a.mov(vpm, ra3)
        a.mov(vpm, r2)
        a.fmul(vpm, r1, 1.0, pack="16a")
    out, _ = run_stream(body, np.full((1, 16), 0x3FC00000, dtype=np.uint32), 4, chunk=1)
    assert _hex(out[0, :, 0]) == _hex([0xFFFF0000, 0x00003E00, 0x3FC00000, 0x3FC00000])


@pytest.mark.parametrize("code", [1, 2])
def test_mul_pack_has_no_16_bit_forms(code):
    """pm=1 pack codes 1 and 2 are reserved (the guide's MUL pack table has 8-bit colour packs
    only), so the emulator refuses them rather than guess."""
    nop_fields = (39 << 38) | (39 << 32) | (39 << 18) | (39 << 12)
    word = (1 << 60) | (1 << 56) | (code << 52) | nop_fields
    with pytest.raises(UnsupportedInstruction, match=f"MUL pack code {code} .* reserved"):
        run_stream(lambda a, i: a.raw(word), np.zeros((1, 16)), 1, chunk=1)
