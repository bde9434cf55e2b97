"""The runtime's graph IR: one small typed graph both loaders produce and every pass rewrites.

Activations are NHWC without the batch axis: (H, W, C) for feature maps, (C,) for vectors; batch
1 is the only batch. Weights are constants in the layouts of ``vc4nn.nn``'s arguments:

    op                 inputs                       attrs
    conv               x, w (KH, KW, Cin/group, Cout), b?   stride, pads (t, b, l, r), group,
                                                    dilation, activation
    conv2d / depthwise / pointwise                  (``passes.lower`` picks one per conv;
                       depthwise w is (KH, KW, C), pointwise w is (Cin, Cout); pointwise may take
                       a residual as a 4th input)
    batch_norm         x, scale, offset             (y = x * scale + offset, per channel)
    activation         x                            kind: "relu", "relu6", or clip low/high
    add                a, b                         activation
    avg_pool           x                            size, stride, pads, count_include_pad
    global_avg_pool    x                            (-> (C,) or (1, 1, C): attr keepdims)
    fully_connected    x, w (Cin, Cout), b?         activation
    reshape            x                            shape (without batch)
    pad                x                            pads (t, b, l, r), value
    softmax            x
    identity           x

An input ``None`` name stands for an absent optional input.
"""

import dataclasses
from typing import Dict, List, Optional, Tuple

import numpy as np

WEIGHTED_OPS = ("conv", "conv2d", "depthwise", "pointwise", "fully_connected")
ACTIVATION_OPS = WEIGHTED_OPS + ("add",)        # the ops with an activation attr


@dataclasses.dataclass
class Node:
    op: str
    name: str
    inputs: List[Optional[str]]
    outputs: List[str]
    attrs: Dict[str, object] = dataclasses.field(default_factory=dict)
    source_op: str = ""           # the file's operator (Conv, DEPTHWISE_CONV_2D, ...), for errors


@dataclasses.dataclass
class GraphInput:
    """An input as the file declares it (``shape`` with batch, in the file's layout)."""
    name: str
    shape: Tuple[int, ...]
    dtype: str
    layout: str                   # "NCHW" (ONNX) or "NHWC" (TFLite); IR value is HWC


@dataclasses.dataclass
class Graph:
    path: str
    format: str                                   # "onnx" or "tflite"
    inputs: List[GraphInput]
    outputs: List[str]
    nodes: List[Node]
    constants: Dict[str, np.ndarray]
    shapes: Dict[str, Tuple[int, ...]] = dataclasses.field(default_factory=dict)
    output_shapes: Dict[str, Tuple[int, ...]] = dataclasses.field(default_factory=dict)  # file's

    def producers(self):
        return {out: node for node in self.nodes for out in node.outputs}

    def consumers(self):
        users = {}
        for node in self.nodes:
            for name in node.inputs:
                if name is not None:
                    users.setdefault(name, []).append(node)
        return users

    def const(self, name):
        return None if name is None else self.constants.get(name)

    def rename(self, old, new):
        """Make every reader of value ``old`` read ``new`` (graph outputs keep their names)."""
        for node in self.nodes:
            node.inputs = [new if name == old else name for name in node.inputs]
