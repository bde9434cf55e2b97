"""The fused epilogue of the layer kernels: bias, residual add and activation on the way out.

A layer's result goes through the VPM to memory anyway; what it needs besides the sum of
products rides on that path instead of running as another pass over the tensor:

- **bias**: added once per output column. Kernels that keep accumulators in registers start
  them at the bias instead of zero (one gather per 16 columns, copied into every row's
  accumulator), so the bias costs nothing per element.
- **residual**: a tensor of the result's shape, gathered through the TMU just before the store
  and added to the accumulators (MobileNetV2's projection + skip).
- **activation**: relu is ``fmax(x, r5 = 0)`` written straight into the VPM (no extra
  instruction); relu6 is ``fmin`` against r5 = 6.0 then ``fmax`` with 0, one extra instruction
  per vector (an r5 write replicates one value: a constant).
"""

import dataclasses
import typing

from asm import r0, r5, r5rep

ACTIVATIONS = (None, "relu", "relu6")
RELU6_CEILING = 6.0


@dataclasses.dataclass(frozen=True)
class Epilogue:
    """What a kernel does to its result before storing it. The default does nothing."""

    bias: bool = False
    residual: bool = False
    activation: typing.Optional[str] = None

    def __post_init__(self):
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation {self.activation!r} is not one of {ACTIVATIONS}")

    @property
    def is_identity(self):
        return not (self.bias or self.residual or self.activation)


def prepare_activation(a, epilogue):
    """Before a run of ``activate(..., limit=r5)``: r5 holds relu's floor or relu6's ceiling (an
    accumulator, so it pairs with a value on either register file; a small immediate would not
    pair with regfile B)."""
    if epilogue.activation == "relu":
        a.ldi(r5rep, 0.0)
    elif epilogue.activation == "relu6":
        a.ldi(r5rep, RELU6_CEILING)


def activate(a, dst, src, activation, limit, scratch=r0, pack=None):
    """dst = activation(src): None copies, relu = max(x, 0), relu6 = min(max(x, 0), 6); relu6
    goes through ``scratch`` (an accumulator). ``limit``: r5 after ``prepare_activation`` (then
    ``src`` may sit on either register file), or a register holding 6.0 (relu then compares with
    the small immediate 0, so ``src`` must not sit on regfile B). ``pack`` ("16a"/"16b", dst in
    regfile A) converts the result to a half: the last op is then a float op (a mov is an int
    op and would keep the float's low bits). Returns the last instruction (its MUL slot is
    free)."""
    prepared = limit is r5
    if activation is None:
        if pack:
            return a.fmax(dst, src, src, pack=pack)
        return a.mov(dst, src)
    elif activation == "relu":
        return a.fmax(dst, src, r5 if prepared else 0, pack=pack)
    elif activation == "relu6" and prepared:
        a.fmin(scratch, src, r5)
        return a.fmax(dst, scratch, 0, pack=pack)  # the small immediate 0 is the float +0.0
    elif activation == "relu6":
        a.fmax(scratch, src, 0)
        return a.fmin(dst, scratch, limit, pack=pack)
    else:
        raise ValueError(f"activation {activation!r} is not one of {ACTIVATIONS}")
