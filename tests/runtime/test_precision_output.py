"""precision="auto" holding the network's output (vc4nn/runtime/precision_output.py): the
protection rule on hand-made tries, and a small model where one layer's fp16 weights flip the
decision while that layer's own error stays tiny, against onnxruntime and float64 numpy."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from vc4nn.runtime import InferenceSession
from vc4nn.runtime import precision_auto as auto
from vc4nn.runtime import precision_output as held
from vc4nn.runtime.loader import load_graph

from .test_precision_auto import hand_made

def layered(tiny_v1):
    """tiny_v1's graph with hand-made tries: fp32 100 clocks, fp16/fp16 60, fp16/fp32 61
    (the weights' layers choose fp16/fp16, the others fp16/-)."""
    graph = load_graph(tiny_v1)
    names, trials, traces = hand_made(graph, 100, (1e-3, 60), (1e-3, 61))
    return graph, trials, traces, auto.choose(graph, trials, traces, tolerance=1e-2)


def test_protections_weights_first_then_cheapest_first(tiny_v1):
    """Float32 weights cost 1 clock (61 - 60), a float32 result 40 (100 - 60) or 39: every
    weights step comes before every result step, each kind cheapest first; a flipped layer's
    weights are offered, its result not."""
    graph, trials, traces, choices = layered(tiny_v1)
    steps = held.protections(graph, choices, trials, traces, 1e-2)
    weights = [n for n, (c, _) in choices.items() if c == auto.HALVES]
    assert weights and [s[2] for s in steps[:len(weights)]] == [auto.HALF_RESULT] * len(weights)
    assert [s[0] for s in steps] == sorted(s[0] for s in steps)
    assert {s[0] for s in steps[:len(weights)]} == {1}
    assert {(n, c) for _, n, c in steps if c == auto.FP32} == {(n, auto.FP32) for n in choices}
    assert [c for _, n, c in held.protections(graph, choices, trials, traces, 1e-2,
                                              flipped={weights[0]}) if n == weights[0]] == \
        [auto.HALF_RESULT]
    # weights first even where a result costs less: float32 weights 39 clocks (99 - 60), the
    # float32 result of a layer without fp16 weights 1 (100 - 99)
    trials[auto.HALF_RESULT] = {n: (1e-3, 99) for n in trials[auto.HALF_RESULT]}
    choices = auto.choose(graph, trials, traces, tolerance=1e-2)
    steps = held.protections(graph, choices, trials, traces, 1e-2)
    kinds = [c == auto.HALF_RESULT for _, _, c in steps]
    assert kinds == sorted(kinds, reverse=True) and min(s[0] for s in steps) == 1
    assert steps[0][0] == 39
    # fp16/fp32 beyond the tolerance: the weights' only step is all float32
    trials[auto.HALF_RESULT] = {n: (5e-2, 61) for n in trials[auto.HALF_RESULT]}
    steps = held.protections(graph, choices, trials, traces, 1e-2)
    assert all(c == auto.FP32 for _, _, c in steps)


def test_the_output_check_protects_until_the_output_is_within_tolerance(tiny_v1):
    """measure: 3e-3 while the first depthwise layer keeps fp16 weights, else 1e-3. The check
    takes the cheapest budget that protects it and stops there: every layer's float32 weights
    (1 clock each) fit in 0.5% of the time, no result goes float32."""
    graph, trials, traces, choices = layered(tiny_v1)
    first = next(n.name for n in graph.nodes if n.op == "depthwise")
    calls = []

    def measure(tried):
        calls.append(tried)
        return 3e-3 if tried[first][0] == auto.HALVES else 1e-3

    out, summary = held.hold_output(graph, choices, trials, traces, 1e-2, 2e-3, measure)
    assert out[first][0] == auto.HALF_RESULT
    assert "float32 weights to hold the network's output (output error 3.0e-03 > 0.002" in \
        out[first][1]
    assert all(c != auto.FP32 for n, (c, _) in out.items() if choices[n][0] != auto.FP32)
    assert len(calls) == 2 and summary.endswith("1.0e-03")
    assert "3.0e-03 > 0.002" in summary
    # within the tolerance at once: one measurement, nothing protected
    out, summary = held.hold_output(graph, choices, trials, traces, 1e-2, 5e-3, measure)
    assert out == choices and "no layer protected" in summary and len(calls) == 3


def test_an_output_no_protection_holds_ends_all_float32(tiny_v1):
    """An error that only float32 everywhere removes: the budgets grow to every layer, whose
    output is float32's own (not measured)."""
    graph, trials, traces, choices = layered(tiny_v1)
    calls = []

    def measure(tried):
        calls.append(tried)
        return 1.0

    out, summary = held.hold_output(graph, choices, trials, traces, 1e-2, 2e-3, measure)
    assert all(c == auto.FP32 for c, _ in out.values())
    assert summary.endswith("0.0e+00") and len(calls) < 1 + len(held.BUDGETS)


SIZE, CHANNELS, WIDE, NARROW = 8, 16, 96, 24      # a reducing 1x1 conv reads fp16 weights faster
# The second 1x1 convolution's channel 0 is x0 * (1 + 3e-4) - x1 where x0 = x1 (the first
# convolution copies one channel twice): 3e-4 * x0 in float32, 0 with fp16 weights (1 + 3e-4
# rounds to 1.0 in a half), while the layer's own error, against its channel of 100 * x0, is
# ~3e-6. The classifier scores class 0 by 1000 x that channel's mean and class 1 by a bias of
# 0.15: on inputs near 1 float32 says class 0 (0.3), fp16 weights class 1.
DRIFT = 3e-4


def cancelling_model():
    w1 = np.zeros((WIDE, CHANNELS, 1, 1), np.float32)
    for c in range(WIDE):
        w1[c, c % CHANNELS] = 1.0
    w1[1, 1], w1[1, 0] = 0.0, 1.0               # out 0 and out 1 both copy input channel 0
    w2 = np.zeros((NARROW, WIDE, 1, 1), np.float32)
    w2[0, 0], w2[0, 1] = 1 + DRIFT, -1.0
    w2[1, 0] = 100.0
    for c in range(2, NARROW):
        w2[c, c] = 0.5
    fc = np.zeros((3, NARROW), np.float32)
    fc[0, 0] = 1000.0
    fc[2, 2] = 0.01
    bias = np.array([0.0, 0.15, 0.0], np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in
             ((w1, "w1"), (w2, "w2"), (fc, "fc"), (bias, "bias"))]
    nodes = [helper.make_node("Conv", ["input", "w1"], ["copy"], name="copy"),
             helper.make_node("Conv", ["copy", "w2"], ["cancel"], name="cancel"),
             helper.make_node("GlobalAveragePool", ["cancel"], ["pool"], name="pool"),
             helper.make_node("Flatten", ["pool"], ["flat"], name="flat"),
             helper.make_node("Gemm", ["flat", "fc", "bias"], ["logits"], name="logits",
                              transB=1)]
    graph = helper.make_graph(
        nodes, "cancel", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                        (1, CHANNELS, SIZE, SIZE))],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, (1, 3))], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture(scope="module")
def cancelling(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("cancel") / "m.onnx")
    onnx.save(cancelling_model(), path)
    return path


def float64_logits(x, half_weights):
    """The model in float64 numpy, the second convolution's weights rounded to halves or not."""
    m = cancelling_model()
    w = {i.name: numpy_helper.to_array(i).astype(np.float64) for i in m.graph.initializer}
    w2 = w["w2"][:, :, 0, 0]
    if half_weights:
        w2 = w2.astype(np.float16).astype(np.float64)
    copy = np.einsum("oc,chw->ohw", w["w1"][:, :, 0, 0], x[0].astype(np.float64))
    pooled = np.einsum("oc,chw->ohw", w2, copy).mean(axis=(1, 2))
    return w["fc"] @ pooled + w["bias"]


def test_one_layers_fp16_weights_flip_the_decision_and_auto_keeps_them_float32(cancelling,
                                                                              device):
    x = np.random.default_rng(5).uniform(0.5, 1.5, (1, CHANNELS, SIZE, SIZE)).astype(np.float32)
    expected = ort.InferenceSession(cancelling, providers=["CPUExecutionProvider"]).run(
        None, {"input": x})[0].reshape(-1)
    assert np.argmax(expected) == 0 == np.argmax(float64_logits(x, False))
    assert np.argmax(float64_logits(x, True)) == 1          # what fp16 weights do
    with InferenceSession(cancelling, device=device, precision="fp16") as sess:
        assert np.argmax(sess.run(None, {"input": x})[0]) == 1
    # calibration: two other draws of the same kind (not the input evaluated)
    calibration = [np.random.default_rng(s).uniform(0.5, 1.5, x.shape).astype(np.float32)
                   for s in (6, 7)]
    unguarded = dict(precision="auto", calibration=calibration, output_tolerance=1e9)
    with InferenceSession(cancelling, device=device, **unguarded) as sess:
        cancel = next(n for n in sess.graph.nodes if n.op == "pointwise" and
                      n.outputs[0] == "cancel")
        per_layer_only = sess.storage.weights(cancel)
        flipped = int(np.argmax(sess.run(None, {"input": x})[0]))
    with InferenceSession(cancelling, device=device, precision="auto",
                          calibration=calibration) as sess:
        (got,) = sess.run(None, {"input": x})
        records = {r.name: r for r in sess.profile()}
        check = sess.storage.output_check
    # the layer's own error passes the per-layer tolerance: fp16 weights, a changed decision
    assert per_layer_only == "fp16" and flipped == 1
    assert records[cancel.name].weights == "fp32"
    assert "hold the network's output" in records[cancel.name].choice
    assert check.startswith("network output error") and "protected" in check
    got = got.reshape(-1)
    assert np.argmax(got) == 0
    assert np.abs(got - expected).max() <= 2e-3 * np.abs(expected).max()
    assert device._allocations == []
