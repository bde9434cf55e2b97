"""The end of every layer kernel's output vector: the fused activation (the bias is added by
the kernels where it is cheapest: as the start value of the first multiply-add)."""

from asm import r0

ACTIVATIONS = (None, "relu", "relu6")


def activate(a, dst, src, activation, six, scratch=r0):
    """dst = activation(src): None copies, relu = max(x, 0), relu6 = min(max(x, 0), 6) with
    ``six`` a register holding 6.0 (not a small immediate)."""
    if activation is None:
        a.mov(dst, src)
    elif activation == "relu":
        a.fmax(dst, src, 0)
    elif activation == "relu6":
        a.fmax(scratch, src, 0)
        a.fmin(dst, scratch, six)
    else:
        raise ValueError(f"activation {activation!r} is not one of {ACTIVATIONS}")
