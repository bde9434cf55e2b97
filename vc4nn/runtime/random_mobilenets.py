"""MobileNet-style ONNX models with random weights, written with onnx.helper the way exporters
write them (torchvision through torch.onnx: Conv + BatchNormalization + Clip/Relu, Add,
GlobalAveragePool, Flatten, Gemm; older opsets: Clip bounds as attributes).

``mobilenet_v1(size, width)`` has the structure of the real network at any width multiplier and
input size; ``mobilenet_v2(size, width)`` too, with fewer repeated blocks unless given
``blocks=mobilenet_shapes.V2_GROUPS`` (SMALL_V2_GROUPS): what the tests compare with onnxruntime;
``tools/bench_mobilenet.py --model v2`` times all 17 blocks (the time does not depend on the
weights). Needs the onnx extra (``pip install 'vc4nn[onnx]'``).
"""

import numpy as np

from ..nn.mobilenet_shapes import STEM_CHANNELS, V1_BLOCKS, V2_LAST_CHANNELS, make_divisible, \
    v1_channels
from .errors import ModelError

try:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError:                     # the optional extra; OnnxBuilder says what to install
    onnx = None


# v2's bottleneck groups (t, c, n, s; mobilenet_shapes.V2_GROUPS) with 12 blocks instead of 17:
# 2 of c = 64 and 160, 1 of c = 96.
SMALL_V2_GROUPS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 2, 2), (6, 96, 1, 1),
                   (6, 160, 2, 2), (6, 320, 1, 1))


class OnnxBuilder:
    """Nodes and random initializers of one model, named uniquely in the order they are made."""

    def __init__(self, seed=0, opset=13, bn=True):
        if onnx is None:
            raise ModelError("building ONNX models needs the onnx package: "
                             "pip install 'vc4nn[onnx]'")
        self.rng = np.random.default_rng(seed)
        self.opset, self.bn = opset, bn
        self.nodes, self.inits, self.count = [], [], 0

    def name(self, base):
        self.count += 1
        return f"{base}{self.count}"

    def const(self, array, base="c"):
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op, inputs, **attrs):
        out = self.name(op.lower() + "_out")
        self.nodes.append(helper.make_node(op, inputs, [out], name=self.name(op), **attrs))
        return out

    def relu6(self, x):
        if self.opset < 11:
            return self.node("Clip", [x], min=0.0, max=6.0)
        return self.node("Clip", [x, self.const(np.float32(0)), self.const(np.float32(6))])

    def conv_bn(self, x, cin, cout, k=3, stride=1, group=1, act="relu6", pads=None):
        fan_in = cin // group * k * k
        w = self.rng.standard_normal((cout, cin // group, k, k)).astype(np.float32) \
            * np.float32(np.sqrt(2.0 / fan_in))
        p = k // 2 if pads is None else pads
        inputs = [x, self.const(w, "w")]
        if not self.bn:
            inputs.append(self.const(self.rng.standard_normal(cout).astype(np.float32) * 0.1))
        y = self.node("Conv", inputs, kernel_shape=[k, k], strides=[stride, stride],
                      pads=[p, p, p, p], group=group)
        if self.bn:
            r = self.rng
            y = self.node("BatchNormalization", [
                y, self.const(r.uniform(0.5, 1.5, cout).astype(np.float32)),
                self.const(r.standard_normal(cout).astype(np.float32) * 0.1),
                self.const(r.standard_normal(cout).astype(np.float32) * 0.1),
                self.const(r.uniform(0.5, 1.5, cout).astype(np.float32))], epsilon=1e-5)
        if act == "relu6":
            y = self.relu6(y)
        elif act == "relu":
            y = self.node("Relu", [y])
        return y

    def head(self, x, c, classes, flatten=True, gemm=True, softmax=False):
        y = self.node("GlobalAveragePool", [x])
        if flatten:
            y = self.node("Flatten", [y], axis=1)
        else:
            y = self.node("Reshape", [y, self.const(np.array([1, -1], np.int64))])
        w = (self.rng.standard_normal((classes, c)) / np.sqrt(c)).astype(np.float32)
        b = (self.rng.standard_normal(classes) * 0.1).astype(np.float32)
        if gemm:
            y = self.node("Gemm", [y, self.const(w), self.const(b)], transB=1)
        else:
            y = self.node("MatMul", [y, self.const(np.ascontiguousarray(w.T))])
            y = self.node("Add", [y, self.const(b)])
        if softmax:
            y = self.node("Softmax", [y], axis=1)
        return y

    def model(self, x_name, size, out):
        graph = helper.make_graph(
            self.nodes, "mobilenet",
            [helper.make_tensor_value_info(x_name, TensorProto.FLOAT, [1, 3, size, size])],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, None])], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = 10 if self.opset >= 13 else 7
        onnx.checker.check_model(model)
        return model


def mobilenet_v1(size=32, width=0.25, classes=10, seed=0, opset=13, **head):
    b = OnnxBuilder(seed, opset)
    x = "input"
    cin = v1_channels(STEM_CHANNELS, width)
    y = b.conv_bn(x, 3, cin, stride=2)
    for stride, cout in V1_BLOCKS:
        y = b.conv_bn(y, cin, cin, stride=stride, group=cin)
        y = b.conv_bn(y, cin, v1_channels(cout, width), k=1)
        cin = v1_channels(cout, width)
    return b.model(x, size, b.head(y, cin, classes, **head))


def mobilenet_v2(size=32, width=0.35, classes=10, seed=0, opset=13, blocks=None, **head):
    b = OnnxBuilder(seed, opset)
    x = "input"
    cin = make_divisible(STEM_CHANNELS * width)
    y = b.conv_bn(x, 3, cin, stride=2)
    for t, c, n, s in blocks or SMALL_V2_GROUPS:
        cout = make_divisible(c * width)
        for i in range(n):
            stride = s if i == 0 else 1
            h = y
            hidden = cin * t
            if t != 1:
                h = b.conv_bn(h, cin, hidden, k=1)
            h = b.conv_bn(h, hidden, hidden, stride=stride, group=hidden)
            h = b.conv_bn(h, hidden, cout, k=1, act=None)
            y = b.node("Add", [y, h]) if stride == 1 and cin == cout else h
            cin = cout
    last = make_divisible(V2_LAST_CHANNELS * max(1.0, width))
    y = b.conv_bn(y, cin, last, k=1)
    return b.model(x, size, b.head(y, last, classes, **head))
