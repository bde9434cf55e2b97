"""The layer shapes of MobileNet v1 and v2 at any width multiplier and input size.

Written from the papers' tables and the reference implementations' channel rules
(/work/shared/docs/mobilenet-facts.md): v1 channels are max(int(c * alpha), 8) (TF-slim,
min_depth 8); v2 channels are rounded to a multiple of 8, never below 90% of c * alpha
(``_make_divisible``), and its last 1x1 convolution keeps 1280 channels for alpha <= 1. Spatial
sizes follow TensorFlow's "same" rule, out = ceil(in / stride). Kernels' tests and benchmarks
use these to cover every layer a MobileNet runs.
"""

import dataclasses
import typing

WIDTH_MULTIPLIERS = (0.25, 0.5, 0.75, 1.0)
INPUT_SIZES = (128, 160, 192, 224)

# (depthwise stride, output channels) of v1's 13 depthwise-separable blocks
V1_BLOCKS = ((1, 64), (2, 128), (1, 128), (2, 256), (1, 256), (2, 512), (1, 512), (1, 512),
             (1, 512), (1, 512), (1, 512), (2, 1024), (1, 1024))
# (expansion t, output channels c, repeats n, first stride s) of v2's bottleneck groups
V2_GROUPS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
             (6, 160, 3, 2), (6, 320, 1, 1))
STEM_CHANNELS = 32
V2_LAST_CHANNELS = 1280


@dataclasses.dataclass(frozen=True)
class Layer:
    """One layer: ``kind`` is "conv2d", "depthwise", "pointwise", "global_avg_pool",
    "fully_connected" or "add" (v2's residual add on its own, see ``mobilenet_v2``); sizes are the layer's input (H, W, Cin) and its output channels."""

    name: str
    kind: str
    height: int
    width: int
    cin: int
    cout: int
    stride: int = 1
    activation: typing.Optional[str] = None
    residual: bool = False


def ceil_div(a, b):
    return -(-a // b)


def v1_channels(c, alpha):
    return max(int(c * alpha), 8)


def make_divisible(v, divisor=8):
    rounded = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * v else rounded


def mobilenet_v1(alpha=1.0, size=224, classes=1001):
    c = v1_channels(STEM_CHANNELS, alpha)
    hw = ceil_div(size, 2)
    layers = [Layer("conv0", "conv2d", size, size, 3, c, 2, "relu6")]
    for i, (stride, out) in enumerate(V1_BLOCKS, 1):
        out = v1_channels(out, alpha)
        layers.append(Layer(f"dw{i}", "depthwise", hw, hw, c, c, stride, "relu6"))
        hw = ceil_div(hw, stride)
        layers.append(Layer(f"pw{i}", "pointwise", hw, hw, c, out, 1, "relu6"))
        c = out
    return layers + [Layer("pool", "global_avg_pool", hw, hw, c, c),
                     Layer("fc", "fully_connected", 1, 1, c, classes)]


def mobilenet_v2(alpha=1.0, size=224, classes=1000, unfused_adds=False):
    """``unfused_adds``: list each residual add as a layer of its own (kind "add") after its
    projection, as a runtime runs it when it cannot fuse it into the projection (which the
    projection's ``residual`` stands for otherwise)."""
    c = make_divisible(STEM_CHANNELS * alpha)
    hw = ceil_div(size, 2)
    layers = [Layer("conv0", "conv2d", size, size, 3, c, 2, "relu6")]
    block = 0
    for t, out, repeats, first_stride in V2_GROUPS:
        out = make_divisible(out * alpha)
        for r in range(repeats):
            stride = first_stride if r == 0 else 1
            name = f"b{block}"
            hidden = c * t
            if t != 1:
                layers.append(Layer(f"{name}.expand", "pointwise", hw, hw, c, hidden, 1, "relu6"))
            layers.append(Layer(f"{name}.dw", "depthwise", hw, hw, hidden, hidden, stride,
                                "relu6"))
            hw = ceil_div(hw, stride)
            residual = stride == 1 and c == out
            layers.append(Layer(f"{name}.project", "pointwise", hw, hw, hidden, out, 1, None,
                                residual=residual and not unfused_adds))
            if residual and unfused_adds:
                layers.append(Layer(f"{name}.add", "add", hw, hw, out, out))
            c = out
            block += 1
    last = make_divisible(V2_LAST_CHANNELS * alpha) if alpha > 1.0 else V2_LAST_CHANNELS
    return layers + [Layer("conv_last", "pointwise", hw, hw, c, last, 1, "relu6"),
                     Layer("pool", "global_avg_pool", hw, hw, last, last),
                     Layer("fc", "fully_connected", 1, 1, last, classes)]


def every_layer(kinds):
    """(network name, Layer) of every layer of the given kinds in MobileNet v1 and v2 at every
    width multiplier and input size."""
    out = []
    for alpha in WIDTH_MULTIPLIERS:
        for size in INPUT_SIZES:
            for version, build in (("v1", mobilenet_v1), ("v2", mobilenet_v2)):
                net = f"mobilenet_{version}_{alpha}_{size}"
                out += [(net, layer) for layer in build(alpha, size) if layer.kind in kinds]
    return out
