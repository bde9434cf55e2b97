"""The pointwise (1x1) convolution as the SGEMM panel kernel with a fused epilogue.

A 1x1 convolution of an (H, W, Cin) activation is the product [H*W, Cin] x [Cin, Cout]. The
activation plays A (each QPU gathers 8 pixels' channels through the TMU), the weights play B
(the operand every QPU shares: one DMA per k-row of a panel into the VPM), so the weights are
read once per pass of 96 pixels x 12 QPUs and the activation once per 96 output channels
(docs/sgemm.md, "The panel kernel"). The bias is where the accumulators start, the residual is
gathered and added before the store, the activation is applied on the VPM write
(vc4nn/kernels/epilogue.py): no extra pass over the result.

With Cin a multiple of 256 the 8 pixels a QPU gathers lie Cin*4 bytes apart and share sets of
the direct-mapped TMU cache, so every gather misses: then the activation is first transposed on
the GPU ([Cin, H*W], one extra launch) and the panel kernel's TN path reads it, as SGEMM does
(``transpose_a_first``). The weights need no such care: B is only ever DMA'd.
"""

import dataclasses
import functools
import typing

from ..errors import DeviceError
from . import sgemm_panel, transpose
from .common import MAX_VDW_STRIDE, STORAGE_BYTES, WORD
from .epilogue import Epilogue


@dataclasses.dataclass(frozen=True)
class PointwisePlan:
    """Everything the two launches of one pointwise layer depend on.

    ``transpose_input``: None follows SGEMM's aliasing rule (``sgemm_panel.transpose_a_first``);
    True / False force the route (a tuner's choice). The panel kernel's own tiling (rows per
    QPU, panel width, chunk rows, passes) is derived in ``panel``.
    """

    height: int
    width: int
    cin: int
    cout: int
    num_qpus: int
    bias: bool = False
    residual: bool = False
    activation: typing.Optional[str] = None
    storage: str = "f32"
    transpose_input: typing.Optional[bool] = None

    def __post_init__(self):
        if self.storage not in STORAGE_BYTES:
            raise DeviceError(f"pointwise: storage {self.storage!r} is not one of "
                              f"{sorted(STORAGE_BYTES)}")
        if STORAGE_BYTES[self.storage] != sgemm_panel.WORD:
            raise DeviceError(f"pointwise: the panel kernel stores {sgemm_panel.WORD}-byte "
                              f"elements; {self.storage} storage is not implemented yet")

    @property
    def pixels(self):
        return self.height * self.width

    @property
    def epilogue(self):
        return Epilogue(self.bias, self.residual, self.activation)

    def _panel(self, trans_a):
        return sgemm_panel.PanelPlan(self.pixels, self.cout, self.cin, trans_a, self.num_qpus,
                                     True, True, self.epilogue)

    @property
    def transposed(self):
        """Whether the activation is transposed on the GPU first (see the module's docstring).
        The transpose's VDW stride limits it to H*W <= 16384 pixels."""
        if (self.pixels - 1) * WORD > MAX_VDW_STRIDE:
            return False
        if self.transpose_input is not None:
            return self.transpose_input
        return sgemm_panel.transpose_a_first(self._panel(False))

    @property
    def panel(self):
        return self._panel(self.transposed)

    @property
    def transpose(self):
        """The transpose launch's plan, or None."""
        return transpose.TransposePlan(self.pixels, self.cin, self.num_qpus) if self.transposed else None


@functools.lru_cache(maxsize=128)
def programs_for(plan):
    """(transpose program or None, panel program) of a plan, assembled once per plan."""
    first = transpose.program_for(plan.transpose) if plan.transpose else None
    return first, sgemm_panel.program_for(plan.panel)


def launches(plan, x, w, y, bias=None, residual=None, workspace=None):
    """[(program, QPUs, uniform streams)] of the layer, in order. Bus addresses: x the
    activation, w the weights (Cin, Cout), y the result, bias / residual when the plan has them,
    workspace a Cin x H*W float buffer when the plan transposes."""
    first, main = programs_for(plan)
    out = []
    a = x
    if first is not None:
        out.append((first, plan.transpose.qpus, plan.transpose.uniform_streams(x, workspace)))
        a = workspace
    streams = sgemm_panel.uniform_streams(plan.panel, (a, w, y), 1.0, 0.0, bias=bias,
                                          residual=residual)
    out.append((main, plan.num_qpus, streams))
    return out
