"""precision="auto" choosing each layer's result and weight storage
(vc4nn/runtime/precision_auto.py): the choice rule on hand-made tries, and whole sessions
against onnxruntime."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from vc4nn.runtime import InferenceSession
from vc4nn.runtime import precision_auto as auto
from vc4nn.runtime import random_mobilenets as onnx_models
from vc4nn.runtime.loader import load_graph

from .conftest import rel_error, top


@pytest.fixture(scope="module")
def tiny_v2(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("v2") / "m.onnx")
    onnx.save(onnx_models.mobilenet_v2(32, 0.5, blocks=((1, 16, 1, 1), (6, 24, 2, 2))), path)
    return path


def hand_made(graph, fp32, halves, half_result):
    """Tries of every layer: (error, time) of each candidate, float32's time in the traces."""
    names = [n.name for n in graph.nodes if n.op != "reshape"]
    trials = {auto.HALVES: {n: halves for n in names}, auto.HALF_RESULT: {n: half_result
                                                                          for n in names}}
    traces = [{n: (None, None, fp32) for n in names}]
    return names, trials, traces


@pytest.mark.parametrize("halves, half_result, expected", [
    ((1e-3, 80), (1e-3, 70), auto.HALF_RESULT),         # both fit: the faster
    ((1e-3, 70), (1e-3, 80), auto.HALVES),
    ((1e-3, 70), (2e-2, 60), auto.HALVES),              # the faster one is too far off
    ((2e-2, 70), (2e-2, 60), auto.FP32),                # neither fits
    ((1e-3, 100), (1e-3, 100), auto.FP32),              # float32 wins ties
    ((1e-3, 120), (1e-3, 110), auto.FP32),              # slower than float32
])
def test_the_fastest_storage_within_the_tolerance_wins(tiny_v1, halves, half_result, expected):
    graph = load_graph(tiny_v1)
    names, trials, traces = hand_made(graph, 100, halves, half_result)
    choices = auto.choose(graph, trials, traces, tolerance=1e-2)
    ops = {n.name: n.op for n in graph.nodes}
    # conv2d (float32 weights in its kernel) and the pool try a half result only
    error, time = half_result
    single = auto.HALF_RESULT if error <= 1e-2 and time < 100 else auto.FP32
    for name in names:
        wanted = expected if ops[name] in ("pointwise", "depthwise", "fully_connected") else single
        assert choices[name][0] == wanted, name
    pw = next(n for n in names if ops[n] == "pointwise")
    assert choices[pw][1].startswith("fp16/fp16 error 1.0e-03") or "> 0.01" in choices[pw][1]
    pool = next(n for n in names if ops[n] == "global_avg_pool")
    assert "fp16/-" in choices[pool][1] and "fp16/fp16" not in choices[pool][1]


def test_a_float32_result_flips_where_its_readers_gain_more(tiny_v1):
    """keep_faster compares a layer plus its readers: a pointwise layer 10 clocks slower with a
    half result is flipped when its depthwise reader gains 30; not when the reader gains 5."""
    graph = load_graph(tiny_v1)
    layers = [n for n in graph.nodes if n.op != "reshape"]
    pw = next(i for i, n in enumerate(layers) if n.op == "pointwise")
    name, reader = layers[pw].name, layers[pw + 1].name
    assert auto.affected(graph, [name]) == {name, reader}
    choices = {name: (auto.FP32, "note")}
    for gain, flipped in ((30, True), (5, False)):
        before = {name: (0.0, 100), reader: (0.0, 100)}
        after = {name: (1e-3, 110), reader: (1e-3, 100 - gain)}
        kept = auto.keep_faster(graph, choices, {name: auto.HALF_RESULT}, before, after)
        assert (kept[name][0] == auto.HALF_RESULT) == flipped


@pytest.mark.parametrize("model", ["tiny_v1", "tiny_v2"])
def test_auto_sessions_match_onnxruntime(model, request, device):
    """auto's choices run as chosen: within fp16 storage's error of onnxruntime's float32, the
    same top-1; the profile's result/weights storage is the plan's, with a note per layer
    naming what it chose; weights kept float32 make the weight arena larger than fp16's."""
    path = request.getfixturevalue(model)
    x = np.random.default_rng(9).standard_normal((1, 3, 32, 32)).astype(np.float32)
    expected = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"input": x})[0]
    with InferenceSession(path, device=device, precision="auto", calibration=[x]) as sess:
        (got,) = sess.run(None, {"input": x})
        records = sess.profile()
        nodes = {n.name: n for n in sess.graph.nodes}
        for r in records:
            node = nodes[r.name]
            assert r.storage == sess.storage.layer(node)
            if r.op in ("pointwise", "depthwise", "fully_connected"):
                assert r.weights == sess.storage.weights(node)
                assert r.choice.startswith(f"{r.storage}/{r.weights} of ")
        float_weights = sum(r.storage == "fp16" and r.weights == "fp32" for r in records
                            if r.op == "pointwise")
        auto_weights = sess.memory()["weight_bytes"]
    with InferenceSession(path, device=device, precision="fp16") as sess:
        fp16_weights = sess.memory()["weight_bytes"]
    assert rel_error(got, expected) <= 2e-2 and top(got, 1) == top(expected, 1)
    assert (auto_weights > fp16_weights) == (float_weights > 0)
    assert device._allocations == []


def test_a_folded_stem_is_tried_on_its_whole_frame(tiny_v1, device):
    """With a uint8 frame the stem reads the padded frame whose border holds the normalisation's
    mean; its tries copy all of it, so the stem's half result measures a half's rounding (under
    2**-11 of its largest value, plus the halves of its neighbours' inputs; it measured 1.0
    while the border was left out), within the tolerance: whether it then stays fp16 is the
    cycle model's call on its time."""
    with InferenceSession(tiny_v1, device=device, precision="auto",
                          image_input="torchvision") as sess:
        stem = next(r for r in sess.profile() if r.op == "conv2d")
    error = float(stem.choice.split(" error ")[1].split()[0])
    assert error < 2e-3 and f"error {error:.1e} <= " in stem.choice, stem.choice
