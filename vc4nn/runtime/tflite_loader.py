"""TFLite -> graph IR through the pure-Python ``tflite`` package (flatbuffer readers; it installs
on a 32-bit ARM Pi where the TensorFlow runtimes do not).

Quantized models (uint8/int8) load by dequantizing their weights to float32, (q - zero_point) *
scale per tensor or per channel; QUANTIZE/DEQUANTIZE of activations become identities and the
model then runs in float (the runtime has no integer kernels). fp16 weights are read through their
DEQUANTIZE op. Weight layouts: conv OHWI -> (KH, KW, Cin, Cout), depthwise 1HWC -> grouped conv
with one group per input channel, fully connected (Cout, Cin) -> (Cin, Cout).
"""

import numpy as np

from .errors import ModelFormatError, UnsupportedModelError
from .ir import Graph, GraphInput, Node
from .loader import read_bytes

SUPPORTED_OPS = ("CONV_2D", "DEPTHWISE_CONV_2D", "ADD", "AVERAGE_POOL_2D", "MEAN",
                 "FULLY_CONNECTED", "RESHAPE", "SQUEEZE", "PAD", "SOFTMAX", "DEQUANTIZE",
                 "QUANTIZE", "RELU", "RELU6")
# TensorType -> numpy dtype of the stored buffer.
DTYPES = {0: np.float32, 1: np.float16, 2: np.int32, 3: np.uint8, 4: np.int64, 9: np.int8,
          7: np.int16}
ACTIVATIONS = {0: None, 1: "relu", 3: "relu6"}
ACTIVATION_NAMES = {2: "RELU_N1_TO_1", 4: "TANH", 5: "SIGN_BIT"}


def _tflite():
    try:
        import tflite
    except ImportError:
        raise UnsupportedModelError("reading TFLite files needs the tflite package: "
                                    "pip install 'vc4nn[tflite]'") from None
    return tflite


def load_tflite(path):
    tflite = _tflite()
    data = read_bytes(path)
    if len(data) < 8 or data[4:8] != b"TFL3":
        raise ModelFormatError("not a TFLite file (no TFL3 identifier)", path)
    try:
        return _Converter(path, tflite, tflite.Model.GetRootAsModel(data, 0), len(data)).convert()
    except (ModelFormatError, UnsupportedModelError):
        raise
    except Exception as error:            # offsets past the end of a truncated flatbuffer
        raise ModelFormatError(f"the TFLite flatbuffer is corrupt or truncated "
                               f"({type(error).__name__}: {error})", path) from None


class _Converter:
    def __init__(self, path, tflite, model, size):
        self.path, self.tf, self.model, self.size = path, tflite, model, size
        self.ops = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
        self.constants, self.nodes = {}, []
        self.quantized_inputs = {}

    def error(self, message, node=None):
        return UnsupportedModelError(message, self.path, node)

    def convert(self):
        if self.model.SubgraphsLength() != 1:
            raise self.error(f"the model has {self.model.SubgraphsLength()} subgraphs; one is "
                             f"supported")
        self.graph = self.model.Subgraphs(0)
        g = self.graph
        self.names = [self.tensor_name(i) for i in range(g.TensorsLength())]
        for i in range(g.TensorsLength()):
            array = self.buffer(i)
            if array is not None:
                self.constants[self.names[i]] = array
        inputs = [self.graph_input(g.Inputs(j)) for j in range(g.InputsLength())]
        if len(inputs) != 1:
            raise self.error(f"the model has {len(inputs)} inputs; the runtime runs models with "
                             f"one image input")
        for index in range(g.OperatorsLength()):
            op = g.Operators(index)
            code = self.model.OperatorCodes(op.OpcodeIndex())
            builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
            op_name = self.ops.get(builtin, f"builtin {builtin}")
            outs = [self.names[op.Outputs(j)] for j in range(op.OutputsLength())]
            name = f"{op_name}_{index}:{outs[0] if outs else ''}"
            handler = getattr(self, "_op_" + op_name, None)
            if handler is None:
                raise self.error(f"unsupported operator {op_name} (supported: "
                                 f"{', '.join(SUPPORTED_OPS)}; `vc4nn ops` lists them)", name)
            ins = [None if op.Inputs(j) < 0 else self.names[op.Inputs(j)]
                   for j in range(op.InputsLength())]
            handler(op, name, op_name, ins, outs)
        outputs = [self.names[g.Outputs(j)] for j in range(g.OutputsLength())]
        shapes = {n: tuple(self.tensor(g.Outputs(j)).ShapeAsNumpy()) for j, n in
                  enumerate(outputs)}
        graph = Graph(self.path, "tflite", inputs, outputs, self.nodes, self.constants,
                      output_shapes=shapes)
        graph.input_quantization = self.quantized_inputs
        return graph

    # -- tensors -----------------------------------------------------------------------------
    def tensor(self, index):
        return self.graph.Tensors(index)

    def tensor_name(self, index):
        name = self.tensor(index).Name()
        return name.decode("utf-8", "replace") if name else f"tensor{index}"

    def quantization(self, tensor):
        q = tensor.Quantization()
        if q is None or q.ScaleLength() == 0:
            return None
        zero = q.ZeroPointAsNumpy() if q.ZeroPointLength() else np.zeros(1, np.int64)
        return q.ScaleAsNumpy().astype(np.float64), zero.astype(np.float64), q.QuantizedDimension()

    def buffer(self, index):
        """The constant held by tensor ``index`` as float32 (dequantized; float16 stays
        float16), or None."""
        t = self.tensor(index)
        b = self.model.Buffers(t.Buffer())
        if b is None:
            return None
        if b.DataLength() == 0:
            if b.Offset() > 1 and b.Size() > 0:
                raise self.error(f"tensor {self.names[index]!r} keeps its data outside the "
                                 f"flatbuffer (models over 2 GB); not supported")
            return None
        dtype = DTYPES.get(t.Type())
        if dtype is None:
            raise self.error(f"tensor {self.names[index]!r} has TFLite type {t.Type()}")
        raw = b.DataAsNumpy().tobytes()
        shape = tuple(int(d) for d in t.ShapeAsNumpy()) if t.ShapeLength() else ()
        count = int(np.prod(shape, dtype=np.int64))
        if len(raw) != count * np.dtype(dtype).itemsize:
            raise ModelFormatError(f"tensor {self.names[index]!r} of shape {shape} holds "
                                   f"{len(raw)} bytes", self.path)
        array = np.frombuffer(raw, dtype).reshape(shape)
        if dtype in (np.int32, np.int64) and self.quantization(t) is None:
            return array.copy()                                 # shapes, axes, paddings
        q = self.quantization(t)
        if q is not None and dtype not in (np.float32, np.float16):
            scale, zero, axis = q
            if scale.size > 1:
                bshape = [1] * array.ndim
                bshape[axis] = scale.size
                scale, zero = scale.reshape(bshape), zero.reshape(bshape)
            return ((array.astype(np.float64) - zero) * scale).astype(np.float32)
        if dtype == np.float16:
            return array.copy()         # fp16 weights as they come (runtime/precision.py)
        return array.astype(np.float32)

    def graph_input(self, index):
        t = self.tensor(index)
        shape = tuple(int(d) for d in t.ShapeAsNumpy())
        name = self.names[index]
        if len(shape) != 4 or shape[0] != 1 or min(shape) < 1:
            raise self.error(f"input {name!r} has shape {shape}; the runtime takes one NHWC "
                             f"image (batch 1)")
        dtype = DTYPES.get(t.Type())
        if dtype not in (np.float32, np.uint8, np.int8):
            raise self.error(f"input {name!r} has TFLite type {t.Type()}")
        q = self.quantization(t)
        if dtype != np.float32:
            if q is None:
                raise self.error(f"input {name!r} is {np.dtype(dtype)} without quantization "
                                 f"parameters")
            self.quantized_inputs[name] = (float(q[0][0]), float(q[1][0]))
        return GraphInput(name, shape, np.dtype(dtype).name, "NHWC")

    def options(self, op, cls_name):
        table = op.BuiltinOptions()
        if table is None:
            return None
        opts = getattr(self.tf, cls_name)()
        opts.Init(table.Bytes, table.Pos)
        return opts

    def activation(self, opts, name):
        code = opts.FusedActivationFunction() if opts is not None else 0
        if code not in ACTIVATIONS:
            raise self.error(f"fused activation {ACTIVATION_NAMES.get(code, code)}; NONE, RELU "
                             f"and RELU6 are supported", name)
        return ACTIVATIONS[code]

    def const(self, tensor_name, name, what):
        if tensor_name not in self.constants:
            raise self.error(f"{what} ({tensor_name!r}) must be a constant tensor", name)
        return self.constants[tensor_name]

    def emit(self, op, name, source, inputs, outputs, **attrs):
        self.nodes.append(Node(op, name, list(inputs), list(outputs[:1]), attrs, source))

    def padding(self, opts):
        return "same" if opts.Padding() == self.tf.Padding.SAME else "valid"

    # -- operators ---------------------------------------------------------------------------
    def _conv(self, op, name, source, ins, outs, opts, w, group):
        inputs = [ins[0], name + ":w"]
        self.constants[name + ":w"] = np.ascontiguousarray(w)
        if len(ins) > 2 and ins[2] is not None:
            inputs.append(ins[2])
            self.const(ins[2], name, f"{source} bias")
        self.emit("conv", name, source, inputs, outs, stride=(opts.StrideH(), opts.StrideW()),
                  pads=self.padding(opts), group=group,
                  dilation=(opts.DilationHFactor(), opts.DilationWFactor()),
                  activation=self.activation(opts, name))

    def _op_CONV_2D(self, op, name, source, ins, outs):
        w = self.const(ins[1], name, "CONV_2D filter")          # (Cout, KH, KW, Cin)
        opts = self.options(op, "Conv2DOptions")
        self._conv(op, name, source, ins, outs, opts, w.transpose(1, 2, 3, 0), 1)

    def _op_DEPTHWISE_CONV_2D(self, op, name, source, ins, outs):
        w = self.const(ins[1], name, "DEPTHWISE_CONV_2D filter")  # (1, KH, KW, Cin * mult)
        opts = self.options(op, "DepthwiseConv2DOptions")
        cin = int(self.tensor_shape(op.Inputs(0))[-1])
        multiplier = w.shape[3] // max(cin, 1)
        if opts.DepthMultiplier() not in (0, multiplier):
            raise self.error(f"depth_multiplier {opts.DepthMultiplier()} disagrees with the "
                             f"filter {w.shape} and {cin} input channels", name)
        self._conv(op, name, source, ins, outs, opts, w.reshape(w.shape[1], w.shape[2], 1, -1),
                   cin)

    def tensor_shape(self, index):
        return tuple(self.tensor(index).ShapeAsNumpy())

    def _op_ADD(self, op, name, source, ins, outs):
        opts = self.options(op, "AddOptions")
        a, b = ins
        if a in self.constants:
            a, b = b, a
        act = self.activation(opts, name)
        if b in self.constants:
            if act is not None:
                raise self.error("ADD of a constant with a fused activation", name)
            self.emit("bias_add", name, source, [a, b], outs)
        else:
            self.emit("add", name, source, [a, b], outs, activation=act)

    def _op_AVERAGE_POOL_2D(self, op, name, source, ins, outs):
        opts = self.options(op, "Pool2DOptions")
        if self.activation(opts, name) is not None:
            raise self.error("AVERAGE_POOL_2D with a fused activation", name)
        self.emit("avg_pool", name, source, ins[:1], outs,
                  size=(opts.FilterHeight(), opts.FilterWidth()),
                  stride=(opts.StrideH(), opts.StrideW()), pads=self.padding(opts),
                  count_include_pad=False)

    def _op_MEAN(self, op, name, source, ins, outs):
        axes = sorted(int(a) % 4 for a in np.asarray(self.const(ins[1], name, "MEAN axes"))
                      .reshape(-1))
        if axes != [1, 2]:
            raise self.error(f"MEAN over axes {axes}; the mean over H and W (1, 2) is supported",
                             name)
        opts = self.options(op, "ReducerOptions")
        self.emit("global_avg_pool", name, source, ins[:1], outs,
                  keepdims=bool(opts and opts.KeepDims()))

    def _op_FULLY_CONNECTED(self, op, name, source, ins, outs):
        opts = self.options(op, "FullyConnectedOptions")
        if opts is not None and opts.WeightsFormat() != 0:
            raise self.error("FULLY_CONNECTED with shuffled weights", name)
        w = self.const(ins[1], name, "FULLY_CONNECTED weights")  # (Cout, Cin)
        self.constants[name + ":w"] = np.ascontiguousarray(w.T)
        inputs = [ins[0], name + ":w"]
        if len(ins) > 2 and ins[2] is not None:
            inputs.append(ins[2])
            self.const(ins[2], name, "FULLY_CONNECTED bias")
        self.emit("fully_connected", name, source, inputs, outs,
                  activation=self.activation(opts, name))

    def _reshape_to(self, name, source, ins, outs, shape):
        shape = [int(d) for d in shape]
        if not shape or shape[0] not in (1, -1):
            raise self.error(f"{source} to {tuple(shape)}: the batch axis must stay 1", name)
        self.emit("reshape", name, source, ins[:1], outs, shape=tuple(shape[1:]) or (1,))

    def _op_RESHAPE(self, op, name, source, ins, outs):
        if len(ins) > 1 and ins[1] is not None and ins[1] in self.constants:
            shape = self.constants[ins[1]].reshape(-1)
        else:
            opts = self.options(op, "ReshapeOptions")
            if opts is None or opts.NewShapeLength() == 0:
                shape = self.tensor_shape(op.Outputs(0))
            else:
                shape = opts.NewShapeAsNumpy()
        self._reshape_to(name, source, ins, outs, shape)

    def _op_SQUEEZE(self, op, name, source, ins, outs):
        self._reshape_to(name, source, ins, outs, self.tensor_shape(op.Outputs(0)))

    def _op_PAD(self, op, name, source, ins, outs):
        p = np.asarray(self.const(ins[1], name, "PAD paddings")).reshape(-1, 2)
        if p.shape != (4, 2) or p[0].any() or p[3].any() or (p < 0).any():
            raise self.error(f"PAD paddings {p.tolist()}: only non-negative padding of H and W "
                             f"is supported", name)
        self.emit("pad", name, source, ins[:1], outs,
                  pads=(int(p[1, 0]), int(p[1, 1]), int(p[2, 0]), int(p[2, 1])), value=0.0)

    def _op_SOFTMAX(self, op, name, source, ins, outs):
        opts = self.options(op, "SoftmaxOptions")
        self.emit("softmax", name, source, ins[:1], outs, beta=float(opts.Beta()) if opts else 1.0)

    def _op_DEQUANTIZE(self, op, name, source, ins, outs):
        if ins[0] in self.constants:            # fp16 / int8 weights: a float constant
            self.constants[outs[0]] = self.constants[ins[0]]
        else:
            self.emit("identity", name, source, ins[:1], outs)

    _op_QUANTIZE = _op_DEQUANTIZE

    def _op_RELU(self, op, name, source, ins, outs):
        self.emit("activation", name, source, ins[:1], outs, low=0.0, high=float("inf"))

    def _op_RELU6(self, op, name, source, ins, outs):
        self.emit("activation", name, source, ins[:1], outs, low=0.0, high=6.0)
