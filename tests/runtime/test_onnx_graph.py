"""ONNX loader and passes at the graph level: the optimized IR, evaluated by an independent float64
numpy reference, matches onnxruntime on the original file."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from vc4nn.runtime.errors import ModelFormatError, UnsupportedModelError
from vc4nn.runtime.loader import load_graph
from vc4nn.runtime import random_mobilenets as onnx_models

from .conftest import rel_error
from .reference import evaluate


def run_ort(model, x):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def save(model, tmp_path, name="m.onnx"):
    path = tmp_path / name
    onnx.save(model, str(path))
    return str(path)


def check(model, tmp_path, size):
    x = np.random.default_rng(1).standard_normal((1, 3, size, size)).astype(np.float32)
    expected = run_ort(model, x)[0]
    graph = load_graph(save(model, tmp_path))
    got = evaluate(graph, x[0].transpose(1, 2, 0))[0].reshape(-1)
    error = rel_error(got, expected)
    assert error <= 1e-4, error
    assert np.argmax(got) == np.argmax(expected)
    return graph


@pytest.mark.parametrize("opset", [9, 13])
@pytest.mark.parametrize("width,size", [(0.25, 32), (0.5, 40)])
def test_mobilenet_v1(tmp_path, opset, width, size):
    graph = check(onnx_models.mobilenet_v1(size, width, opset=opset), tmp_path, size)
    ops = [n.op for n in graph.nodes]
    assert ops.count("depthwise") == 13 and ops.count("pointwise") == 13
    assert ops.count("conv2d") == 1 and "batch_norm" not in ops and "activation" not in ops


@pytest.mark.parametrize("head", [dict(), dict(flatten=False, gemm=False, softmax=True)])
def test_mobilenet_v2(tmp_path, head):
    graph = check(onnx_models.mobilenet_v2(32, 0.35, **head), tmp_path, 32)
    ops = [n.op for n in graph.nodes]
    assert "add" not in ops                  # every residual went into a pointwise layer
    assert sum(len(n.inputs) == 4 for n in graph.nodes if n.op == "pointwise") == 5


def test_unsupported_op_names_node_and_file(tmp_path):
    model = onnx_models.mobilenet_v1(32, 0.25)
    model.graph.node[3].op_type = "Sigmoid"
    path = save(model, tmp_path, "bad.onnx")
    with pytest.raises(UnsupportedModelError, match=r"Sigmoid.*node 'Relu6?\w*'.*bad.onnx|Sigmoid"
                       ) as info:
        load_graph(path)
    assert model.graph.node[3].name in str(info.value) and "bad.onnx" in str(info.value)


def test_truncated_and_wrong_magic(tmp_path):
    data = onnx_models.mobilenet_v1(32, 0.25).SerializeToString()
    path = tmp_path / "t.onnx"
    path.write_bytes(data[: len(data) // 3])
    with pytest.raises(ModelFormatError, match="t.onnx"):
        load_graph(str(path))
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 100)
    with pytest.raises(ModelFormatError, match="t.onnx"):
        load_graph(str(path))


def test_flatten_of_a_map_folds_its_order_into_the_gemm(tmp_path):
    """AveragePool to 2x2, then Flatten (NCHW order) and Gemm: the runtime permutes the Gemm's
    rows so its NHWC vector gives onnxruntime's result."""
    b = onnx_models.OnnxBuilder(seed=2)
    y = b.conv_bn("input", 3, 8, stride=2)                           # 8 x 8 x 8
    y = b.node("AveragePool", [y], kernel_shape=[4, 4], strides=[4, 4])   # 8 x 2 x 2
    y = b.node("Flatten", [y], axis=1)
    w = np.random.default_rng(0).standard_normal((5, 32)).astype(np.float32)
    y = b.node("Gemm", [y, b.const(w), b.const(np.zeros(5, np.float32))], transB=1)
    check(b.model("input", 16, y), tmp_path, 16)


def test_flatten_of_a_map_read_by_softmax_is_refused(tmp_path):
    b = onnx_models.OnnxBuilder(seed=2)
    y = b.conv_bn("input", 3, 8, stride=2)
    y = b.node("Softmax", [b.node("Flatten", [y], axis=1)], axis=1)
    with pytest.raises(UnsupportedModelError, match="8x8x8 map read by something other"):
        load_graph(save(b.model("input", 16, y), tmp_path))


@pytest.mark.parametrize("opset", [9, 13])
def test_exporter_variants(tmp_path, opset):
    """What older and other exporters write: Pad nodes before a Conv (attribute form before opset
    11, inputs after), auto_pad SAME_UPPER, Constant nodes, Identity, initializers also listed as
    graph inputs, Reshape with 0 in its shape, AveragePool head, MatMul + Add, Relu then Clip."""
    from onnx import TensorProto, helper
    b = onnx_models.OnnxBuilder(seed=3, opset=opset, bn=False)
    if opset < 11:
        y = b.node("Pad", ["input"], pads=[0, 0, 1, 1, 0, 0, 1, 1], mode="constant")
    else:
        y = b.node("Pad", ["input", b.const(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))])
    y = b.conv_bn(y, 3, 8, stride=2, pads=0, act="relu")
    y = b.relu6(y)                                            # Relu then Clip(0, 6): relu6
    w = (np.random.default_rng(1).standard_normal((8, 1, 3, 3)) * 0.5).astype(np.float32)
    y = b.node("Conv", [y, b.const(w)], kernel_shape=[3, 3], group=8, auto_pad="SAME_UPPER",
               strides=[2, 2])
    y = b.node("Identity", [y])
    y = b.node("AveragePool", [y], kernel_shape=[4, 4], strides=[4, 4])
    shape = b.name("shape")
    b.nodes.append(helper.make_node("Constant", [], [shape], value=helper.make_tensor(
        "s", TensorProto.INT64, [2], [0, -1])))
    y = b.node("Reshape", [y, shape])
    wm = np.random.default_rng(2).standard_normal((8, 4)).astype(np.float32)
    y = b.node("MatMul", [y, b.const(wm)])
    y = b.node("Add", [b.const(np.arange(4, dtype=np.float32)), y])
    model = b.model("input", 16, y)
    if opset < 11:              # old exporters list every initializer as a graph input too
        model.graph.input.extend(helper.make_tensor_value_info(
            i.name, i.data_type, list(i.dims)) for i in model.graph.initializer)
    graph = check(model, tmp_path, 16)
    assert [n.op for n in graph.nodes] == ["conv2d", "depthwise", "avg_pool", "reshape",
                                           "fully_connected"]
    assert graph.nodes[0].attrs["activation"] == "relu6"
    assert graph.nodes[0].attrs["pads"] == (1, 1, 1, 1)
