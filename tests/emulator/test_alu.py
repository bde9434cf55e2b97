"""ALU op semantics against independent references: exact rational arithmetic, numpy, Python
ints and values worked out by hand from the fact sheet (facts §1)."""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asm import isa
from vc4nn.emulator import alu

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

U32 = np.uint32
INF, NEG_INF, QNAN = 0x7F800000, 0xFF800000, 0x7FC00000


def vec(values):
    """16 lanes from up to 16 uint32 values (the rest repeat the last)."""
    values = [int(v) & 0xFFFFFFFF for v in values]
    return np.array(values + values[-1:] * (16 - len(values)), dtype=U32)


def fbits(values):
    values = list(values)
    return vec(np.array(values + values[-1:] * (16 - len(values)), dtype=np.float32).view(U32))


def with_carry(op, a, b):
    """(result, carry) of ``op`` (a function of alu), carry None when the op has none."""
    result = op(a, b)
    name = op.__name__.rstrip("_")
    carry = alu.CARRY.get(name.replace("_saturating", ""))
    return result, None if carry is None else carry(a, b, result)


def floats(bits):
    return np.asarray(bits, dtype=U32).view(np.float32)


def toward_zero(exact):
    """The float32 nearest to ``exact`` (a Fraction) in the direction of zero."""
    nearest = np.float32(float(exact))
    if abs(Fraction(float(nearest))) > abs(exact):
        nearest = np.nextafter(nearest, np.float32(0))
    return nearest


normal_floats = st.floats(min_value=-2.0 ** 100, max_value=2.0 ** 100, allow_nan=False,
                          width=32).filter(lambda f: f == 0 or abs(f) > 1e-30)


# --- fadd / fsub: round toward zero ---------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(normal_floats, normal_floats), min_size=16, max_size=16))
def test_fadd_fsub_round_toward_zero(pairs):
    a = fbits([p[0] for p in pairs])
    b = fbits([p[1] for p in pairs])
    for op, combine in ((alu.fadd, lambda x, y: x + y), (alu.fsub, lambda x, y: x - y)):
        result, carry = with_carry(op, a, b)
        for i in range(16):
            exact = combine(Fraction(float(floats(a)[i])), Fraction(float(floats(b)[i])))
            expected = toward_zero(exact)
            if expected != 0 and abs(expected) < np.finfo(np.float32).tiny:
                expected = np.float32(0.0)          # denormal results flush
            assert floats(result)[i] == expected, (op.__name__, floats(a)[i], floats(b)[i])
            assert carry[i] == (expected > 0)


def test_fadd_rounds_toward_zero_by_hand():
    # 1 + 2^-24 is halfway between 1 and 1 + 2^-23: nearest-even gives 1, so does truncation;
    # 1 + 3 * 2^-25 is nearer 1 + 2^-23 but truncates to 1.
    one = np.float32(1.0)
    r, _ = with_carry(alu.fadd, fbits([one]), fbits([np.float32(3 * 2.0 ** -25)]))
    assert floats(r)[0] == one
    r, _ = with_carry(alu.fsub, fbits([-1.0]), fbits([np.float32(3 * 2.0 ** -25)]))
    assert floats(r)[0] == np.float32(-1.0)
    # Operands 2^60 apart: the exact sum 2^60 - 1 truncates to the float32 below 2^60.
    r, _ = with_carry(alu.fadd, fbits([2.0 ** 60, -(2.0 ** 60)]), fbits([-1.0, 1.0]))
    assert list(floats(r)[:2]) == [np.float32(2.0 ** 60 - 2.0 ** 36),
                                   np.float32(-(2.0 ** 60 - 2.0 ** 36))]
    r, _ = with_carry(alu.fadd, fbits([2.0 ** 60]), fbits([1.0]))       # 2^60 + 1 truncates to 2^60
    assert floats(r)[0] == np.float32(2.0 ** 60)


def test_fadd_overflow_and_broken_nan_inf():
    big = np.finfo(np.float32).max
    r, c = with_carry(alu.fadd, fbits([big, 0.0, 0.0, np.inf, 1.0]),
                    fbits([big, np.nan, -np.nan, -np.inf, np.inf]))
    assert list(r[:5]) == [INF, INF, INF, INF, INF]     # 0 + NaN gives +Inf (facts §1)
    assert list(c[:5]) == [True] * 5


def test_float_operands_flush_denormals_keeping_sign():
    tiny = np.float32(1e-40)                  # a float32 denormal
    r, _ = with_carry(alu.fadd, fbits([tiny, -tiny]), fbits([0.0, 0.0]))
    assert list(r[:2]) == [0, 0]              # +0 + +0 and -0 + +0 are +0
    r, _ = with_carry(alu.fmul, fbits([tiny, -tiny]), fbits([2.0 ** 100, 2.0 ** 100]))
    assert list(r[:2]) == [0x00000000, 0x80000000]


def test_float_results_flush_denormals_keeping_sign():
    r, _ = with_carry(alu.fmul, fbits([1e-20, -1e-20]), fbits([1e-20, 1e-20]))
    assert list(r[:2]) == [0x00000000, 0x80000000]
    r, c = with_carry(alu.fsub, fbits([1.5e-38]), fbits([1.4e-38]))   # difference is denormal
    assert r[0] == 0 and not c[0]


# --- fmul -----------------------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(normal_floats, normal_floats), min_size=16, max_size=16))
def test_fmul_rounds_to_nearest(pairs):
    a = np.array([p[0] for p in pairs], dtype=np.float32)
    b = np.array([p[1] for p in pairs], dtype=np.float32)
    result, carry = with_carry(alu.fmul, a.view(U32), b.view(U32))
    for i in range(16):
        exact = Fraction(float(a[i])) * Fraction(float(b[i]))
        nearest = np.float32(float(exact))    # float64 product of float32s is exact
        if abs(nearest) < np.finfo(np.float32).tiny:    # zero or denormal: a zero of the
            negative = np.signbit(a[i]) != np.signbit(b[i])    # product's sign
            nearest = np.float32(-0.0 if negative else 0.0)
        assert result[i] == np.array(nearest, np.float32).view(U32)
    assert carry is None


def test_fmul_zero_times_inf_is_zero():
    r = alu.fmul(fbits([0.0, np.inf, np.nan, 2.0]), fbits([np.inf, 0.0, 3.0, np.inf]))
    assert list(r[:4]) == [0, 0, INF, INF]    # NaN acts as +Inf


# --- float compare ops ----------------------------------------------------------------------

def test_fmin_fmax_and_abs_forms():
    a = [1.0, -3.0, 2.5, -0.5, 7.0]
    b = [2.0, 1.0, 2.5, 0.25, -8.0]
    fa, fb = np.array(a + [7.0] * 11, np.float32), np.array(b + [-8.0] * 11, np.float32)
    r, c = with_carry(alu.fmin, fbits(a), fbits(b))
    assert np.array_equal(floats(r), np.minimum(fa, fb)) and np.array_equal(c, fa > fb)
    r, c = with_carry(alu.fmax, fbits(a), fbits(b))
    assert np.array_equal(floats(r), np.maximum(fa, fb)) and np.array_equal(c, fa > fb)
    r, c = with_carry(alu.fminabs, fbits(a), fbits(b))
    assert np.array_equal(floats(r), np.minimum(abs(fa), abs(fb)))
    assert np.array_equal(c, abs(fa) > abs(fb))
    r, c = with_carry(alu.fmaxabs, fbits(a), fbits(b))
    assert np.array_equal(floats(r), np.maximum(abs(fa), abs(fb)))


# --- conversions ----------------------------------------------------------------------------

def test_ftoi_truncates_and_zeroes_out_of_range():
    values = [2.7, -2.7, 0.5, -0.99, 2.0 ** 31, -(2.0 ** 31), 1e10, np.nan, np.inf, -np.inf,
              2147483520.0, 1e-40]
    expected = [2, -2, 0, 0, 0, -(2 ** 31), 0, 0, 0, 0, 2147483520, 0]
    r, c = with_carry(alu.ftoi, fbits(values), fbits(values))
    assert [int(v) for v in r[:12].view(np.int32)] == expected
    assert c is None


def test_itof_rounds_toward_zero():
    values = [0, 1, -1, 16777217, -16777217, 2 ** 31 - 1, -(2 ** 31), 16777219]
    r, c = with_carry(alu.itof, vec(values), vec(values))
    expected = [0.0, 1.0, -1.0, 16777216.0, -16777216.0, 2147483520.0, -2147483648.0, 16777218.0]
    assert list(floats(r)[:8]) == expected
    assert list(c[:8]) == [v > 0 for v in values]


# --- integer ops against Python ints ----------------------------------------------------------

words = st.integers(min_value=0, max_value=0xFFFFFFFF)
word_vectors = st.lists(words, min_size=16, max_size=16)


def signed(v):
    return v - (1 << 32) if v & 0x80000000 else v


INT_REFERENCES = {
    # op: (result, carry) from Python ints (facts §1 carry table)
    "add": lambda a, b: ((a + b) & 0xFFFFFFFF, a + b > 0xFFFFFFFF),
    "sub": lambda a, b: ((a - b) & 0xFFFFFFFF, a < b),
    "shr": lambda a, b: (a >> (b & 31), bool(b & 31) and bool(a >> ((b & 31) - 1) & 1)),
    "asr": lambda a, b: ((signed(a) >> (b & 31)) & 0xFFFFFFFF,
                         bool(b & 31) and bool(a >> ((b & 31) - 1) & 1)),
    "ror": lambda a, b: (((a >> (b & 31)) | (a << (32 - (b & 31)))) & 0xFFFFFFFF, False),
    "shl": lambda a, b: ((a << (b & 31)) & 0xFFFFFFFF, bool((a << (b & 31)) >> 32 & 1)),
    "min": lambda a, b: (min(signed(a), signed(b)) & 0xFFFFFFFF, signed(a) > signed(b)),
    "max": lambda a, b: (max(signed(a), signed(b)) & 0xFFFFFFFF, signed(a) > signed(b)),
    "and": lambda a, b: (a & b, False),
    "or": lambda a, b: (a | b, False),
    "xor": lambda a, b: (a ^ b, False),
    "not": lambda a, b: (~a & 0xFFFFFFFF, False),
    "clz": lambda a, b: (32 - a.bit_length(), False),
}


@pytest.mark.parametrize("name", sorted(INT_REFERENCES))
@settings(max_examples=60, deadline=None)
@given(a=word_vectors, b=word_vectors)
def test_int_ops_match_python(name, a, b):
    result, carry = with_carry(alu.ADD[name], vec(a), vec(b))
    carry = np.zeros(16, bool) if carry is None else carry
    for i in range(16):
        assert (int(result[i]), bool(carry[i])) == INT_REFERENCES[name](a[i], b[i]), (a[i], b[i])


def test_int_ops_by_hand():
    assert alu.clz(vec([0, 1, 0x80000000, 0xFFFF]), vec([0]))[:4].tolist() == [32, 31, 0, 16]
    # shifts use b & 31: a shift by 33 is a shift by 1
    assert alu.shl(vec([3]), vec([33]))[0] == 6
    assert alu.shr(vec([0x80000001]), vec([32]))[0] == 0x80000001
    r, c = with_carry(alu.add, vec([0xFFFFFFFF]), vec([2]))
    assert r[0] == 1 and c[0]
    r, c = with_carry(alu.asr, vec([0x80000003]), vec([1]))
    assert r[0] == 0xC0000001 and c[0]


# --- per-byte ops and mul24 -----------------------------------------------------------------

def test_v8adds_v8subs_saturate_per_byte():
    a, b = vec([0xFF807F01]), vec([0x01807F02])
    assert alu.v8adds(a, b)[0] == 0xFFFFFE03
    assert alu.v8subs(a, b)[0] == 0xFE000000
    assert alu.v8subs(b, a)[0] == 0x00000001


def test_v8min_v8max_per_byte():
    a, b = vec([0x10F00380]), vec([0x20E00480])
    assert alu.v8min(a, b)[0] == 0x10E00380
    assert alu.v8max(a, b)[0] == 0x20F00480


def test_v8muld_per_byte():
    # (x * y + 127) // 255 per byte: 255*255 -> 255, 128*128 -> 64, 255*1 -> 1, 2*100 -> 1
    a, b = vec([0xFF80FF02]), vec([0xFF800164])
    assert alu.v8muld(a, b)[0] == 0xFF400101


@settings(max_examples=100, deadline=None)
@given(a=word_vectors, b=word_vectors)
def test_mul24_low_24_bits_of_each_operand(a, b):
    result, carry = with_carry(alu.mul24, vec(a), vec(b))
    assert [int(v) for v in result] == [((x & 0xFFFFFF) * (y & 0xFFFFFF)) & 0xFFFFFFFF
                                        for x, y in zip(a, b)]
    assert carry is None


def test_saturating_forms():
    r, c = with_carry(alu.add_saturating, vec([0x7FFFFFFF, 0x80000000, 5]), vec([1, 0xFFFFFFFF, 6]))
    assert r[:3].tolist() == [0x7FFFFFFF, 0x80000000, 11]
    r, _ = with_carry(alu.sub_saturating, vec([0x80000000, 0x7FFFFFFF]), vec([1, 0xFFFFFFFF]))
    assert r[:2].tolist() == [0x80000000, 0x7FFFFFFF]
    r, _ = with_carry(alu.mul24_saturating, vec([0xFFFFFF]), vec([0xFFFFFF]))
    assert r[0] == 0x7FFFFFFF


def test_every_isa_op_has_semantics():
    assert set(alu.ADD) == {name for name in isa.ADD_OPS if name != "nop"}
    assert set(alu.MUL) == {name for name in isa.MUL_OPS if name != "nop"}


# --- fast paths against the exact paths -------------------------------------------------------
# fadd/fsub take a shortcut when the float64 sum is exact, fmul when both operands are moderate,
# and uniforms are checked for a needed fix-up on one Python int. Operands mix every special
# class (denormals, NaNs of both quiet bits, infinities, -0.0, the moderate-range edges) with
# ordinary values.

SPECIAL_WORDS = [0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x00800000, 0x7F7FFFFF, INF,
                 NEG_INF, QNAN, 0xFFC00001, 0x7F800001, 0xFF800001, 0x1F800000, 0x1F7FFFFF,
                 0x5F7FFFFF, 0x5F800000, 0xDF800000, 0x9F800000, 0x3F800000, 0xBF800001]
any_words = st.one_of(st.sampled_from(SPECIAL_WORDS), words,
                      st.floats(width=32, allow_nan=False).map(
                          lambda f: int(np.array(f, np.float32).view(U32))))
any_vectors = st.lists(any_words, min_size=16, max_size=16).map(vec)


@st.composite
def banded_vectors(draw):
    """Floats whose exponents lie near one centre (drawn over the whole range, so that they
    reach the denormal, overflow and moderate-range edges): every lane of such operands often
    takes a fast path, which only then decides the result."""
    centre, spread = draw(st.integers(0, 255)), draw(st.integers(0, 32))
    lanes = []
    for _ in range(16):
        exponent = min(255, max(0, centre + draw(st.integers(-spread, spread))))
        sign, mantissa = draw(st.integers(0, 1)), draw(st.sampled_from([0, 1, 0x7FFFFF])
                                                        | st.integers(0, 0x7FFFFF))
        lanes.append(sign << 31 | exponent << 23 | mantissa)
    return vec(lanes)


operand_vectors = st.one_of(any_vectors, banded_vectors())


def fresh(v):
    """A copy, so that no fix-up noted for ``v`` applies (the ALU tracks vectors by identity)."""
    return np.array(v, dtype=U32)


def exact_sum(a, b, negate):
    x = alu.float_in(fresh(a)).astype(np.float64)
    y = alu.float_in(fresh(b)).astype(np.float64)
    y = -y if negate else y
    return alu.sum_toward_zero_exact(x, y, x + y)


@settings(max_examples=500, deadline=None)
@given(operand_vectors, operand_vectors)
def test_fadd_fsub_fast_path_matches_exact_path(a, b):
    assert alu.fadd(fresh(a), fresh(b)).tolist() == exact_sum(a, b, False).tolist()
    assert alu.fsub(fresh(a), fresh(b)).tolist() == exact_sum(a, b, True).tolist()


def test_fadd_fast_path_rejects_an_absorbed_small_operand():
    # 2^-24 + -(2^29 + 64): the float64 sum rounds (a tie) and s - x gives back y; only s - y
    # shows the inexact sum. Exact: -(2^29 + 64) + 2^-24 truncates to the float32 above it.
    a, b = fbits([2.0 ** -24]), fbits([-(2.0 ** 29 + 64)])
    assert floats(alu.fadd(a, b))[0] == np.nextafter(np.float32(-(2.0 ** 29 + 64)), np.float32(0))


@settings(max_examples=500, deadline=None)
@given(operand_vectors, operand_vectors)
def test_fmul_fast_path_matches_exact_path(a, b):
    expected = alu.fmul_exact(fresh(a), fresh(b)).tolist()
    assert alu.fmul(fresh(a), fresh(b)).tolist() == expected
    # An operand seen before keeps what was noted about it: the same again, in both orders.
    assert alu.fmul(a, b).tolist() == expected
    assert alu.fmul(b, a).tolist() == alu.fmul_exact(fresh(b), fresh(a)).tolist()


@settings(max_examples=300, deadline=None)
@given(any_words, operand_vectors)
def test_uniform_vectors_fix_up_like_any_vector(word, other):
    u = alu.word_lanes(word)
    assert u.tolist() == [word] * 16
    assert alu.float_in(u).view(U32).tolist() == alu.float_in(fresh(u)).view(U32).tolist()
    assert alu.fmul(u, other).tolist() == alu.fmul_exact(fresh(u), fresh(other)).tolist()
    assert alu.fadd(u, other).tolist() == exact_sum(u, other, False).tolist()


def test_fmul_fast_path_edges_by_hand():
    # 2^-63 squared is the smallest normal, 2^-64 squared is denormal and flushes to zero (same
    # sign rule as the exact path); every lane alike, so the fast path is the one that decides.
    assert alu.fmul(fbits([2.0 ** -63]), fbits([-(2.0 ** -63)])).tolist() == [0x80800000] * 16
    assert alu.fmul(fbits([2.0 ** -64]), fbits([-(2.0 ** -64)])).tolist() == [0x80000000] * 16
    assert alu.fmul(alu.word_lanes(0x1F800000), fbits([2.0 ** -64])).tolist() == [0] * 16
    big = np.finfo(np.float32).max
    assert alu.fmul(fbits([big]), fbits([big])).tolist() == [INF] * 16
    assert alu.fmul(fbits([0.0]), fbits([np.inf])).tolist() == [0] * 16


def test_fixup_indices_are_safe_take_indices_on_32_bit_hosts():
    # On a 32-bit Pi intp is int32 and take() refuses uint32 indices ("safe" casting), which
    # made every float op fail there (found by running the suite in an i386 chroot).
    bits = np.array([0xFFFFFFFF, 0x7F800000, 0x00000001] + [0] * 13, dtype=np.uint32)
    index = alu._fixup_index(bits)
    assert np.can_cast(index.dtype, np.int32, casting="safe")
    assert list(index[:3]) == [0x3FF, 0x1FE, 0]
