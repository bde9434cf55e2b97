"""The special function unit: recip, recipsqrt, exp (2^x) and log (log2|x|) into r4.

The hardware is accurate to about 11-13 bits (facts §1: hardware tests pass with rtol 1e-4 for
recip, recipsqrt and exp2). The emulator computes in float64 and rounds the result to nearest
with 13 fraction bits (relative error <= 2^-14), the same on every host, so programs that rely
on more precision than the hardware gives fail here too. Operands are fixed up like every float
operand (alu.float_in: denormals flush, NaN acts as +Inf); denormal results flush.
"""

import numpy as np

from .alu import F32, F64, U32, U64, float_out, float_in, lanes

FRACTION_BITS = 13
_DROP = 52 - FRACTION_BITS
_HALF_MINUS_ONE = lanes((1 << (_DROP - 1)) - 1, U64)
_DROP_SHIFT, _ONE = lanes(_DROP, U64), lanes(1, U64)
_KEEP = lanes(~((1 << _DROP) - 1) & 0xFFFFFFFFFFFFFFFF, U64)


def reduce_precision(f64):
    """float64 vector -> float32 bits with FRACTION_BITS fraction bits, rounded to nearest even."""
    bits = f64.view(U64)
    odd = (bits >> _DROP_SHIFT) & _ONE
    rounded = ((bits + _HALF_MINUS_ONE + odd) & _KEEP).view(F64)
    return float_out(rounded.astype(F32).view(U32))


FUNCTIONS = {
    "recip": lambda x: 1.0 / x,                    # recip(+-0) = +-Inf
    "recipsqrt": lambda x: 1.0 / np.sqrt(np.abs(x)),
    "exp": np.exp2,
    "log": lambda x: np.log2(np.abs(x)),           # log(0) = -Inf
}


def compute(name, value):
    """r4 after writing ``value`` (uint32 vector) to the SFU register ``name``."""
    return reduce_precision(FUNCTIONS[name](float_in(value).astype(F64)))
