"""A program can be planned, generated and assembled (hazard-checked) for every depthwise layer
and stem of MobileNet v1 and v2 at width multipliers 0.25/0.5/0.75/1.0 and input sizes
128/160/192/224 (without running them: that is the benchmarks' job)."""

import pytest

from vc4nn.kernels import conv2d as conv2d_kernel
from vc4nn.kernels.window import program_for as window_program
from vc4nn.kernels.window_plan import make_plan
from vc4nn.nn.layer_args import resolve_padding
from vc4nn.nn.mobilenet_shapes import every_layer


def plans(layers):
    out = set()
    for _, layer in layers:
        stride = layer.stride
        if layer.kind == "depthwise":
            pads, _ = resolve_padding("dw", "same", layer.height, layer.width, 3, 3, stride, stride)
            out.add(make_plan("depthwise", layer.height, layer.width, layer.cin, (3, 3),
                              (stride, stride), pads, layer.activation, 12))
        else:
            pads, _ = resolve_padding("conv", "same", layer.height, layer.width, 3, 3, stride,
                                      stride)
            out.add(conv2d_kernel.Conv2dPlan(layer.height, layer.width, layer.cin, layer.cout,
                                             3, 3, stride, stride, pads, layer.activation,
                                             12).check())
    return out


def assemble(plan):
    if isinstance(plan, conv2d_kernel.Conv2dPlan):
        return conv2d_kernel.program_for(plan)
    return window_program(plan)


ALL = every_layer(("depthwise", "conv2d"))


def test_every_layer_has_a_plan_that_fits():
    layers = plans(ALL)
    # 16 (width, size) pairs x (v1: 13 depthwise + stem; v2: 17 depthwise + stem)
    assert len(ALL) == 16 * (14 + 18) and len(layers) > 200


@pytest.mark.parametrize("net", ["mobilenet_v1_1.0_224", "mobilenet_v2_0.5_160"])
def test_one_network_assembles(net):
    for plan in plans([(n, layer) for n, layer in ALL if n == net]):
        assert len(assemble(plan).to_bytes()) > 0


@pytest.mark.slow
def test_every_layer_assembles():
    for plan in plans(ALL):
        assert len(assemble(plan).to_bytes()) > 0
