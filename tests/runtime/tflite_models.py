"""MobileNet-style TFLite models with random weights, written with the ``tflite`` package's
flatbuffer builders, each with an independent float64 numpy reference of TensorFlow's semantics
(SAME padding, fused activations, depth multipliers, fp16 and int8 weights dequantized).

A ``TFLiteBuilder`` adds an operator to the file and computes its reference value at once.
"""

import importlib

import flatbuffers
import numpy as np
import tflite

FLOAT32, FLOAT16, INT32, UINT8, INT8 = 0, 1, 2, 3, 9
ACT_CODES = {None: 0, "relu": 1, "relu6": 3, "tanh": 4}
ACT = {None: lambda y: y, "relu": lambda y: np.maximum(y, 0),
       "relu6": lambda y: np.clip(y, 0, 6)}


def same_pads(n, k, s):
    out = -(-n // s)
    total = max((out - 1) * s + k - n, 0)
    return total // 2, total - total // 2


def conv_ref(x, w, b, stride, padding, group=1):
    """x (H, W, Cin), w (KH, KW, Cin/group, Cout): TensorFlow's conv, a plain loop of taps."""
    kh, kw, cg, cout = w.shape
    if padding == "SAME":
        (t, bt), (l, r) = same_pads(x.shape[0], kh, stride), same_pads(x.shape[1], kw, stride)
    else:
        t = bt = l = r = 0
    xp = np.pad(x, ((t, bt), (l, r), (0, 0)))
    oh = (xp.shape[0] - kh) // stride + 1
    ow = (xp.shape[1] - kw) // stride + 1
    y = np.zeros((oh, ow, cout)) + b
    per_group = cout // group
    for o in range(cout):
        g = o // per_group
        for i in range(kh):
            for j in range(kw):
                patch = xp[i:i + stride * oh:stride, j:j + stride * ow:stride, g * cg:(g + 1) * cg]
                y[:, :, o] += patch @ w[i, j, :, o]
    return y


class TFLiteBuilder:
    def __init__(self, x, seed=0, weights="float32", input_quant=None):
        """x: the test input, float32, or uint8 with ``input_quant`` = (scale, zero point)."""
        self.rng = np.random.default_rng(seed)
        self.weights = weights                   # "float32", "float16" or "int8"
        self.buffers = [b""]                     # buffer 0 is the empty buffer, by convention
        self.tensors, self.operators, self.opcodes = [], [], []
        self.ref = {}
        if input_quant is None:
            self.input = self.tensor("input", x.shape, FLOAT32)
            self.ref[self.input] = x[0].astype(np.float64)
        else:
            scale, zero = input_quant
            self.input = self.tensor("input", x.shape, UINT8, quant=(
                np.array([scale], np.float32), np.array([zero], np.int64), 0))
            self.ref[self.input] = (x[0].astype(np.float64) - zero) * np.float32(scale)

    # -- tensors and operators ---------------------------------------------------------------
    def tensor(self, name, shape, ttype, data=None, quant=None):
        buffer = 0
        if data is not None:
            self.buffers.append(np.ascontiguousarray(data).tobytes())
            buffer = len(self.buffers) - 1
        self.tensors.append((f"{name}{len(self.tensors)}", tuple(int(d) for d in shape), ttype,
                             buffer, quant))
        return len(self.tensors) - 1

    def weight(self, name, w):
        """A weight tensor in the builder's storage type; returns (tensor index, float64 value
        the file really holds)."""
        if self.weights == "float16":
            half = w.astype(np.float16)
            stored = self.tensor(name + "_fp16", w.shape, FLOAT16, half)
            out = self.tensor(name, w.shape, FLOAT32)
            self.op("DEQUANTIZE", [stored], [out])
            return out, half.astype(np.float64)
        if self.weights == "int8" and w.ndim == 4:
            axis = 0 if name != "dw" else 3            # per output channel
            reduce_axes = tuple(a for a in range(4) if a != axis)
            scale = np.maximum(np.abs(w).max(axis=reduce_axes), 1e-6) / 127.0
            bshape = [1] * 4
            bshape[axis] = scale.size
            q = np.clip(np.round(w / scale.reshape(bshape)), -127, 127).astype(np.int8)
            t = self.tensor(name, w.shape, INT8, q,
                            quant=(scale.astype(np.float32), np.zeros(scale.size, np.int64), axis))
            return t, q.astype(np.float64) * scale.reshape(bshape)
        w = w.astype(np.float32)
        return self.tensor(name, w.shape, FLOAT32, w), w.astype(np.float64)

    def bias(self, n):
        b = (self.rng.standard_normal(n) * 0.1).astype(np.float32)
        return self.tensor("bias", (n,), FLOAT32, b), b.astype(np.float64)

    def op(self, name, inputs, outputs, options=None, **fields):
        code = getattr(tflite.BuiltinOperator, name)
        if code not in self.opcodes:
            self.opcodes.append(code)
        self.operators.append((self.opcodes.index(code), inputs, outputs, options, fields))

    def out(self, name, value):
        t = self.tensor(name, (1,) + value.shape, FLOAT32)
        self.ref[t] = value
        return t

    # -- layers ------------------------------------------------------------------------------
    def conv(self, x, cout, k=3, stride=1, padding="SAME", act="relu6"):
        cin = self.ref[x].shape[2]
        w = self.rng.standard_normal((cout, k, k, cin)) * np.sqrt(2.0 / (k * k * cin))
        wt, wv = self.weight("conv", w)
        bt, bv = self.bias(cout)
        y = ACT[act](conv_ref(self.ref[x], wv.transpose(1, 2, 3, 0), bv, stride, padding))
        t = self.out("conv_out", y)
        self.op("CONV_2D", [x, wt, bt], [t], "Conv2DOptions", Padding=_pad(padding),
                StrideW=stride, StrideH=stride, FusedActivationFunction=ACT_CODES[act],
                DilationWFactor=1, DilationHFactor=1)
        return t

    def depthwise(self, x, k=3, stride=1, padding="SAME", act="relu6", multiplier=1):
        cin = self.ref[x].shape[2]
        w = self.rng.standard_normal((1, k, k, cin * multiplier)) * np.sqrt(2.0 / (k * k))
        wt, wv = self.weight("dw", w)
        bt, bv = self.bias(cin * multiplier)
        y = ACT[act](conv_ref(self.ref[x], wv.reshape(k, k, 1, -1), bv, stride, padding,
                              group=cin))
        t = self.out("dw_out", y)
        self.op("DEPTHWISE_CONV_2D", [x, wt, bt], [t], "DepthwiseConv2DOptions",
                Padding=_pad(padding), StrideW=stride, StrideH=stride,
                DepthMultiplier=multiplier, FusedActivationFunction=ACT_CODES[act],
                DilationWFactor=1, DilationHFactor=1)
        return t

    def add(self, a, b, act=None):
        t = self.out("add_out", ACT[act](self.ref[a] + self.ref[b]))
        self.op("ADD", [a, b], [t], "AddOptions", FusedActivationFunction=ACT_CODES[act])
        return t

    def pad(self, x, pads):
        t_, b_, l_, r_ = pads
        y = np.pad(self.ref[x], ((t_, b_), (l_, r_), (0, 0)))
        p = self.tensor("paddings", (4, 2), INT32,
                        np.array([[0, 0], [t_, b_], [l_, r_], [0, 0]], np.int32))
        t = self.out("pad_out", y)
        self.op("PAD", [x, p], [t], "PadOptions")
        return t

    def avg_pool(self, x, size, stride, padding="VALID"):
        v = self.ref[x]
        h, w = v.shape[:2]
        if padding == "SAME":
            (t_, b_), (l_, r_) = same_pads(h, size, stride), same_pads(w, size, stride)
        else:
            t_ = b_ = l_ = r_ = 0
        vp = np.pad(v, ((t_, b_), (l_, r_), (0, 0)))
        ones = np.pad(np.ones((h, w)), ((t_, b_), (l_, r_)))
        oh, ow = (vp.shape[0] - size) // stride + 1, (vp.shape[1] - size) // stride + 1
        y = np.zeros((oh, ow, v.shape[2]))
        for i in range(oh):
            for j in range(ow):
                win = (slice(i * stride, i * stride + size), slice(j * stride, j * stride + size))
                y[i, j] = vp[win].sum(axis=(0, 1)) / ones[win].sum()
        t = self.out("pool_out", y)
        self.op("AVERAGE_POOL_2D", [x], [t], "Pool2DOptions", Padding=_pad(padding),
                StrideW=stride, StrideH=stride, FilterWidth=size, FilterHeight=size,
                FusedActivationFunction=0)
        return t

    def mean(self, x, keepdims=True):
        v = self.ref[x].mean(axis=(0, 1))
        axes = self.tensor("axes", (2,), INT32, np.array([1, 2], np.int32))
        t = self.out("mean_out", v.reshape(1, 1, -1) if keepdims else v)
        self.op("MEAN", [x, axes], [t], "ReducerOptions", KeepDims=keepdims)
        return t

    def reshape(self, x, shape):
        t = self.out("reshape_out", self.ref[x].reshape(shape[1:]))
        s = self.tensor("shape", (len(shape),), INT32, np.array(shape, np.int32))
        self.op("RESHAPE", [x, s], [t])
        return t

    def squeeze(self, x, dims):
        v = self.ref[x].reshape((1,) + self.ref[x].shape)
        t = self.out("squeeze_out", v.squeeze(tuple(dims))[0])
        self.op("SQUEEZE", [x], [t], "SqueezeOptions", _vector=("SqueezeDims", list(dims)))
        return t

    def fully_connected(self, x, cout, act=None):
        cin = self.ref[x].size
        w = self.rng.standard_normal((cout, cin)) / np.sqrt(cin)
        wt, wv = self.weight("fc", w)
        bt, bv = self.bias(cout)
        t = self.out("fc_out", ACT[act](wv @ self.ref[x].reshape(-1) + bv))
        self.op("FULLY_CONNECTED", [x, wt, bt], [t], "FullyConnectedOptions",
                FusedActivationFunction=ACT_CODES[act])
        return t

    def softmax(self, x):
        v = self.ref[x]
        e = np.exp(v - v.max())
        t = self.out("softmax_out", e / e.sum())
        self.op("SOFTMAX", [x], [t], "SoftmaxOptions", Beta=1.0)
        return t

    # -- serialization -----------------------------------------------------------------------
    def serialize(self, output):
        b = flatbuffers.Builder(1024)
        buffers = []
        for data in self.buffers:
            vec = b.CreateNumpyVector(np.frombuffer(data, np.uint8)) if data else None
            tflite.BufferStart(b)
            if vec is not None:
                tflite.BufferAddData(b, vec)
            buffers.append(tflite.BufferEnd(b))
        tensors = []
        for name, shape, ttype, buffer, quant in self.tensors:
            name_off = b.CreateString(name)
            shape_off = b.CreateNumpyVector(np.array(shape, np.int32))
            q_off = None
            if quant is not None:
                scale, zero, axis = quant
                s_off, z_off = b.CreateNumpyVector(scale), b.CreateNumpyVector(zero)
                QP = tflite
                QP.QuantizationParametersStart(b)
                QP.QuantizationParametersAddScale(b, s_off)
                QP.QuantizationParametersAddZeroPoint(b, z_off)
                QP.QuantizationParametersAddQuantizedDimension(b, axis)
                q_off = QP.QuantizationParametersEnd(b)
            tflite.TensorStart(b)
            tflite.TensorAddName(b, name_off)
            tflite.TensorAddShape(b, shape_off)
            tflite.TensorAddType(b, ttype)
            tflite.TensorAddBuffer(b, buffer)
            if q_off is not None:
                tflite.TensorAddQuantization(b, q_off)
            tensors.append(tflite.TensorEnd(b))
        operators = []
        for opcode, inputs, outputs, options, fields in self.operators:
            in_off = b.CreateNumpyVector(np.array(inputs, np.int32))
            out_off = b.CreateNumpyVector(np.array(outputs, np.int32))
            opt_off = _options(b, options, fields) if options else None
            tflite.OperatorStart(b)
            tflite.OperatorAddOpcodeIndex(b, opcode)
            tflite.OperatorAddInputs(b, in_off)
            tflite.OperatorAddOutputs(b, out_off)
            if opt_off is not None:
                tflite.OperatorAddBuiltinOptionsType(
                    b, getattr(tflite.BuiltinOptions, options))
                tflite.OperatorAddBuiltinOptions(b, opt_off)
            operators.append(tflite.OperatorEnd(b))
        codes = []
        for code in self.opcodes:
            OC = tflite
            OC.OperatorCodeStart(b)
            OC.OperatorCodeAddDeprecatedBuiltinCode(b, min(code, 127))
            OC.OperatorCodeAddBuiltinCode(b, code)
            OC.OperatorCodeAddVersion(b, 1)
            codes.append(OC.OperatorCodeEnd(b))
        SG = tflite
        t_vec, o_vec = _table_vector(b, tensors), _table_vector(b, operators)
        i_vec = b.CreateNumpyVector(np.array([self.input], np.int32))
        out_vec = b.CreateNumpyVector(np.array([output], np.int32))
        SG.SubGraphStart(b)
        SG.SubGraphAddTensors(b, t_vec)
        SG.SubGraphAddOperators(b, o_vec)
        SG.SubGraphAddInputs(b, i_vec)
        SG.SubGraphAddOutputs(b, out_vec)
        subgraph = SG.SubGraphEnd(b)
        M = tflite
        c_vec, s_vec, b_vec = (_table_vector(b, codes), _table_vector(b, [subgraph]),
                               _table_vector(b, buffers))
        M.ModelStart(b)
        M.ModelAddVersion(b, 3)
        M.ModelAddOperatorCodes(b, c_vec)
        M.ModelAddSubgraphs(b, s_vec)
        M.ModelAddBuffers(b, b_vec)
        b.Finish(M.ModelEnd(b), file_identifier=b"TFL3")
        return bytes(b.Output()), self.ref[output]


def _pad(padding):
    return tflite.Padding.SAME if padding == "SAME" else tflite.Padding.VALID


def _table_vector(b, offsets):
    b.StartVector(4, len(offsets), 4)
    for off in reversed(offsets):
        b.PrependUOffsetTRelative(off)
    return b.EndVector()


def _options(b, cls, fields):
    module = importlib.import_module(f"tflite.{cls}")
    vector = fields.pop("_vector", None)
    vec_off = b.CreateNumpyVector(np.array(vector[1], np.int32)) if vector else None
    getattr(module, f"{cls}Start")(b)
    if vector:
        getattr(module, f"{cls}Add{vector[0]}")(b, vec_off)
    for field, value in fields.items():
        getattr(module, f"{cls}Add{field}")(b, value)
    return getattr(module, f"{cls}End")(b)


def mobilenet_v1(size=32, width=0.25, classes=10, seed=0, weights="float32", head="mean"):
    x = np.random.default_rng(seed + 100).uniform(-1, 1, (1, size, size, 3)).astype(np.float32)
    b = TFLiteBuilder(x, seed, weights)
    c = lambda n: max(int(n * width), 8)
    y = b.conv(b.input, c(32), stride=2)
    for stride, cout in ((1, 64), (2, 128), (1, 128), (2, 256), (1, 256), (2, 512), (1, 512),
                         (2, 1024), (1, 1024)):
        y = b.depthwise(y, stride=stride)
        y = b.conv(y, c(cout), k=1)
    if head == "mean":
        y = b.fully_connected(b.mean(y, keepdims=False), classes)
    else:               # TF-slim's: avg pool, 1x1 conv, squeeze
        hw = b.ref[y].shape[0]
        y = b.squeeze(b.conv(b.avg_pool(y, hw, 1), classes, k=1, act=None), (1, 2))
    data, ref = b.serialize(b.softmax(y))
    return data, x, ref


def mobilenet_v2(size=32, width=0.35, classes=10, seed=0, weights="float32"):
    x = np.random.default_rng(seed + 100).uniform(-1, 1, (1, size, size, 3)).astype(np.float32)
    b = TFLiteBuilder(x, seed, weights)
    div = lambda v: max(8, int(v + 4) // 8 * 8)
    cin = div(32 * width)
    y = b.conv(b.pad(b.input, (0, 1, 0, 1)), cin, stride=2, padding="VALID")
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 2, 2), (6, 64, 2, 2)):
        cout = div(c * width)
        for i in range(n):
            stride = s if i == 0 else 1
            h = b.conv(y, cin * t, k=1) if t != 1 else y
            h = b.depthwise(h, stride=stride)
            h = b.conv(h, cout, k=1, act=None)
            y = b.add(y, h) if stride == 1 and cin == cout else h
            cin = cout
    y = b.conv(y, 64, k=1)
    y = b.reshape(b.mean(y, keepdims=True), (1, 64))
    data, ref = b.serialize(b.fully_connected(y, classes))
    return data, x, ref
