"""What every spatial kernel plan shares: storage types, the plan error, output sizes."""

from ..errors import Vc4nnError

# Storage types of activations and weights in memory, and their element sizes in bits. The
# arithmetic is float32 either way (docs/kernels.md "fp16 storage").
STORAGE_BITS = {"fp32": 32, "fp16": 16}


class PlanError(Vc4nnError):
    """A layer shape or plan the spatial kernels cannot run."""


def check_storage(name, value, allowed=tuple(STORAGE_BITS)):
    if value not in allowed:
        raise PlanError(f"{name}={value!r}: one of {', '.join(map(repr, allowed))}")
    return value


class SpatialShape:
    """Output size and element sizes of a plan with in_h, in_w, kernel_h, kernel_w, stride_h,
    stride_w, pads (top, bottom, left, right), in_storage and out_storage fields."""

    @property
    def out_h(self):
        return (self.in_h + self.pads[0] + self.pads[1] - self.kernel_h) // self.stride_h + 1

    @property
    def out_w(self):
        return (self.in_w + self.pads[2] + self.pads[3] - self.kernel_w) // self.stride_w + 1

    @property
    def in_bits(self):
        return STORAGE_BITS[self.in_storage]

    @property
    def out_bits(self):
        return STORAGE_BITS[self.out_storage]

    @property
    def in_bytes(self):
        return self.in_bits // 8

    @property
    def out_bytes(self):
        return self.out_bits // 8
