"""Several layers in one launch through the runtime (launch_fusion.py, replay_chain.py): small
v1/v2-style models, fp32 and fp16, ONNX and TFLite, mailbox and direct launches, against
onnxruntime (or the builder's float64 reference), grouped against ungrouped."""

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import vc4nn
from vc4nn.runtime import InferenceSession
from vc4nn.runtime.errors import InputError
from vc4nn.runtime.launch_fusion import launch_spans
from vc4nn.runtime.planner import device_steps, plan_memory
from vc4nn.runtime.random_mobilenets import mobilenet_v1, mobilenet_v2

from . import tflite_models
from .conftest import rel_error

MODELS = {"v1": lambda: mobilenet_v1(32, 0.25), "v2": lambda: mobilenet_v2(32, 0.35)}


def launches_made(device):
    """A list that counts the device's launches while the test runs."""
    made, launch = [], device._launch
    device._launch = lambda *args: made.append(args[0]) or launch(*args)
    return made


def run_both(path, x, device, **options):
    """{grouped: (output, launches made by one run, the session's memory, chained launches
    saved)} of one run each with and without launch groups."""
    out = {}
    made = launches_made(device)
    try:
        for grouped in (False, True):
            with InferenceSession(path, device=device, group_launches=grouped,
                                  **options) as sess:
                del made[:]
                (y,) = sess.run(None, {sess.get_inputs()[0].name: x})
                saved = sum(len(c.launches) - 1 for c in sess._chains)
                out[grouped] = (y, len(made), sess.memory(), saved)
    finally:
        del device._launch
    assert device._allocations == []
    return out


@pytest.mark.parametrize("model, precision, launch, tolerance", [
    ("v1", "fp32", "mailbox", 1e-3), ("v2", "fp32", "direct", 1e-3),
    ("v1", "fp16", "direct", 2e-2), ("v2", "fp16", "mailbox", 2e-2)])
def test_grouped_onnx_models_match_onnxruntime_and_the_ungrouped_run(
        tmp_path, model, precision, launch, tolerance):
    path = str(tmp_path / f"{model}.onnx")
    onnx.save(MODELS[model](), path)
    x = np.random.default_rng(7).standard_normal((1, 3, 32, 32)).astype(np.float32)
    expected = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"input": x})[0]
    with vc4nn.open_device("emulator", launch=launch) as device:
        runs = run_both(path, x, device, precision=precision)
    (apart, n_apart, mem_apart, _), (together, n_together, mem_together, saved) = \
        runs[False], runs[True]
    err = rel_error(together, expected)
    assert err <= tolerance and np.argmax(together) == np.argmax(expected)
    np.testing.assert_array_equal(together, apart)
    assert saved >= 10 and n_together == n_apart - saved
    assert mem_together["arena_bytes"] == mem_apart["arena_bytes"]     # fused for no memory


def test_a_grouped_tflite_model_matches_its_float64_reference(tmp_path):
    data, x, ref = tflite_models.mobilenet_v2(32, 0.35)
    path = tmp_path / "v2.tflite"
    path.write_bytes(data)
    with vc4nn.open_device("emulator") as device:
        runs = run_both(str(path), x, device)
    got = runs[True][0].reshape(-1)
    ref = ref.reshape(-1)
    assert rel_error(got, ref) <= 1e-3
    np.testing.assert_array_equal(got, runs[False][0].reshape(-1))
    assert runs[True][1] < runs[False][1]


def test_spans_keep_every_value_read_in_them_alive_to_their_end(tmp_path):
    path = str(tmp_path / "v2.onnx")
    onnx.save(MODELS["v2"](), path)
    graph = vc4nn.runtime.loader.load_graph(path)
    base = plan_memory(graph)
    spans, plan = launch_spans(graph, lambda s: plan_memory(graph, launch_spans=s),
                               base.arena_bytes)
    assert spans and plan.arena_bytes <= base.arena_bytes
    steps = device_steps(graph)
    for start, end in spans:
        for node in steps[start:end + 1]:
            for name in node.inputs:
                if name in plan.storage:
                    assert plan.lifetimes[plan.storage[name]][1] >= end
    # No two values alive at one step share a byte (the plan stays a valid plan).
    for a in plan.lifetimes:
        for b in plan.lifetimes:
            if a < b and plan.lifetimes[a][0] <= plan.lifetimes[b][1] and \
                    plan.lifetimes[b][0] <= plan.lifetimes[a][1]:
                assert plan.offsets[a] + plan.sizes[a] <= plan.offsets[b] or \
                    plan.offsets[b] + plan.sizes[b] <= plan.offsets[a]


def test_profile_gives_a_launch_to_the_first_layer_of_each_group(tmp_path):
    path = str(tmp_path / "v1.onnx")
    onnx.save(MODELS["v1"](), path)
    with vc4nn.open_device("emulator") as device, InferenceSession(path, device=device) as sess:
        made = launches_made(device)
        records = sess.profile({"input": np.zeros((1, 3, 32, 32), np.float32)})
        del device._launch
        chained = {name: c.names[0] for c in sess._chains for name in c.names[1:]}
        assert sum(r.launches for r in records) == len(made) < len(records)
        for r in records:
            assert (r.launches == 0) == (r.name in chained)
            assert r.launched_with == chained.get(r.name, "")
            assert r.seconds == 0.0 if r.name in chained else r.seconds > 0


def test_group_launches_must_be_a_bool(tmp_path):
    path = str(tmp_path / "v1.onnx")
    onnx.save(MODELS["v1"](), path)
    with pytest.raises(InputError, match="group_launches must be True or False"):
        InferenceSession(path, group_launches="no")


def test_the_cli_shows_the_launch_groups_and_switches_them_off(tmp_path, capsys):
    from vc4nn.cli import main
    path = str(tmp_path / "v1.onnx")
    onnx.save(MODELS["v1"](), path)
    totals = {}
    for flags in ([], ["--no-group-launches"]):
        assert main(["profile", path, "--quiet", "--json"] + flags) == 0
        report = json.loads(capsys.readouterr().out)
        chained = [r["name"] for r in report["layers"] if r["launched_with"]]
        totals[bool(flags)] = (report["total"]["launches"], len(chained))
    assert totals[True] == (29, 0)                  # conv, 13 dw, 13 pw, pool, fc
    launches, chained = totals[False]
    assert launches == 29 - chained and chained >= 10
    assert main(["bench", path, "--quiet"]) == 0
    assert f"{launches} launches (mailbox path; {chained} layers ran in the launch of the " \
        f"layer before them)" in capsys.readouterr().out
