"""End to end on the device (the emulator by default, ``--device=pi`` on a Pi): the runtime on the
QPU kernels of ``vc4nn.nn`` against onnxruntime and the independent TFLite reference."""


import numpy as np
import onnx
import onnxruntime as ort
import pytest

import vc4nn
import vc4nn.nn
from vc4nn.kernels import chain
from vc4nn.runtime import InferenceSession
from vc4nn.runtime import random_mobilenets as onnx_models

from . import tflite_models
from .conftest import CAT_CLASSES, rel_error, top

KERNELS = ("conv2d", "depthwise", "pointwise", "fully_connected", "global_avg_pool")
missing = [k for k in KERNELS if not hasattr(vc4nn.nn, k)]
pytestmark = pytest.mark.skipif(bool(missing), reason=f"vc4nn.nn has no {', '.join(missing)} "
                                                      f"on this branch yet")


@pytest.mark.parametrize("build,size,width", [(onnx_models.mobilenet_v1, 32, 0.25),
                                              (onnx_models.mobilenet_v2, 32, 0.35)])
def test_onnx_tiny_mobilenets(tmp_path, device, build, size, width):
    """Two runs on different inputs: the first calls the layers (and records their launches),
    the second replays the recorded launches; both match onnxruntime."""
    path = str(tmp_path / "m.onnx")
    onnx.save(build(size, width), path)
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(5)
    with InferenceSession(path, device=device) as sess:
        for _ in range(2):
            x = rng.standard_normal((1, 3, size, size)).astype(np.float32)
            (got,) = sess.run(None, {"input": x})
            expected = ref.run(None, {"input": x})[0]
            assert rel_error(got, expected) <= 1e-3 and top(got, 1) == top(expected, 1)
        assert all(r.launches for r in sess._recordings.values())
        assert sess.memory()["recorded_bytes"] > 0
    assert device._allocations == []


def test_tflite_tiny_mobilenet_v1(tmp_path, device):
    data, x, expected = tflite_models.mobilenet_v1(32, 0.25)
    path = tmp_path / "m.tflite"
    path.write_bytes(data)
    with InferenceSession(str(path), device=device) as sess:
        (got,) = sess.run(None, {sess.get_inputs()[0].name: x})
    assert rel_error(got[0], expected) <= 1e-3 and top(got, 1) == top(expected, 1)


@pytest.mark.slow
def test_real_mobilenet_v2_on_the_cat(mobilenet_v2_onnx, cat_frame, device):
    """torchvision's weights on the emulated GPU: onnxruntime's top-5, a cat on top."""
    from vc4nn.runtime.image import NORMALIZATIONS, normalize
    if device.name == "emulator" and getattr(device, "core", "python") != "c":
        pytest.skip("300 M multiply-adds need the emulator's C core (hours on the Python core)")
    with InferenceSession(mobilenet_v2_onnx, device=device, image_input="torchvision") as sess:
        (got,) = sess.run(None, {"input": cat_frame})
    x = normalize(cat_frame, NORMALIZATIONS["torchvision"]).transpose(2, 0, 1)[None]
    ref = ort.InferenceSession(mobilenet_v2_onnx, providers=["CPUExecutionProvider"])
    expected = ref.run(None, {"input": x})[0]
    assert top(got) == top(expected) and top(got, 1)[0] in CAT_CLASSES
    assert rel_error(got, expected) <= 1e-3


def test_memory_budget_limits_recorded_launches(tmp_path, device):
    """With a budget that leaves room for only some recordings, the session stays within it, the
    layers past it are called every run, and the results are the same."""
    path = str(tmp_path / "m.onnx")
    onnx.save(onnx_models.mobilenet_v1(32, 0.25), path)
    x = np.random.default_rng(7).standard_normal((1, 3, 32, 32)).astype(np.float32)
    with InferenceSession(path, device=device, replay=False) as sess:
        (expected,) = sess.run(None, {"input": x})
        bare = sess.memory()["total_bytes"]
    budget = bare + 20_000
    with InferenceSession(path, device=device, memory_budget=budget) as sess:
        first = sess.run(None, {"input": x})[0]
        second = sess.run(None, {"input": x})[0]
        kept = [r for r in sess._recordings.values() if r.launches]
        assert 0 < len(kept) < len(sess._recordings)
        assert sess.memory()["total_bytes"] <= budget
        # the device holds only programs a kept launch runs (and the chains' pass program)
        run = {code for r in kept for launch in r.entries for _, code in launch}
        passes = {buf.address for key, buf in sess._code.programs.items()
                  if key == chain.tail_code()}
        assert {buf.address for buf in sess._code.programs.values()} == run | passes
    np.testing.assert_array_equal(first, expected)
    np.testing.assert_array_equal(second, expected)


def tiny_v1(tmp_path):
    path = str(tmp_path / "m.onnx")
    onnx.save(onnx_models.mobilenet_v1(32, 0.25), path)
    return path


def test_weights_in_one_allocation_and_layers_recorded_at_load(tmp_path, device):
    """All weights share one device allocation; the load assembles and records every layer
    without launching anything; the first run is already a replay and matches onnxruntime."""
    path = tiny_v1(tmp_path)
    launched = []
    launch = device._launch
    device._launch = lambda *args: launched.append(args) or launch(*args)
    try:
        with InferenceSession(path, device=device, replay=False) as sess:
            assert len(device._allocations) == 2          # activation arena + weight arena
        with InferenceSession(path, device=device, group_launches=False) as sess:
            assert launched == []
            weights = sess._weights.buffer.allocation
            prepared = [arg for _, call in sess.steps if call is not None
                        for arg in call.args if hasattr(arg, "free")]
            buffers = [getattr(p, name) for p in prepared
                       for name in ("buffer", "weights", "bias") if getattr(p, name, None)
                       is not None]
            assert len(prepared) == 28                    # conv, 13 dw, 13 pw, fc
            assert all(b.allocation is weights for b in buffers)
            assert sess.memory()["weight_bytes"] == weights.size
            assert all(r.launches and r.packed is not None for r in sess._recordings.values())
            x = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
            (got,) = sess.run(None, {"input": x})
            assert len(launched) == sum(len(r.launches) for r in sess._recordings.values())
    finally:
        del device._launch
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    expected = ref.run(None, {"input": x})[0]
    assert rel_error(got, expected) <= 1e-3 and top(got, 1) == top(expected, 1)
    assert device._allocations == []


def test_a_run_launches_every_recorded_layer_in_one_device_call(tmp_path, device):
    """Without a progress bar a run is one execute_control_lists call for all the recorded
    layers; the per-layer reports profile() rebuilds from it are those of a run layer by layer
    (the schedule a progress bar uses), and the outputs are the same."""
    path = tiny_v1(tmp_path)
    x = np.random.default_rng(4).standard_normal((1, 3, 32, 32)).astype(np.float32)
    calls = []
    sequence = device.execute_control_lists
    device.execute_control_lists = lambda launches: \
        calls.append(len(launches)) or sequence(launches)
    try:
        with InferenceSession(path, device=device, progress=False,
                              group_launches=False) as sess:
            (together,) = sess.run(None, {"input": x})
            grouped = sess.profile()
            sess.progress = True
            (apart,) = sess.run(None, {"input": x})
            layered = sess.profile()
            counts = [len(r.launches) for r in sess._recordings.values()]
    finally:
        del device.execute_control_lists
    assert calls == [sum(counts)] + counts and len(counts) == 29     # conv, 13 dw, 13 pw, gap, fc
    np.testing.assert_array_equal(together, apart)
    assert [(r.name, r.launches, r.cycles, r.seconds) for r in grouped] == \
        [(r.name, r.launches, r.cycles, r.seconds) for r in layered]
    assert [r.launches for r in grouped] == counts
    assert all(r.host_seconds is None for r in grouped)
    assert all(r.host_seconds > 0 for r in layered)
    from vc4nn.runtime.profile import summarize
    assert summarize(grouped)["host_seconds"] is None
    assert summarize(layered)["host_seconds"] == pytest.approx(sum(r.host_seconds for r in layered))


@pytest.mark.parametrize("stage", ["weights", "recording"])
def test_a_failed_load_leaves_no_device_memory(tmp_path, device, monkeypatch, stage):
    """A load that fails once the arenas (and some recordings) are allocated frees them all."""
    from vc4nn.nn import layer_call
    from vc4nn.runtime import replay

    class Boom(RuntimeError):
        pass
    calls = []

    def fail_late(original):
        def wrapped(self, *args):
            calls.append(1)
            if len(calls) > 3:
                raise Boom(stage)
            return original(self, *args)
        return wrapped
    if stage == "weights":
        monkeypatch.setattr(layer_call.WeightArena, "array",
                            fail_late(layer_call.WeightArena.array))
    else:
        monkeypatch.setattr(replay.Recording, "pack", fail_late(replay.Recording.pack))
    with pytest.raises(Boom):
        InferenceSession(tiny_v1(tmp_path), device=device)
    assert len(calls) == 4 and device._allocations == []


def test_workspaces_come_from_the_lent_scratch_region(device):
    """nn.pointwise's transpose workspace lands in a ``scratch`` region when it fits there (a
    region full of garbage: the kernel writes it before reading), else in its own buffer."""
    from vc4nn.nn.layer_call import scratch
    rng = np.random.default_rng(1)
    x = device.array(rng.standard_normal((7, 7, 64)).astype(np.float32))
    w = rng.standard_normal((64, 32)).astype(np.float32)
    prepared = vc4nn.nn.prepare_pointwise(w, device=device)
    out = device.alloc((7, 7, 32), np.float32)
    tiling = {"transpose_input": True}
    expected = np.asarray(x, np.float64).reshape(-1, 64) @ w
    region = device.array(np.full(64 * 64 * 4 + 100, 0xFF, np.uint8))   # NaN bit patterns
    for lent, fits in ((region, True), (region[:64], False)):
        allocated = []
        alloc = device.alloc
        device.alloc = lambda *a, **k: allocated.append(a) or alloc(*a, **k)
        try:
            with scratch(lent):
                vc4nn.nn.pointwise(x, prepared, out=out, device=device, tiling=tiling)
        finally:
            del device.alloc
        np.testing.assert_allclose(np.asarray(out).reshape(-1, 32), expected, rtol=1e-4,
                                   atol=1e-4)
        workspaces = [a for a in allocated if np.dtype(a[1]) == np.float32]  # code, uniforms:
        assert (workspaces == []) == fits                                    # uint8
        if fits:
            assert not (np.asarray(region[:64 * 49 * 4]) == 0xFF).all()   # it was written
