"""Unpack (on regfile-A or r4 reads) and pack (on writes), by the names of ``asm.isa``.

The conversion depends on the kind of the ops at the other end (facts §1): a float consumer of a
16-bit field gets float16 -> float32 and of a byte gets byte / 255; an int consumer gets the
sign-extended 16-bit or zero-extended byte. Packs turn a float result into float16 for the 16-bit
forms; the 8-bit forms of the regfile-A pack work on the bits whatever the op kind (the fact sheet
gives a float conversion only for the 16-bit forms and the MUL colour pack). "8d_rep" replicates
byte 3 into all four bytes for both kinds (it feeds the v8 ops). Partial packs keep the
destination's other bits. Choices: docs/hardware-choices.md "Emulator core" and "Float16
pack and unpack".

Float16 conversions, one line per case (the QPU has no denormals; the saturating 16-bit forms
saturate int results only):
- unpack: normal -> the same value; +-0 and denormal -> signed zero; Inf -> Inf; NaN -> NaN
  with the sign, quiet bit and payload moved up 13 bits.
- pack: |x| < 2**-14 (the smallest normal half) -> signed zero, decided before rounding;
  otherwise round to nearest even to 10 fraction bits; a result of 2**16 or more, and Inf, is
  Inf of the same sign. (Float ops never return a NaN, alu.py; a NaN's bits would give Inf.)
"""

import numpy as np

from asm import isa

from .alu import F32, I32, U32, lanes

_BYTE_REPLICATE = lanes(0x01010101)

# float32 exponent bias minus float16's, in place at the float32 exponent.
_REBIAS = (127 - 15) << 23
_FLOAT_INF = 0x7F800000


def _half_to_float_bits(h):
    """float32 bits of half bits ``h`` (an int64 array of values below 2**16)."""
    sign, exponent, fraction = (h & 0x8000) << 16, h & 0x7C00, h & 0x3FF
    normal = sign | (((h & 0x7FFF) << 13) + _REBIAS)
    special = sign | _FLOAT_INF | (fraction << 13)          # Inf, or NaN keeping its payload
    return np.where(exponent == 0, sign, np.where(exponent == 0x7C00, special, normal))


# Every half as float32 bits: unpack is one lookup.
_HALF_TO_FLOAT = _half_to_float_bits(np.arange(1 << 16, dtype=np.int64)).astype(U32)
_HALF_MASK = lanes(0xFFFF)


def _half_to_float(h16):
    # take() wants intp indices; an int32 view is safe where intp is 32 bits (values < 2**16).
    return _HALF_TO_FLOAT.take(h16.view(I32))


# Constants of the float -> half conversion, as lanes (array-array ops are the fast ones).
_MAGNITUDE, _SIGN_TO_HALF, _HALF_INF = lanes(0x7FFFFFFF), lanes(0x8000), lanes(0x7C00)
_ROUNDING, _ONE, _REBIAS_HALF = lanes(0xFFF), lanes(1), lanes(_REBIAS >> 13)
_SIXTEEN, _THIRTEEN, _TWENTY_THREE = lanes(16), lanes(13), lanes(23)
# By float32 exponent: keep the half, or flush it (below 2**-14, the smallest normal half).
_KEEP_NORMAL = np.where(np.arange(256) < 127 - 14, 0, 0xFFFF).astype(U32)


def _float_to_half(v):
    """Half bits (as uint32) of float32 bits ``v``."""
    magnitude = v & _MAGNITUDE
    # Round to nearest even at bit 13 in place (a carry steps the exponent), then rebias.
    nearest_even = (magnitude + _ROUNDING + ((magnitude >> _THIRTEEN) & _ONE)) >> _THIRTEEN
    # 2**16 and more, Inf and NaN: Inf. Below 2**-14 the rebias wraps; the flush clears it.
    half = np.minimum(nearest_even - _REBIAS_HALF, _HALF_INF)
    half &= _KEEP_NORMAL.take((magnitude >> _TWENTY_THREE).view(I32))
    return ((v >> _SIXTEEN) & _SIGN_TO_HALF) | half


def _int_to_half(v, saturate):
    if saturate:
        return np.clip(v.view(I32), -32768, 32767).astype(I32).view(U32) & lanes(0xFFFF)
    return v & lanes(0xFFFF)


def _byte(v, saturate):
    if saturate:
        return np.clip(v.view(I32), 0, 255).astype(U32)
    return v & lanes(0xFF)


def _colour_byte(v):
    """A float in [0, 1] as a byte (MUL colour pack), rounded to nearest. A NaN (the bits of
    an integer op's result) packs as 0: numpy's NaN-to-integer cast differs between hosts."""
    f = v.view(F32)
    return np.rint(np.clip(np.where(np.isnan(f), F32(0), f), 0.0, 1.0) * 255.0).astype(U32)


def _into(shift, mask):
    """Put a field into ``old`` at ``shift``, keeping the other bits."""
    keep = lanes(~(mask << shift) & 0xFFFFFFFF)
    shift = lanes(shift)
    return lambda field, old: (old & keep) | (field << shift)


def _replicate(byte, old):
    return byte * _BYTE_REPLICATE


# --- unpack ---------------------------------------------------------------------------------

def _unpack_half(shift):
    shift, sign = lanes(shift), lanes(0x8000)
    return {"float": lambda v: _half_to_float((v >> shift) & _HALF_MASK),
            # sign extension: flip the sign bit, then subtract its weight
            "int": lambda v: (((v >> shift) & _HALF_MASK) ^ sign) - sign}


def _unpack_byte(index):
    shift, mask = lanes(8 * index), lanes(0xFF)
    return {"float": lambda v: (((v >> shift) & mask).astype(F32) / F32(255.0)).view(U32),
            "int": lambda v: (v >> shift) & mask}


def _unpack_replicate():
    shift = lanes(24)
    same = lambda v: (v >> shift) * _BYTE_REPLICATE  # noqa: E731
    return {"float": same, "int": same}


_UNPACK = {"16a": _unpack_half(0), "16b": _unpack_half(16), "8d_rep": _unpack_replicate(),
           "8a": _unpack_byte(0), "8b": _unpack_byte(1), "8c": _unpack_byte(2),
           "8d": _unpack_byte(3)}


def unpack(code, kind):
    """Function value -> value for unpack ``code`` feeding an op of ``kind``; None for none."""
    name = isa.UNPACK_NAMES[code]
    return None if name == "nop" else _UNPACK[name][kind]


# --- regfile-A pack (pm = 0) ----------------------------------------------------------------

def _pack_half(put, saturate):
    # The guide: "convert to 16 bit float if input was float result, else convert to signed 16
    # bit integer (with saturation)": saturation is for ints only.
    return {"float": lambda v, old: put(_float_to_half(v), old),
            "int": lambda v, old: put(_int_to_half(v, saturate), old)}


def _pack_byte(put, saturate):
    both = lambda v, old: put(_byte(v, saturate), old)  # noqa: E731
    return {"float": both, "int": both}


def _regfile_a_packs():
    half_a, half_b = _into(0, 0xFFFF), _into(16, 0xFFFF)
    byte_into = [_into(8 * i, 0xFF) for i in range(4)]
    table = {}
    for suffix, saturate in (("", False), ("s", True)):
        table["16a" + suffix] = _pack_half(half_a, saturate)
        table["16b" + suffix] = _pack_half(half_b, saturate)
        table["8888" + suffix] = _pack_byte(_replicate, saturate)
        for i, letter in enumerate("abcd"):
            table[f"8{letter}{suffix}"] = _pack_byte(byte_into[i], saturate)
    return table


_PACK_A = _regfile_a_packs()
# "32s" saturates the exact result: done by the op itself (alu.SATURATING), nothing to pack.
PACK_A_BY_OP = frozenset({"32s"})


def pack_a(code, kind):
    """Function (value, old) -> value for regfile-A pack ``code`` of an op result of ``kind``;
    None when the pack leaves the value as it is."""
    name = isa.PACK_A_NAMES[code]
    return None if name == "nop" or name in PACK_A_BY_OP else _PACK_A[name][kind]


def pack_a_saturates_op(code):
    return isa.PACK_A_NAMES[code] in PACK_A_BY_OP


# --- MUL colour pack (pm = 1) ---------------------------------------------------------------

def _colour_packs():
    table = {"8888c": lambda v, old: _replicate(_colour_byte(v), old)}
    for i, letter in enumerate("abcd"):
        put = _into(8 * i, 0xFF)
        table[f"8{letter}c"] = (lambda p: lambda v, old: p(_colour_byte(v), old))(put)
    return table


_PACK_MUL = _colour_packs()


def pack_mul(code):
    """Function (value, old) for MUL pack ``code`` (pm = 1); None for none. KeyError if the
    code is reserved."""
    name = isa.PACK_MUL_NAMES[code]
    return None if name == "nop" else _PACK_MUL[name]
