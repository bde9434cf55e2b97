"""ONNX -> graph IR. NCHW becomes NHWC once, here: weights are transposed to ``vc4nn.nn``'s layouts
and every activation is (H, W, C) or (C,); the batch axis (1) is dropped.

Handles what real exporters write (torchvision through torch.onnx, tf2onnx): initializers listed as
graph inputs, Constant nodes, Clip's bounds as attributes (opset < 11) or inputs, Reshape's shape as
an initializer, Pad's pads as an attribute (opset < 11) or input, Gemm's transB/alpha/beta.
"""

import numpy as np

from .errors import ModelFormatError, UnsupportedModelError
from .ir import Graph, GraphInput, Node
from .loader import read_bytes

SUPPORTED_OPS = ("Conv", "BatchNormalization", "Relu", "Clip", "Add", "GlobalAveragePool",
                 "AveragePool", "Flatten", "Reshape", "Gemm", "MatMul", "Softmax", "Pad",
                 "Identity", "Constant")


def _onnx():
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError:
        raise UnsupportedModelError("reading ONNX files needs the onnx package: "
                                    "pip install 'vc4nn[onnx]'") from None
    return onnx, numpy_helper


def load_onnx(path):
    onnx, numpy_helper = _onnx()
    data = read_bytes(path)
    try:
        model = onnx.load_from_string(data)
    except Exception as error:          # protobuf's DecodeError and friends
        raise ModelFormatError(f"not a readable ONNX file ({type(error).__name__}: {error})",
                               path) from None
    if not model.graph.node:
        raise ModelFormatError("not an ONNX model: the file holds no graph nodes (truncated or "
                               "another format)", path)
    return _Converter(path, model, numpy_helper).convert()


def _attrs(node):
    from onnx import helper
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


class _Converter:
    def __init__(self, path, model, numpy_helper):
        self.path, self.model, self.numpy_helper = path, model, numpy_helper
        self.opset = max([o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
                         or [1])
        self.constants = {}
        self.nodes = []
        self.rank = {}               # value name -> rank in the file (4: NCHW, 2: NC)

    def error(self, message, node=None):
        return UnsupportedModelError(message, self.path, node)

    def convert(self):
        graph = self.model.graph
        for init in graph.initializer:
            self.constants[init.name] = self._array(init)
        inputs = []
        for value in graph.input:
            if value.name in self.constants:
                continue
            inputs.append(self._graph_input(value))
        if len(inputs) != 1:
            raise self.error(f"the model has {len(inputs)} non-constant inputs; the runtime runs "
                             f"models with one image input")
        self.rank[inputs[0].name] = 4
        for index, node in enumerate(graph.node):
            name = node.name or f"{node.op_type}_{index}"
            handler = getattr(self, "_op_" + node.op_type, None)
            if handler is None or node.domain not in ("", "ai.onnx"):
                raise self.error(f"unsupported operator {node.op_type!r} (supported: "
                                 f"{', '.join(SUPPORTED_OPS)}; `vc4nn ops` lists them)", name)
            handler(node, name, _attrs(node))
        outputs = [v.name for v in graph.output]
        output_shapes = {v.name: self._dims(v) for v in graph.output}
        return Graph(self.path, "onnx", inputs, outputs, self.nodes, self.constants,
                     output_shapes=output_shapes)

    # -- values ------------------------------------------------------------------------------
    def _array(self, tensor):
        try:
            array = self.numpy_helper.to_array(tensor)
        except Exception as error:
            raise ModelFormatError(f"tensor {tensor.name!r} cannot be read ({error})",
                                   self.path) from None
        return np.asarray(array)

    def _dims(self, value):
        dims = value.type.tensor_type.shape.dim
        return tuple(d.dim_value if d.HasField("dim_value") else -1 for d in dims)

    def _graph_input(self, value):
        dims = self._dims(value)
        elem = value.type.tensor_type.elem_type
        if elem != 1:                                    # TensorProto.FLOAT
            raise self.error(f"input {value.name!r} has ONNX element type {elem}; the runtime "
                             f"takes float32 images")
        if len(dims) != 4 or dims[0] not in (1, -1) or min(dims[1:]) < 1:
            raise self.error(f"input {value.name!r} has shape {dims}; the runtime takes one "
                             f"NCHW image of fixed size (batch 1)")
        return GraphInput(value.name, (1,) + dims[1:], "float32", "NCHW")

    def const(self, name, node, what):
        if name not in self.constants:
            raise self.error(f"{what} ({name!r}) must be a constant (initializer or Constant "
                             f"node)", node)
        return self.constants[name]

    def emit(self, op, name, source, inputs, outputs, rank, **attrs):
        self.nodes.append(Node(op, name, list(inputs), list(outputs), attrs, source))
        for out in outputs:
            self.rank[out] = rank

    def check_rank(self, node, name, value, ranks):
        if self.rank.get(value) not in ranks:
            raise self.error(f"input {value!r} has rank {self.rank.get(value)}; {node.op_type} "
                             f"is supported on rank {' or '.join(map(str, ranks))} tensors", name)

    def add_const(self, name, array):
        self.constants[name] = np.ascontiguousarray(array, dtype=np.float32)
        return name

    def spatial_attrs(self, node, name, attrs, kernel):
        """stride, pads (t, b, l, r) or a TF-style rule name, from an ONNX conv/pool node."""
        strides = tuple(attrs.get("strides", (1, 1)))
        if len(kernel) != 2 or len(strides) != 2:
            raise self.error(f"{node.op_type} with a {len(kernel)}-D kernel; only 2-D is "
                             f"supported", name)
        auto_pad = attrs.get("auto_pad", b"NOTSET")
        auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
        if auto_pad in ("NOTSET", ""):
            p = tuple(attrs.get("pads", (0, 0, 0, 0)))
            if len(p) != 4:
                raise self.error(f"{node.op_type} pads {p}: expected 4 values", name)
            pads = (p[0], p[2], p[1], p[3])     # ONNX [t, l, b, r] -> (t, b, l, r)
        elif auto_pad == "SAME_UPPER":
            pads = "same"
        elif auto_pad == "SAME_LOWER":
            pads = "same_lower"
        elif auto_pad == "VALID":
            pads = (0, 0, 0, 0)
        else:
            raise self.error(f"{node.op_type} auto_pad={auto_pad!r} is not an ONNX value", name)
        return (int(strides[0]), int(strides[1])), pads

    # -- operators ---------------------------------------------------------------------------
    def _op_Constant(self, node, name, attrs):
        if "value" in attrs:
            value = self.numpy_helper.to_array(attrs["value"])
        elif "value_float" in attrs or "value_floats" in attrs:
            value = np.array(attrs.get("value_float", attrs.get("value_floats")), np.float32)
        elif "value_int" in attrs or "value_ints" in attrs:
            value = np.array(attrs.get("value_int", attrs.get("value_ints")), np.int64)
        else:
            raise self.error(f"Constant with attributes {sorted(attrs)}; supported: value, "
                             f"value_float(s), value_int(s)", name)
        self.constants[node.output[0]] = np.asarray(value)

    def _op_Identity(self, node, name, attrs):
        if node.input[0] in self.constants:
            self.constants[node.output[0]] = self.constants[node.input[0]]
            return
        self.emit("identity", name, "Identity", node.input[:1], node.output[:1],
                  self.rank.get(node.input[0]))

    def _op_Conv(self, node, name, attrs):
        self.check_rank(node, name, node.input[0], (4,))
        w = self.const(node.input[1], name, "Conv weight")
        if w.ndim != 4:
            raise self.error(f"Conv weight of shape {w.shape}; only 2-D convolutions are "
                             f"supported", name)
        kernel = tuple(attrs.get("kernel_shape", w.shape[2:]))
        if kernel != tuple(w.shape[2:]):
            raise self.error(f"kernel_shape {kernel} disagrees with the weight {w.shape}", name)
        stride, pads = self.spatial_attrs(node, name, attrs, kernel)
        dilation = tuple(attrs.get("dilations", (1, 1)))
        inputs = [node.input[0], self.add_const(name + ":w", w.transpose(2, 3, 1, 0))]
        bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
        if bias is not None:
            inputs.append(self.add_const(name + ":b", self.const(bias, name, "Conv bias")))
        self.emit("conv", name, "Conv", inputs, node.output[:1], 4, stride=stride, pads=pads,
                  group=int(attrs.get("group", 1)), dilation=dilation, activation=None)

    def _op_BatchNormalization(self, node, name, attrs):
        self.check_rank(node, name, node.input[0], (4,))
        if attrs.get("training_mode", 0):
            raise self.error("BatchNormalization in training mode", name)
        scale, offset, mean, var = (self.const(n, name, "BatchNormalization parameter")
                                    .astype(np.float64) for n in node.input[1:5])
        factor = scale / np.sqrt(var + float(attrs.get("epsilon", 1e-5)))
        self.emit("batch_norm", name, "BatchNormalization",
                  [node.input[0], self.add_const(name + ":scale", factor),
                   self.add_const(name + ":offset", offset - mean * factor)],
                  node.output[:1], 4)

    def _op_Relu(self, node, name, attrs):
        self.emit("activation", name, "Relu", node.input[:1], node.output[:1],
                  self.rank.get(node.input[0]), low=0.0, high=float("inf"))

    def _op_Clip(self, node, name, attrs):
        if self.opset < 11:
            low, high = attrs.get("min", -np.inf), attrs.get("max", np.inf)
        else:
            bounds = [-np.inf, np.inf]
            for i, n in enumerate(node.input[1:3]):
                if n:
                    bounds[i] = float(np.asarray(self.const(n, name, "Clip bound")).reshape(()))
            low, high = bounds
        self.emit("activation", name, "Clip", node.input[:1], node.output[:1],
                  self.rank.get(node.input[0]), low=float(low), high=float(high))

    def _op_Add(self, node, name, attrs):
        a, b = node.input[:2]
        if a in self.constants:
            a, b = b, a
        rank = self.rank.get(a)
        if b in self.constants:
            bias = np.asarray(self.constants[b], np.float32)
            self.emit("bias_add", name, "Add", [a, self.add_const(name + ":b", bias)],
                      node.output[:1], rank)
            return
        self.emit("add", name, "Add", [a, b], node.output[:1], rank, activation=None)

    def _op_GlobalAveragePool(self, node, name, attrs):
        self.check_rank(node, name, node.input[0], (4,))
        self.emit("global_avg_pool", name, "GlobalAveragePool", node.input[:1], node.output[:1],
                  4, keepdims=True)

    def _op_AveragePool(self, node, name, attrs):
        self.check_rank(node, name, node.input[0], (4,))
        kernel = tuple(attrs.get("kernel_shape", ()))
        if attrs.get("ceil_mode", 0):
            raise self.error("AveragePool with ceil_mode=1", name)
        stride, pads = self.spatial_attrs(node, name, attrs, kernel)
        self.emit("avg_pool", name, "AveragePool", node.input[:1], node.output[:1], 4,
                  size=(int(kernel[0]), int(kernel[1])), stride=stride, pads=pads,
                  count_include_pad=bool(attrs.get("count_include_pad", 0)))

    def _op_Flatten(self, node, name, attrs):
        axis = int(attrs.get("axis", 1))
        rank = self.rank.get(node.input[0])
        if axis < 0:
            axis += rank or 0
        if axis != 1:
            raise self.error(f"Flatten with axis={attrs.get('axis')}; only axis 1 (keep the "
                             f"batch) is supported", name)
        self.emit("reshape", name, "Flatten", node.input[:1], node.output[:1], 2,
                  onnx_shape=(1, -1))

    def _op_Reshape(self, node, name, attrs):
        if self.opset < 5:
            shape = tuple(attrs["shape"])
        else:
            shape = tuple(int(s) for s in self.const(node.input[1], name, "Reshape shape"))
        if attrs.get("allowzero", 0) and 0 in shape:
            raise self.error("Reshape with allowzero=1 and a 0 in the shape", name)
        self.emit("reshape", name, "Reshape", node.input[:1], node.output[:1], len(shape),
                  onnx_shape=shape)

    def _op_Gemm(self, node, name, attrs):
        if attrs.get("transA", 0):
            raise self.error("Gemm with transA=1 (the input must be the left operand)", name)
        self.check_rank(node, name, node.input[0], (2,))
        w = self.const(node.input[1], name, "Gemm B").astype(np.float64)
        if w.ndim != 2:
            raise self.error(f"Gemm B of shape {w.shape}", name)
        w = (w.T if attrs.get("transB", 0) else w) * float(attrs.get("alpha", 1.0))
        inputs = [node.input[0], self.add_const(name + ":w", w)]
        if len(node.input) > 2 and node.input[2]:
            c = self.const(node.input[2], name, "Gemm C").astype(np.float64)
            if c.size not in (1, w.shape[1]) or (c.ndim == 2 and c.shape[0] != 1):
                raise self.error(f"Gemm C of shape {c.shape}; a per-output bias is supported",
                                 name)
            c = np.broadcast_to(c.reshape(-1), (w.shape[1],)) * float(attrs.get("beta", 1.0))
            inputs.append(self.add_const(name + ":b", c))
        self.emit("fully_connected", name, "Gemm", inputs, node.output[:1], 2, activation=None)

    def _op_MatMul(self, node, name, attrs):
        self.check_rank(node, name, node.input[0], (2,))
        w = self.const(node.input[1], name, "MatMul right operand")
        if w.ndim != 2:
            raise self.error(f"MatMul right operand of shape {w.shape}", name)
        self.emit("fully_connected", name, "MatMul", [node.input[0],
                  self.add_const(name + ":w", w)], node.output[:1], 2, activation=None)

    def _op_Softmax(self, node, name, attrs):
        rank = self.rank.get(node.input[0])
        axis = int(attrs.get("axis", 1 if self.opset < 13 else -1))
        if rank != 2 or axis not in (1, -1):
            raise self.error(f"Softmax over axis {axis} of a rank-{rank} tensor; the runtime "
                             f"supports the class axis of (N, classes)", name)
        self.emit("softmax", name, "Softmax", node.input[:1], node.output[:1], 2, beta=1.0)

    def _op_Pad(self, node, name, attrs):
        self.check_rank(node, name, node.input[0], (4,))
        mode = attrs.get("mode", b"constant")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        if mode != "constant":
            raise self.error(f"Pad mode {mode!r}; only constant padding is supported", name)
        if self.opset < 11:
            pads, value = tuple(attrs["pads"]), float(attrs.get("value", 0.0))
        else:
            pads = tuple(int(p) for p in self.const(node.input[1], name, "Pad pads"))
            value = 0.0
            if len(node.input) > 2 and node.input[2]:
                value = float(np.asarray(self.const(node.input[2], name, "Pad value")).reshape(()))
            if len(node.input) > 3 and node.input[3]:
                raise self.error("Pad with an axes input", name)
        if len(pads) != 8 or any(pads[i] for i in (0, 1, 4, 5)) or min(pads) < 0:
            raise self.error(f"Pad pads {pads}: only non-negative padding of H and W is "
                             f"supported", name)
        self.emit("pad", name, "Pad", node.input[:1], node.output[:1], 4,
                  pads=(pads[2], pads[6], pads[3], pads[7]), value=value)
