"""What each ADD and MUL operation computes: one or two lines per op, keyed by the op names of
``asm.isa``.

Every op takes two 16-lane uint32 vectors and returns the uint32 result; ``CARRY`` gives the
carry flag of the ops that set one, computed only when an instruction sets the flags. Unary ops
read their first operand (mux a); toolchains put the same source in both muxes (facts §5.8).

Floating point (facts §1, choices in docs/hardware-choices.md "Emulator core"):
- Operands: denormals flush to zero (sign kept); a NaN with the quiet bit set (every NaN a
  program can compute) acts as +Inf ("0 + NaN gives +Inf"); a quiet-bit-clear NaN acts as an
  infinity of its sign.
- fadd / fsub round the exact sum toward zero. Overflow gives +-Inf; Inf - Inf gives +Inf.
  fmul rounds to nearest even; a zero operand gives 0 even against Inf.
- Results that are denormal flush to zero (sign kept).
"""

import numpy as np

from asm import isa

U32, I32, U64, I64, F32, F64 = np.uint32, np.int32, np.uint64, np.int64, np.float32, np.float64
LANES = isa.SIMD_WIDTH


def lanes(value, dtype=U32):
    """A 16-lane vector of one value (array-array numpy ops are twice as fast as
    array-scalar ones, and empty + fill is faster than np.full)."""
    vector = np.empty(LANES, dtype=dtype)
    vector.fill(value)
    return vector


ZERO = lanes(0)
NO_CARRY = np.zeros(LANES, dtype=bool)
SIGN_MIN = lanes(0x80000000)          # unsigned >= this: bit 31 set
_ABS_MASK, _MUL24_MASK = lanes(0x7FFFFFFF), lanes(0xFFFFFF)
_ONE64 = lanes(1, U64)
_THIRTY_ONE, _TWENTY_TWO, _THIRTY_TWO = lanes(31), lanes(22), lanes(32)
_THIRTY_TWO_64 = lanes(32, U64)
# Keep the sign, exponent and top 23 mantissa bits of a float64: truncation to a float32
# significand, i.e. rounding toward zero.
_F32_TRUNCATE = lanes(0xFFFFFFFFE0000000, U64)
_F32_ULP_IN_F64 = lanes(1 << 29, U64)     # one float32 ulp, as float64 bits
_INT32_MIN, _INT32_LIMIT = lanes(-2.0 ** 31, F32), lanes(2.0 ** 31, F32)


def _float_fixup_table(nan_mask):
    """AND masks indexed by bits 31:22 (sign, exponent, quiet bit) of a float32."""
    table = np.full(1024, 0xFFFFFFFF, dtype=U32)
    for sign in (0, 1):
        base = sign << 9
        table[base | 0x000:base | 0x002] = 0x80000000      # exponent 0: flush to signed zero
        table[base | 0x1FE] = 0xFF800000                      # exponent 255, quiet bit 0: +-Inf
        table[base | 0x1FF] = nan_mask                        # exponent 255, quiet bit 1: NaN
    return table


_NAN_IS_INF = _float_fixup_table(0x7F800000)      # x & 0x7F800000 of a NaN is +Inf
_NAN_IS_ZERO = _float_fixup_table(0x00000000)


# Fixed-up float operands by vector: a float op's result already has no denormals and no NaNs
# and register values are never changed in place, so ``float_in`` of a vector that
# ``float_out`` made (the common case: a result fed to the next float op) needs no fix-up, and a
# vector read as a float many times (r4 after a TMU load, fed to a run of fmuls) is fixed once.
# Keyed by id -> (vector, float32 view of its fixed-up bits, moderate); holding the vector keeps
# its id unique. Cleared when it grows: forgetting a vector only costs a redundant fix-up.
# "moderate" (see ``_moderate``) is True or False when known, None when not yet checked, and
# False for float results, which are not worth checking (most are used once).
_FLOAT_VIEWS = {}
_FLOAT_VIEWS_LIMIT = 4096


def _remember(vector, f32, moderate=False):
    if len(_FLOAT_VIEWS) >= _FLOAT_VIEWS_LIMIT:
        _FLOAT_VIEWS.clear()
    _FLOAT_VIEWS[id(vector)] = (vector, f32, moderate)


def _fixup_index(bits):
    """Bits 31:22 as take() indices. take() casts its indices to intp "safely", which uint32
    is not where intp is 32 bits (a 32-bit ARM Pi), so view them as int32 (they are < 1024)."""
    return (bits >> _TWENTY_TWO).view(I32)


def float_in(x):
    """A uint32 vector as the float32 values the ALU sees (denormals and NaNs fixed up)."""
    known = _FLOAT_VIEWS.get(id(x))
    if known is not None:
        return known[1]
    f32 = (x & _NAN_IS_INF.take(_fixup_index(x))).view(F32)
    _remember(x, f32, None)
    return f32


def float_out(bits, table=_NAN_IS_INF):
    """Float result bits with denormals flushed and NaNs replaced as ``table`` says."""
    fixed = bits & table.take(_fixup_index(bits))
    _remember(fixed, fixed.view(F32))
    return fixed


# A moderate float operand is 0 or finite with magnitude at least 2^-63 (fixed up): the
# product of two moderate floats is 0 or has magnitude at least 2^-126, so it is never denormal
# and never NaN (it may round to Inf, which needs no fix-up) and fmul can skip the fix-up.
_MODERATE_LOW, _MODERATE_SPAN = 64 << 23, 0x7F800000 - (64 << 23)
_MODERATE_LOW_LANES, _MODERATE_SPAN_LANES = lanes(_MODERATE_LOW), lanes(_MODERATE_SPAN)
_EVERY_LANE = np.ones(LANES, dtype=bool).tobytes()


def _moderate_word(word):
    magnitude = word & 0x7FFFFFFF
    return magnitude == 0 or 0 <= magnitude - _MODERATE_LOW < _MODERATE_SPAN


def _moderate(x):
    """Whether every lane of ``x`` is a moderate float; checked once per vector, and only for
    vectors that did not come from a float op."""
    known = _FLOAT_VIEWS.get(id(x))
    if known is None:
        float_in(x)
        known = _FLOAT_VIEWS[id(x)]
    if known[2] is None:
        magnitude = known[1].view(U32) & _ABS_MASK
        moderate = ((magnitude - _MODERATE_LOW_LANES < _MODERATE_SPAN_LANES)
                    | (magnitude == ZERO)).tobytes() == _EVERY_LANE
        known = _FLOAT_VIEWS[id(x)] = (x, known[1], moderate)
    return known[2]


_NAN_IS_INF_WORDS = _NAN_IS_INF.tolist()
# Vectors of uniform words, shared between reads (vectors are never changed in place): a
# program's uniforms repeat, across loop iterations and across QPUs.
_WORD_VECTORS = {}
_WORD_VECTORS_LIMIT = 1 << 14


def word_lanes(word):
    """``lanes(word)`` for a word read from memory (a uniform), noted as needing no float
    fix-up when it is a clean float: checks much cheaper on one Python int than on 16 lanes."""
    vector = _WORD_VECTORS.get(word)
    if vector is None:
        if len(_WORD_VECTORS) >= _WORD_VECTORS_LIMIT:
            _WORD_VECTORS.clear()
        vector = _WORD_VECTORS[word] = lanes(word)
    if id(vector) not in _FLOAT_VIEWS and word & _NAN_IS_INF_WORDS[word >> 22] == word:
        _remember(vector, vector.view(F32), _moderate_word(word))
    return vector


def _truncated(f64):
    """float64 vector -> float32 bits rounded toward zero, denormal results flushed."""
    return float_out((f64.view(U64) & _F32_TRUNCATE).view(F64).astype(F32).view(U32))


def _f64_truncate_table():
    """AND masks for a float64 holding an exact sum of two float32s, indexed by its bits 63:52
    (sign, exponent) as a signed number: keep a float32 significand (round toward zero); below
    the float32 normal range keep only the sign (the float32 result would be denormal: flush).
    Negative indices (sign set) count from the end, as numpy indexing does."""
    exponent = np.arange(4096) & 0x7FF
    tiny = (exponent < 1023 - 126) & (exponent != 0)
    return np.where(tiny, 1 << 63, int(_F32_TRUNCATE[0])).astype(U64).view(I64)


# Indexing with a signed int64 vector is several times faster than take with an unsigned one.
_F64_TRUNCATE_TABLE = _f64_truncate_table()
_FIFTY_TWO_I64 = lanes(52, I64)


def _sum_toward_zero(x, y, s):
    """float32 bits of x + y rounded toward zero, given float64 vectors x and y holding float32
    values and s = x + y in float64.

    Fast path, when s is exact (the common case): truncate it with one table lookup. s is exact
    when s - x gives back y and s - y gives back x, bit for bit: an inexact s differs from
    x + y by at least one float32 ulp of the smaller operand, which subtracting the larger one
    keeps. Otherwise (and for Inf, or a -0.0 that does not come back) the exact path."""
    if (s - x).tobytes() == y.tobytes() and (s - y).tobytes() == x.tobytes():
        bits = s.view(I64)
        f32 = (bits & _F64_TRUNCATE_TABLE[bits >> _FIFTY_TWO_I64]).view(F64).astype(F32)
        result = f32.view(U32)
        _remember(result, f32)
        return result
    return sum_toward_zero_exact(x, y, s)


def sum_toward_zero_exact(x, y, s):
    """float32 bits of x + y (float64 vectors holding float32 values, s = x + y) rounded toward
    zero, for any operands.

    The float64 sum s is exact unless the exponents are far apart; then (TwoSum gives the
    rounding error) s may have landed exactly on a float32 value while the true sum lies
    between it and zero, and the result steps one float32 toward zero."""
    truncated = s.view(U64) & _F32_TRUNCATE
    back = s - x
    error = (x - (s - back)) + (y - back)
    if error.any():
        inward = (truncated == s.view(U64)) & (((error < 0) & (s > 0)) | ((error > 0) & (s < 0)))
        truncated = np.where(inward, truncated - _F32_ULP_IN_F64, truncated)
    return float_out(truncated.view(F64).astype(F32).view(U32))


def _positive(bits):
    return bits.view(F32) > 0


def _signed(x):
    return x.view(I32)


def _sum(fa, fb):
    x, y = fa.astype(F64), fb.astype(F64)
    return _sum_toward_zero(x, y, x + y)


# --- ADD ALU ------------------------------------------------------------------------------

def fadd(a, b):
    return _sum(float_in(a), float_in(b))


def fsub(a, b):
    return _sum(float_in(a), -float_in(b))


def _smaller(fa, fb):
    return np.where(fa > fb, fb, fa).view(U32)


def _larger(fa, fb):
    return np.where(fa > fb, fa, fb).view(U32)


def _magnitude(x):
    return (float_in(x).view(U32) & _ABS_MASK).view(F32)


def fmin(a, b):
    return _smaller(float_in(a), float_in(b))


def fmax(a, b):
    return _larger(float_in(a), float_in(b))


def fminabs(a, b):
    return _smaller(_magnitude(a), _magnitude(b))


def fmaxabs(a, b):
    return _larger(_magnitude(a), _magnitude(b))


def ftoi(a, b):
    # Truncates (facts §5.9: VC4C and py-videocore's hardware test); NaN, Inf and values
    # outside int32 give 0 (facts §1).
    f = float_in(a)
    valid = (f >= _INT32_MIN) & (f < _INT32_LIMIT)
    return np.where(valid, f, 0).astype(I32).view(U32)


def itof(a, b):
    # Rounds toward zero (facts §1).
    return _truncated(_signed(a).astype(F64))


def add(a, b):
    return a + b


def sub(a, b):
    return a - b


def _bit_before_shift(a, s):
    """Bit s-1 of a (the last bit a right shift by s pushes out); 0 when s = 0."""
    return ((a.astype(U64) << _ONE64) >> s.astype(U64) & _ONE64).astype(bool)


def shr(a, b):
    return a >> (b & _THIRTY_ONE)


def asr(a, b):
    return (_signed(a) >> (b & _THIRTY_ONE).view(I32)).view(U32)


def ror(a, b):
    s = b & _THIRTY_ONE
    return (a >> s) | (a << ((_THIRTY_TWO - s) & _THIRTY_ONE))


def shl(a, b):
    return a << (b & _THIRTY_ONE)


def min_(a, b):
    return np.where(_signed(a) > _signed(b), b, a)


def max_(a, b):
    return np.where(_signed(a) > _signed(b), a, b)


def and_(a, b):
    return a & b


def or_(a, b):
    return a | b


def xor(a, b):
    return a ^ b


def not_(a, b):
    return ~a


def clz(a, b):
    # frexp's exponent of a positive integer is its bit length; frexp(0) gives 0, so clz(0) = 32.
    return (32 - np.frexp(a.astype(F64))[1]).astype(U32)


def _bytes(x):
    return x.view(np.uint8)


def v8adds(a, b):
    return np.minimum(_bytes(a).astype(np.uint16) + _bytes(b), 255).astype(np.uint8).view(U32)


def v8subs(a, b):
    return np.maximum(_bytes(a).astype(np.int16) - _bytes(b), 0).astype(np.uint8).view(U32)


# --- MUL ALU ------------------------------------------------------------------------------

def fmul(a, b):
    fa, fb = float_in(a), float_in(b)
    if _moderate(a) and _moderate(b):       # fast path: the product needs no fix-up
        product = fa * fb
        result = product.view(U32)
        _remember(result, product)
        return result
    return fmul_exact(a, b)


def fmul_exact(a, b):
    """fmul for any operands (the fast path of ``fmul`` must agree with it)."""
    return float_out((float_in(a) * float_in(b)).view(U32), _NAN_IS_ZERO)


def mul24(a, b):
    return (a & _MUL24_MASK) * (b & _MUL24_MASK)


def v8muld(a, b):
    # Byte by byte (facts §5.11: the hardware tests), (a * b + 127) / 255 per byte.
    return ((_bytes(a).astype(np.uint16) * _bytes(b) + 127) // 255).astype(np.uint8).view(U32)


def v8min(a, b):
    return np.minimum(_bytes(a), _bytes(b)).view(U32)


def v8max(a, b):
    return np.maximum(_bytes(a), _bytes(b)).view(U32)


ADD = {"fadd": fadd, "fsub": fsub, "fmin": fmin, "fmax": fmax, "fminabs": fminabs,
       "fmaxabs": fmaxabs, "ftoi": ftoi, "itof": itof, "add": add, "sub": sub, "shr": shr,
       "asr": asr, "ror": ror, "shl": shl, "min": min_, "max": max_, "and": and_, "or": or_,
       "xor": xor, "not": not_, "clz": clz, "v8adds": v8adds, "v8subs": v8subs}
MUL = {"fmul": fmul, "mul24": mul24, "v8muld": v8muld, "v8min": v8min, "v8max": v8max,
       "v8adds": v8adds, "v8subs": v8subs}


# --- carry ------------------------------------------------------------------------------------
# The C flag an op sets, as a function (a, b, result) -> bool vector, computed only by
# instructions that set flags; ops not listed clear it (facts §1 carry table; mul24: facts §5.10
# is disputed, we leave it clear like every op without a listed carry). The carries of add and
# sub come from the operands, so the saturating forms below share them.

def _float_greater(a, b, r):
    return float_in(a) > float_in(b)


CARRY = {
    "fadd": lambda a, b, r: _positive(r),
    "fsub": lambda a, b, r: _positive(r),
    "fmin": _float_greater,
    "fmax": _float_greater,
    "fminabs": lambda a, b, r: _magnitude(a) > _magnitude(b),
    "fmaxabs": lambda a, b, r: _magnitude(a) > _magnitude(b),
    "itof": lambda a, b, r: _signed(a) > 0,
    "add": lambda a, b, r: a + b < a,
    "sub": lambda a, b, r: a < b,
    "shr": lambda a, b, r: _bit_before_shift(a, b & _THIRTY_ONE),
    "asr": lambda a, b, r: _bit_before_shift(a, b & _THIRTY_ONE),
    "shl": lambda a, b, r: ((a.astype(U64) << (b & _THIRTY_ONE).astype(U64)) >> _THIRTY_TWO_64
                            & _ONE64).astype(bool),
    "min": lambda a, b, r: _signed(a) > _signed(b),
    "max": lambda a, b, r: _signed(a) > _signed(b),
}


# --- saturating forms for the regfile-A pack "32s" -------------------------------------------
# The pack saturates the exact result to int32; ops whose result always fits are unchanged.

def _saturated(wide):
    return np.clip(wide, -2 ** 31, 2 ** 31 - 1).astype(I32).view(U32)


def add_saturating(a, b):
    return _saturated(_signed(a).astype(I64) + _signed(b))


def sub_saturating(a, b):
    return _saturated(_signed(a).astype(I64) - _signed(b))


def mul24_saturating(a, b):
    return _saturated((a & _MUL24_MASK).astype(I64) * (b & _MUL24_MASK))


SATURATING = {"add": add_saturating, "sub": sub_saturating, "mul24": mul24_saturating}


def flags_of(result):
    """(Z, N) of a result vector."""
    return result == ZERO, result >= SIGN_MIN
