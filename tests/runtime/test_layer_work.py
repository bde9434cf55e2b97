"""Flops and bytes the profile charges each IR node (``profile.layer_work``), against counts
derived by hand: a multiply-add is 2 flops, every value and weight float32."""

import numpy as np
import pytest

from vc4nn.runtime.ir import Graph, Node
from vc4nn.runtime.profile import layer_work


def work(op, x_shape, out_shape, w_shape, bias=False, residual=False):
    constants = {"w": np.zeros(w_shape, np.float32), "b": np.zeros(w_shape[-1], np.float32)}
    inputs = ["x", "w"] + (["b"] if bias or residual else []) + (["r"] if residual else [])
    graph = Graph("m.onnx", "onnx", [], ["y"], [], constants,
                  {"x": x_shape, "y": out_shape, "r": out_shape})
    return layer_work(Node(op, "n", inputs, ["y"]), graph)


@pytest.mark.parametrize("op, x_shape, out_shape, w_shape, flops, values", [
    # 9 multiply-adds per output of a 3x3 depthwise layer
    ("depthwise", (8, 8, 16), (8, 8, 16), (3, 3, 16), 2 * 8 * 8 * 16 * 9,
     2 * 8 * 8 * 16 + 3 * 3 * 16),
    # Cin multiply-adds per output of a pointwise layer
    ("pointwise", (4, 4, 16), (4, 4, 32), (16, 32), 2 * 16 * 32 * 16, 16 * 16 + 16 * 32 + 16 * 32),
    # KH*KW*Cin per output of a 3x3 convolution (stride 2)
    ("conv2d", (8, 8, 3), (4, 4, 8), (3, 3, 3, 8), 2 * 16 * 8 * 27,
     8 * 8 * 3 + 16 * 8 + 3 * 3 * 3 * 8),
    ("fully_connected", (64,), (10,), (64, 10), 2 * 640, 64 + 10 + 640),
])
def test_weighted_layers(op, x_shape, out_shape, w_shape, flops, values):
    assert work(op, x_shape, out_shape, w_shape) == (flops, 4 * values)


def test_a_fused_residual_adds_its_add_and_its_read():
    pixels_out = 4 * 4 * 32
    flops = 2 * pixels_out * 16 + pixels_out
    values = 4 * 4 * 16 + pixels_out + pixels_out + 16 * 32 + 32      # x, residual, y, w, b
    assert work("pointwise", (4, 4, 16), (4, 4, 32), (16, 32), residual=True) == \
        (flops, 4 * values)
