"""TFLite loader and passes at the graph level against an independent float64 reference of
TensorFlow's semantics (the builder's), for float32, fp16 and int8 weights."""

import numpy as np
import pytest

from vc4nn.runtime.errors import ModelFormatError, UnsupportedModelError
from vc4nn.runtime.loader import load_graph

from . import tflite_models
from .conftest import rel_error
from .reference import evaluate


def load(data, tmp_path, name="m.tflite"):
    path = tmp_path / name
    path.write_bytes(data)
    return load_graph(str(path))


def check(data, x, ref, tmp_path):
    graph = load(data, tmp_path)
    got = evaluate(graph, x[0])[0].reshape(-1)
    ref = ref.reshape(-1)
    assert rel_error(got, ref) <= 1e-5
    assert np.argmax(got) == np.argmax(ref)
    return graph


@pytest.mark.parametrize("weights", ["float32", "float16", "int8"])
@pytest.mark.parametrize("head", ["mean", "pool"])
def test_mobilenet_v1(tmp_path, weights, head):
    graph = check(*tflite_models.mobilenet_v1(32, 0.25, weights=weights, head=head), tmp_path)
    ops = [n.op for n in graph.nodes]
    assert ops.count("depthwise") == 9 and "activation" not in ops


def test_mobilenet_v2(tmp_path):
    graph = check(*tflite_models.mobilenet_v2(32, 0.35), tmp_path)
    ops = [n.op for n in graph.nodes]
    assert "add" not in ops and "pad" not in ops
    assert graph.nodes[0].attrs["pads"] == (0, 1, 0, 1)      # PAD folded into the stem


def test_depth_multiplier_rejected_with_node(tmp_path):
    x = np.zeros((1, 8, 8, 4), np.float32)
    b = tflite_models.TFLiteBuilder(x)
    data, _ = b.serialize(b.depthwise(b.input, multiplier=2))
    with pytest.raises(UnsupportedModelError, match=r"grouped convolution.*DEPTHWISE_CONV_2D_0"):
        load(data, tmp_path)


def test_tanh_activation_rejected(tmp_path):
    x = np.zeros((1, 8, 8, 4), np.float32)
    b = tflite_models.TFLiteBuilder(x)
    t = b.conv(b.input, 8, act=None)
    b.operators[-1][4]["FusedActivationFunction"] = tflite_models.ACT_CODES["tanh"]
    data, _ = b.serialize(t)
    with pytest.raises(UnsupportedModelError, match="TANH.*CONV_2D_0.*m.tflite"):
        load(data, tmp_path)


def test_truncated_and_wrong_magic(tmp_path):
    data, _, _ = tflite_models.mobilenet_v1(32, 0.25)
    with pytest.raises(ModelFormatError, match="t.tflite"):
        load(data[: len(data) // 2], tmp_path, "t.tflite")
    with pytest.raises(ModelFormatError, match="TFL3"):
        load(b"ABCDWXYZ" + data[8:], tmp_path, "t.tflite")
