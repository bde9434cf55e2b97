"""The runtime hands a depthwise result to the pointwise layer reading it channel-major
(vc4nn/runtime/handoff.py): a MobileNet v1-style model whose pointwise layers read Cin = 256
(Cin*4 = 1 KB, the rows alias in the TMU cache on 12 QPUs, so the pointwise layer transposes
its input) against onnxruntime, with one launch fewer per handed-over pair."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from vc4nn.runtime import InferenceSession, session as session_module
from vc4nn.runtime.precision import trace
from vc4nn.runtime.random_mobilenets import OnnxBuilder

from .conftest import rel_error


def wide_v1_model(size=32, seed=3, c=256):
    """stem -> dw/pw blocks; the second and third pointwise layers read 8x8xc (each from a
    depthwise layer); the last depthwise result also feeds a second reader (no handoff)."""
    b = OnnxBuilder(seed)
    y = b.conv_bn("input", 3, 16, stride=2)                     # 16x16x16
    y = b.conv_bn(y, 16, 16, stride=2, group=16)                # 8x8x16
    y = b.conv_bn(y, 16, c, k=1)                                # 8x8xc
    y = b.conv_bn(y, c, c, group=c)
    y = b.conv_bn(y, c, c, k=1)                                 # handed over
    y = b.conv_bn(y, c, c, stride=1, group=c, act="relu")
    y = b.conv_bn(y, c, c, k=1, act="relu")                     # handed over
    d = b.conv_bn(y, c, c, group=c, act=None)
    y = b.node("Add", [b.conv_bn(d, c, c, k=1, act=None), d])   # d has two readers
    return b.model("input", size, b.head(y, c, 10))


def launches(sess):
    return sum(run.launches for _, run, _ in sess.last_runs)


def runs_with_and_without_handoff(path, x, device, monkeypatch, tolerance, **options):
    """{hand-over on: (launches per run, the values stored channel-major, the session's graph
    and those values' storage)}; every run (a call, then a replay of the recorded launches)
    within ``tolerance`` of onnxruntime with its top-1."""
    expected = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"input": x})[0]
    counts = {}
    for handoff in (False, True):
        with monkeypatch.context() as m:
            if not handoff:
                m.setattr(session_module, "transposed_handoffs", lambda *args: set())
            with InferenceSession(path, device=device, group_launches=False, **options) as sess:
                for _ in range(2):
                    (got,) = sess.run(None, {"input": x})
                    err = rel_error(got, expected)
                    assert err <= tolerance and np.argmax(got) == np.argmax(expected)
                handed = sorted(sess.channel_major)
                counts[handoff] = (launches(sess), handed, sess.graph,
                                   {v: sess.storage.values[v] for v in handed})
    assert device._allocations == []
    return counts


def test_depthwise_hands_over_channel_major_to_pointwise(tmp_path, device, monkeypatch):
    path = str(tmp_path / "wide.onnx")
    onnx.save(wide_v1_model(), path)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    counts = runs_with_and_without_handoff(path, x, device, monkeypatch, 1e-3)
    (plain, none, _, _), (fused, names, graph, _) = counts[False], counts[True]
    handed = [n for n in graph.nodes if n.outputs[0] in names]
    assert all(n.op == "depthwise" for n in handed)
    assert [graph.shapes[n.outputs[0]] for n in handed] == [(8, 8, 256)] * len(handed)
    assert none == [] and len(names) == 2
    assert fused == plain - 2


def wide_fp16_model(size=32, seed=4):
    """Pointwise layers reading 8x8x512 from depthwise layers: in fp16 storage their rows of
    halves (1 KB) alias like float32 rows of 256 channels, so they transpose their input."""
    b = OnnxBuilder(seed)
    y = b.conv_bn("input", 3, 16, stride=2)
    y = b.conv_bn(y, 16, 16, stride=2, group=16)
    y = b.conv_bn(y, 16, 512, k=1)
    y = b.conv_bn(y, 512, 512, group=512)
    y = b.conv_bn(y, 512, 64, k=1)
    return b.model("input", size, b.head(y, 64, 10))


def test_fp16_depthwise_hands_over_halves_channel_major(tmp_path, device, monkeypatch):
    """precision="fp16": the depthwise result is stored as halves channel-major and the
    pointwise layer reads them so (one launch fewer), within fp16 storage's error of
    onnxruntime."""
    path = str(tmp_path / "wide16.onnx")
    onnx.save(wide_fp16_model(), path)
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    counts = runs_with_and_without_handoff(path, x, device, monkeypatch, 2e-2, precision="fp16")
    (plain, none, _, _), (fused, names, _, storage) = counts[False], counts[True]
    assert none == [] and len(names) == 1 and set(storage.values()) == {"fp16"}
    assert fused == plain - 1


def test_auto_compares_layers_across_layouts(tmp_path, device):
    """precision="auto" tries each fp16 layer on the float32 session's values (precision.trace,
    session.hwc_view): the float32 session hands the two 8x8x48 depthwise results over
    channel-major (after a stride-1 depthwise layer it always does), an fp16 one does not (halves
    hand over from 64 channels, a multiple of 32 or 112x112 pixels, vc4nn/nn/handoff.py), so the
    values must be compared as (H, W, C),
    not as stored. Which layers "auto" then
    keeps in fp16 follows the cycle model's times; its result must match onnxruntime."""
    path = str(tmp_path / "wide.onnx")
    onnx.save(wide_v1_model(c=48), path)
    x = np.random.default_rng(2).standard_normal((1, 3, 32, 32)).astype(np.float32)
    expected = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"input": x})[0]
    traces = {}
    for precision in ("fp32", "fp16"):
        with InferenceSession(path, device=device, precision=precision) as sess:
            traces[precision] = (set(sess.channel_major), {
                node: output for node, (_, output, _) in trace(sess, {"input": x}).items()})
            writers = {n.outputs[0]: n.name for n in sess.graph.nodes}
    (fp32_layouts, fp32_values), (fp16_layouts, fp16_values) = traces["fp32"], traces["fp16"]
    assert len(fp32_layouts) == 2 and not fp16_layouts & fp32_layouts
    for value in fp32_layouts:
        y32, y16 = fp32_values[writers[value]], fp16_values[writers[value]]
        assert y32.shape == y16.shape == (8, 8, 48)
        assert rel_error(y16.astype(np.float32), y32) <= 1e-2
    with InferenceSession(path, device=device, precision="auto", calibration=[x]) as sess:
        (got,) = sess.run(None, {"input": x})
        assert any(s == "fp16" for s in sess.storage.layers.values())
        assert all(sess.storage.values[v] == "fp32" for v in sess.channel_major)
        notes = [sess.storage.notes[n.name] for n in sess.graph.nodes if n.op == "pointwise"]
    assert all("error" in note for note in notes)
    assert rel_error(got, expected) <= 1e-2
    assert device._allocations == []
