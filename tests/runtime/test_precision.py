"""InferenceSession(precision=...): fp16 storage per layer, against onnxruntime / the TFLite
reference (float64 numpy) and against the same session in fp32."""

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from vc4nn.runtime import InferenceSession
from vc4nn.runtime.loader import load_graph
from vc4nn.runtime.precision import PrecisionError, storage_plan
from vc4nn.runtime import random_mobilenets as onnx_models

from . import tflite_models
from .conftest import CAT_CLASSES, rel_error, top


def test_storage_plan_halves_only_between_fp16_kernels(tiny_v1):
    """A value is a half only if its writer runs fp16 and can write halves and all its readers
    can read them: in MobileNet v1 every activation between the stem and the classifier is;
    the classifier's logits (fully_connected writes float32) are not, nor is the result of a
    layer kept float32 (here the first pointwise layer: its weights and result; its input,
    written by an fp16 layer, stays a half, which its kernel reads)."""
    graph = load_graph(tiny_v1)
    plan = storage_plan(graph, {n.name for n in graph.nodes})
    stem = next(n for n in graph.nodes if n.op == "conv2d")
    depthwise = [n for n in graph.nodes if n.op == "depthwise"]
    pointwise = [n for n in graph.nodes if n.op == "pointwise"]
    assert plan.values[stem.outputs[0]] == "fp16"
    assert all(plan.values[n.outputs[0]] == "fp16" for n in depthwise + pointwise)
    assert all(plan.weights(n) == "fp16" for n in depthwise)
    fc = next(n for n in graph.nodes if n.op == "fully_connected")
    assert plan.weights(fc) == "fp16" and plan.values[fc.outputs[0]] == "fp32"
    assert plan.weights(stem) == "fp32"             # conv2d's weights travel as uniforms
    assert pointwise and all(plan.weights(n) == "fp16" for n in pointwise)
    some = storage_plan(graph, {n.name for n in graph.nodes} - {pointwise[0].name})
    assert some.values[pointwise[0].inputs[0]] == "fp16"
    assert some.values[pointwise[0].outputs[0]] == "fp32"
    assert some.weights(pointwise[0]) == "fp32"
    none = storage_plan(graph, ())
    assert set(none.values.values()) == {"fp32"}


@pytest.mark.parametrize("precision", ["fp16", "auto"])
def test_tiny_v1_fp16_close_to_onnxruntime(tiny_v1, device, precision):
    x = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
    expected = ort.InferenceSession(tiny_v1, providers=["CPUExecutionProvider"]).run(
        None, {"input": x})[0]
    calibration = [x] if precision == "auto" else None      # calibrated on the input itself
    with InferenceSession(tiny_v1, device=device, precision=precision,
                          calibration=calibration) as sess:
        (got,) = sess.run(None, {"input": x})
        records = sess.profile()
        halves = [r for r in records if r.storage == "fp16"]
        memory = sess.memory()
        fp16_bytes = memory["arena_bytes"] + memory["weight_bytes"]
    with InferenceSession(tiny_v1, device=device) as sess:
        memory = sess.memory()
        fp32_bytes = memory["arena_bytes"] + memory["weight_bytes"]
    # fp16 storage: a few half roundings per layer, not float32's 1e-3
    assert rel_error(got, expected) <= 2e-2 and top(got, 1) == top(expected, 1)
    if precision == "fp16":
        assert len(halves) == sum(r.op in ("conv2d", "depthwise", "pointwise", "fully_connected",
                                           "global_avg_pool") for r in records)
        assert fp16_bytes < fp32_bytes
    else:                               # auto says why for each candidate
        assert all(r.choice for r in records if r.op == "depthwise")
    assert device._allocations == []


@pytest.mark.parametrize("precision", ["fp16", "auto"])
def test_weights_outside_the_halves_range_stay_float32(tmp_path, device, precision):
    """A depthwise layer's weights scaled past 65504 (a half would hold inf): that layer keeps
    float32 weights, says why, and the output matches onnxruntime."""
    model = onnx_models.mobilenet_v1(32, 0.25)
    first_dw = next(n for n in model.graph.node if n.op_type == "Conv"
                    and any(a.name == "group" and a.i > 1 for a in n.attribute))
    init = next(i for i in model.graph.initializer if i.name == first_dw.input[1])
    w = onnx.numpy_helper.to_array(init) * 1e6
    init.CopyFrom(onnx.numpy_helper.from_array(w.astype(np.float32), init.name))
    path = str(tmp_path / "big.onnx")
    onnx.save(model, path)
    x = np.random.default_rng(4).standard_normal((1, 3, 32, 32)).astype(np.float32)
    expected = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"input": x})[0]
    with InferenceSession(path, device=device, precision=precision) as sess:
        (got,) = sess.run(None, {"input": x})
        records = [r for r in sess.profile() if r.op == "depthwise"]
    assert records[0].storage == "fp32" and "fp16 range" in records[0].choice
    assert records[1].storage == ("fp16" if precision == "fp16" else records[1].storage)
    assert rel_error(got, expected) <= 2e-2 and top(got, 1) == top(expected, 1)


def test_tflite_fp16_weights_reach_fp16_layers_as_stored(tmp_path, device):
    data, x, expected = tflite_models.mobilenet_v1(32, 0.25, weights="float16")
    path = tmp_path / "m.tflite"
    path.write_bytes(data)
    graph = load_graph(str(path))
    dw = next(n for n in graph.nodes if n.op == "depthwise")
    assert graph.constants[dw.inputs[1]].dtype == np.float16
    for precision in ("fp32", "fp16"):
        with InferenceSession(str(path), device=device, precision=precision) as sess:
            (got,) = sess.run(None, {sess.get_inputs()[0].name: x})
        assert rel_error(got[0], expected) <= (1e-3 if precision == "fp32" else 2e-2)
        assert top(got, 1) == top(expected, 1)


@pytest.mark.parametrize("kwargs, message", [(dict(precision="bf16"), "precision='bf16'"),
                                             (dict(precision="auto", tolerance=0),
                                              "tolerance=0")])
def test_bad_precision_arguments(tiny_v1, device, kwargs, message):
    with pytest.raises(PrecisionError, match=message):
        InferenceSession(tiny_v1, device=device, **kwargs)


@pytest.mark.slow
def test_real_mobilenet_v2_fp16_on_the_cat(mobilenet_v2_onnx, cat_frame, device):
    """torchvision's weights: fp16 storage gives float32's top-1 (a cat) on the cat photo."""
    if device.name == "emulator" and getattr(device, "core", "python") != "c":
        pytest.skip("300 M multiply-adds need the emulator's C core (hours on the Python core)")
    results = {}
    for precision in ("fp32", "fp16"):
        with InferenceSession(mobilenet_v2_onnx, device=device, image_input="torchvision",
                              precision=precision, replay=False) as sess:
            results[precision] = sess.run(None, {"input": cat_frame})[0]
    assert top(results["fp16"], 1) == top(results["fp32"], 1)
    assert top(results["fp16"], 1)[0] in CAT_CLASSES
    assert rel_error(results["fp16"], results["fp32"]) <= 2e-2


def test_accuracy_command(tiny_v1, tmp_path, capsys):
    """vc4nn accuracy on the tiny model (ONNX: torchvision normalisation of uint8 frames): the
    JSON report's agreement and errors, a per-layer row per layer, and the chart."""
    from vc4nn.cli import main
    png = tmp_path / "growth.png"
    assert main(["accuracy", tiny_v1, "-n", "1", "--precisions", "fp16", "--json",
                 "--png", str(png)]) == 0
    report = json.loads(capsys.readouterr().out)
    fp16 = report["precisions"]["fp16"]
    assert report["inputs"] in (["chelsea"], ["synthetic0"]) and fp16["fp16_layers"] > 0
    assert 0 < fp16["output_error_max"] <= 2e-2 and fp16["top1_agreement"] == 1.0
    assert fp16["layers"][0]["storage"] == "fp16" and len(fp16["layers"]) >= 28
    assert png.stat().st_size > 1000
    assert main(["accuracy", tiny_v1, "--precisions", "fp8"]) == 1
    assert "--precisions fp8" in capsys.readouterr().err


@pytest.fixture(scope="module")
def residual_of_depthwise(tmp_path_factory):
    """An add the pointwise layer cannot fuse (its operands: a depthwise result and a
    pointwise result with an activation); the sum feeds a depthwise layer, then the pool and
    the classifier."""
    b = onnx_models.OnnxBuilder(seed=4)
    stem = b.conv_bn("input", 3, 24, stride=2)
    left = b.conv_bn(stem, 24, 24, group=24)
    right = b.conv_bn(stem, 24, 24, k=1, act="relu")
    y = b.conv_bn(b.node("Add", [left, right]), 24, 24, group=24)
    path = str(tmp_path_factory.mktemp("res") / "m.onnx")
    onnx.save(b.model("input", 18, b.head(y, 24, 10)), path)
    return path


@pytest.mark.parametrize("precision", ["fp16", "auto"])
def test_unfused_add_and_pool_store_halves(residual_of_depthwise, device, precision):
    """fp16: the add reads a half operand and writes halves for the depthwise layer; the pool
    writes halves for the classifier. auto tries the add on both of its reference operands:
    b comes from a layer auto does not run when pointwise has no fp16 kernel, so a b left
    stale in the arena would show as a large error and refuse fp16."""
    x = np.random.default_rng(5).standard_normal((1, 3, 18, 18)).astype(np.float32)
    expected = ort.InferenceSession(residual_of_depthwise, providers=[
        "CPUExecutionProvider"]).run(None, {"input": x})[0]
    with InferenceSession(residual_of_depthwise, device=device, precision=precision,
                          calibration=[x]) as sess:
        (got,) = sess.run(None, {"input": x})
        records = {r.op: r for r in sess.profile()}
        add_node = next(n for n in sess.graph.nodes if n.op == "add")
        halves = [sess.storage.values[v] for v in (add_node.inputs[0], add_node.outputs[0])]
    assert rel_error(got, expected) <= 2e-2 and top(got, 1) == top(expected, 1)
    assert records["add"].storage == "fp16" and records["global_avg_pool"].storage == "fp16"
    assert halves == ["fp16"] * 2
    if precision == "auto":
        assert records["add"].choice.startswith("fp16/") and "<=" in records["add"].choice


@pytest.fixture(scope="module")
def tiny_v2(tmp_path_factory):
    """A MobileNet v2-style model: expansions, depthwise, projections with fused residuals
    (Cin / Cout 8, 16, 24, 48, 72: not all multiples of 16), 10 classes."""
    path = str(tmp_path_factory.mktemp("v2") / "m.onnx")
    onnx.save(onnx_models.mobilenet_v2(32, 0.5, blocks=((1, 16, 1, 1), (6, 24, 2, 2),
                                                        (6, 32, 2, 2))), path)
    return path


def test_tiny_v2_fp16_activations_close_to_onnxruntime(tiny_v2, device):
    """precision="fp16" keeps every activation between the stem and the classifier in halves,
    the pointwise layers' inputs, fused residuals and results included, and stays within fp16
    storage's error of onnxruntime's float32."""
    x = np.random.default_rng(8).standard_normal((1, 3, 32, 32)).astype(np.float32)
    expected = ort.InferenceSession(tiny_v2, providers=["CPUExecutionProvider"]).run(
        None, {"input": x})[0]
    with InferenceSession(tiny_v2, device=device, precision="fp16") as sess:
        (got,) = sess.run(None, {"input": x})
        pointwise = [n for n in sess.graph.nodes if n.op == "pointwise"]
        fused = [n for n in pointwise if len(n.inputs) > 3]
        stored = sess.storage.values
        half_values = {v for n in pointwise for v in [n.inputs[0], n.outputs[0]] + n.inputs[3:]}
        assert fused and all(stored[v] == "fp16" for v in half_values)
        fp16_arena = sess.memory()["arena_bytes"]
    with InferenceSession(tiny_v2, device=device) as sess:
        assert sess.memory()["arena_bytes"] > fp16_arena
    assert rel_error(got, expected) <= 2e-2 and top(got, 1) == top(expected, 1)
    assert device._allocations == []
