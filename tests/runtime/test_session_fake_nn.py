"""The session's planner and executor with a numpy stand-in for the kernels (``fake_nn``): the
liveness-planned arena, the bound layer calls, the folded camera-frame stem and the errors. The
same checks run on the QPU kernels in ``test_session_device.py``."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import vc4nn
from vc4nn.runtime import InferenceSession
from vc4nn.runtime.errors import InputError, ModelFormatError, UnsupportedModelError
from vc4nn.runtime.image import NORMALIZATIONS, normalize
from vc4nn.runtime import random_mobilenets as onnx_models

from . import tflite_models
from .conftest import rel_error, top


@pytest.fixture
def device(emulator):
    return emulator


def save_onnx(model, tmp_path, name="m.onnx"):
    path = str(tmp_path / name)
    onnx.save(model, path)
    return path


def ort_run(path, x):
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


@pytest.mark.parametrize("build", [onnx_models.mobilenet_v1, onnx_models.mobilenet_v2])
def test_onnx_models_match_onnxruntime(tmp_path, fake_layers, device, build):
    path = save_onnx(build(32), tmp_path)
    x = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
    with InferenceSession(path, device=device) as sess:
        assert sess.get_inputs()[0] == ("input", (1, 3, 32, 32), "float32")
        (got,) = sess.run(None, {"input": x})
        # liveness lets values share bytes: the arena is smaller than all activations together
        all_values = sum(sess.plan.sizes.values())
        assert sess.plan.arena_bytes < all_values / 3
        assert sess.plan.arena_bytes >= sess.plan.peak_live_bytes
    expected = ort_run(path, x)
    assert got.shape == expected.shape == (1, 10)
    assert rel_error(got, expected) <= 1e-3 and top(got, 1) == top(expected, 1)
    assert device._allocations == []


@pytest.mark.parametrize("weights", ["float32", "float16"])
def test_tflite_model_matches_reference(tmp_path, fake_layers, device, weights):
    data, x, ref = tflite_models.mobilenet_v2(32, 0.35, weights=weights)
    path = tmp_path / "m.tflite"
    path.write_bytes(data)
    with InferenceSession(str(path), device=device) as sess:
        (got,) = sess.run(None, {sess.get_inputs()[0].name: x})
    assert got.shape == (1, 10)
    assert rel_error(got[0], ref) <= 1e-3 and top(got, 1) == top(ref, 1)


@pytest.mark.parametrize("preset", ["torchvision", "tflite"])
def test_uint8_frame_folded_into_stem_is_exact(tmp_path, fake_layers, device, preset):
    """The frame path (normalisation folded into the stem, mean-valued border) against
    onnxruntime on the normalised float image: equal, borders included."""
    path = save_onnx(onnx_models.mobilenet_v1(32, 0.25), tmp_path)
    frame = np.random.default_rng(4).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    with InferenceSession(path, device=device, image_input=preset) as sess:
        assert sess.get_inputs()[0].shape == (32, 32, 3) and sess._frame.folded
        name = sess.get_inputs()[0].name
        first = sess.run(None, {name: frame})[0]
        second = sess.run(None, {name: frame})[0]      # the border is rewritten each run
    x = normalize(frame, NORMALIZATIONS[preset]).transpose(2, 0, 1)[None]
    expected = ort_run(path, x)
    assert rel_error(first, expected) <= 1e-4
    np.testing.assert_array_equal(first, second)


def test_bad_inputs_are_clear_and_allocate_nothing(tmp_path, fake_layers, device):
    path = save_onnx(onnx_models.mobilenet_v1(32, 0.25), tmp_path)
    with InferenceSession(path, device=device) as sess:
        held = list(device._allocations)
        with pytest.raises(InputError, match=r"shape \(1, 3, 16, 16\).*\(1, 3, 32, 32\)"):
            sess.run(None, {"input": np.zeros((1, 3, 16, 16), np.float32)})
        with pytest.raises(InputError, match="dtype float64"):
            sess.run(None, {"input": np.zeros((1, 3, 32, 32))})
        with pytest.raises(InputError, match="'input'"):
            sess.run(None, {"image": np.zeros((1, 3, 32, 32), np.float32)})
        with pytest.raises(InputError, match="unknown outputs"):
            sess.run(["nope"], {"input": np.zeros((1, 3, 32, 32), np.float32)})
        assert device._allocations == held
    assert device._allocations == []


@pytest.mark.parametrize("damage", ["truncate", "magic", "op"])
def test_malformed_files_leave_no_device_memory(tmp_path, fake_layers, device, damage):
    model = onnx_models.mobilenet_v1(32, 0.25)
    if damage == "op":
        model.graph.node[5].op_type = "LRN"
    data = model.SerializeToString()
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "magic":
        data = b"TFL2" * 4 + data
    path = tmp_path / "bad.onnx"
    path.write_bytes(data)
    error = UnsupportedModelError if damage == "op" else ModelFormatError
    with pytest.raises(error, match="bad.onnx"):
        InferenceSession(str(path), device=device)
    assert device._allocations == []


def test_average_pool_counting_padded_zeros_is_refused_naming_node_and_attribute(
        tmp_path, fake_layers, device):
    b = onnx_models.OnnxBuilder(seed=2)
    y = b.conv_bn("input", 3, 8, stride=2)
    y = b.node("AveragePool", [y], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1],
               count_include_pad=1)
    path = save_onnx(b.model("input", 16, y), tmp_path, "pool.onnx")
    with pytest.raises(UnsupportedModelError) as error:
        InferenceSession(path, device=device)
    message = str(error.value)
    assert message.startswith("AveragePool: counting padded zeros (count_include_pad=1)")
    assert "node 'AveragePool" in message and "pool.onnx" in message
    assert device._allocations == []


def test_failure_while_preparing_frees_what_was_prepared(tmp_path, monkeypatch, fake_layers,
                                                         device):
    def broken(*args, **kwargs):
        raise vc4nn.errors.Vc4nnError("no kernel")
    monkeypatch.setattr(vc4nn.nn, "prepare_fully_connected", broken)
    path = save_onnx(onnx_models.mobilenet_v1(32, 0.25), tmp_path)
    with pytest.raises(vc4nn.errors.Vc4nnError, match="no kernel"):
        InferenceSession(path, device=device)
    assert device._allocations == []


def test_profile_records(tmp_path, fake_layers, device):
    path = save_onnx(onnx_models.mobilenet_v2(32), tmp_path)
    with InferenceSession(path, device=device) as sess:
        records = sess.profile()
    ops = [r.op for r in records]
    assert ops[0] == "conv2d" and ops[-1] == "fully_connected"
    pw = next(r for r in records if r.op == "pointwise")
    assert pw.flops > 0 and pw.gflops > 0 and pw.bound in ("memory", "compute")


def test_quantized_uint8_input_is_folded_into_the_stem(tmp_path, fake_layers, device):
    """A quantized model's uint8 input ((q - 128) / 128, as TFLite's quantized MobileNets) and
    int8 weights: the input's scale and zero point go into the stem like a frame's
    normalisation."""
    x = np.random.default_rng(6).integers(0, 256, (1, 16, 16, 3), dtype=np.uint8)
    b = tflite_models.TFLiteBuilder(x, weights="int8", input_quant=(1 / 128, 128))
    y = b.conv(b.input, 8, stride=2)
    y = b.conv(b.depthwise(y), 16, k=1)
    data, ref = b.serialize(b.fully_connected(b.mean(y, keepdims=False), 5))
    path = tmp_path / "q.tflite"
    path.write_bytes(data)
    with InferenceSession(str(path), device=device) as sess:
        assert sess.get_inputs()[0].type == "uint8" and sess._frame.folded
        (got,) = sess.run(None, {sess.get_inputs()[0].name: x})
    assert rel_error(got[0], ref) <= 1e-4


@pytest.mark.parametrize("damage", ["truncate", "magic", "op"])
def test_malformed_tflite_files_leave_no_device_memory(tmp_path, fake_layers, device, damage):
    x = np.zeros((1, 8, 8, 3), np.float32)
    b = tflite_models.TFLiteBuilder(x)
    y = b.conv(b.input, 8)
    if damage == "op":
        b.op("LOGISTIC", [y], [b.out("sigmoid", b.ref[y])])
        y = len(b.tensors) - 1
    data, _ = b.serialize(y)
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "magic":
        data = data[:4] + b"XXXX" + data[8:]
    path = tmp_path / "bad.tflite"
    path.write_bytes(data)
    error = UnsupportedModelError if damage == "op" else ModelFormatError
    with pytest.raises(error, match="LOGISTIC.*bad.tflite" if damage == "op" else "bad.tflite"):
        InferenceSession(str(path), device=device)
    assert device._allocations == []
