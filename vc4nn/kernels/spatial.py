"""What every spatial kernel plan shares: storage types, the plan error, output sizes."""

from ..errors import Vc4nnError

STORAGE_BITS = {"float32": 32}      # fp16 storage (16) comes with the fp16 issue


class PlanError(Vc4nnError):
    """A layer shape or plan the spatial kernels cannot run."""


class SpatialShape:
    """Output size and element size of a plan with in_h, in_w, kernel_h, kernel_w, stride_h,
    stride_w, pads (top, bottom, left, right) and storage fields."""

    @property
    def out_h(self):
        return (self.in_h + self.pads[0] + self.pads[1] - self.kernel_h) // self.stride_h + 1

    @property
    def out_w(self):
        return (self.in_w + self.pads[2] + self.pads[3] - self.kernel_w) // self.stride_w + 1

    @property
    def elem_bytes(self):
        return STORAGE_BITS[self.storage] // 8
