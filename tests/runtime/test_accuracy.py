"""vc4nn accuracy: the agreement counts on hand-built scores, the confidence bound against its
closed form and a published value, the photo variations, the command."""

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest

from vc4nn.runtime import InferenceSession
from vc4nn.runtime.accuracy import agreement, disagreement_bound, top_k, traced_run

from vc4nn.runtime import random_mobilenets as onnx_models

# float32's scores for one input: class 3 first, then 1, 7, 0, 9 (the top 5), then 2 (6th).
REFERENCE = np.array([6.0, 8.0, 5.0, 9.0, 0.0, 1.0, 2.0, 7.0, 3.0, 5.5])


def scores(order):
    """Scores whose ranking is ``order`` (best first); the other classes far below."""
    y = np.full(10, -10.0)
    y[list(order)] = np.arange(len(order), 0, -1, dtype=float)
    return y


def test_top_k_order_and_ties():
    assert top_k(REFERENCE, 6) == [3, 1, 7, 0, 9, 2]
    assert top_k([1.0, 2.0, 2.0, 0.0], 2) == [1, 2]          # a tie: the lower index first


@pytest.mark.parametrize("got, top1, top5, top5_set", [
    (REFERENCE, 1, 1, 1),                         # the same scores
    (scores([3, 1, 7, 0, 9]), 1, 1, 1),           # same order, other values
    (scores([9, 0, 7, 1, 3]), 0, 1, 1),           # reversed top 5: class 3 is 5th
    (scores([1, 3, 7, 0, 9]), 0, 1, 1),           # first and second swapped
    (scores([3, 1, 7, 0, 2, 9]), 1, 1, 0),        # 5th and 6th swapped
    (scores([1, 7, 0, 9, 2, 3]), 0, 0, 0),        # float32's top-1 pushed to 6th
    (scores([3, 4, 5, 6, 8]), 1, 1, 0),           # same top-1, four others new
])
def test_agreement_of_one_input(got, top1, top5, top5_set):
    assert agreement([got], [REFERENCE]) == {"inputs": 1, "top1": top1, "top5": top5,
                                             "top5_set": top5_set}


def test_agreement_counts_over_inputs():
    other = scores([0, 1, 2, 3, 4])
    got = [REFERENCE, scores([1, 3, 7, 0, 9]), scores([0, 1, 2, 3, 5])]
    expected = [REFERENCE, REFERENCE, other]
    assert agreement(got, expected) == {"inputs": 3, "top1": 2, "top5": 3, "top5_set": 2}


def test_disagreement_bound():
    # No disagreement: P(0 of n) = (1 - p)^n = 0.05.
    for n in (1, 16, 64, 299):
        assert disagreement_bound(n, n) == pytest.approx(1 - 0.05 ** (1 / n), rel=1e-9)
    assert disagreement_bound(299, 299) < 0.01 < disagreement_bound(298, 298)
    # 1 of 10 disagree: the Clopper-Pearson one-sided 95% limit, the 0.95 quantile of
    # Beta(2, 9) (scipy.stats.beta.ppf(0.95, 2, 9) = 0.394163...).
    assert disagreement_bound(9, 10) == pytest.approx(0.3941633, abs=1e-6)
    assert disagreement_bound(0, 5) == 1.0
    assert disagreement_bound(60, 64) > disagreement_bound(63, 64) > disagreement_bound(64, 64)


def test_accuracy_inputs_are_photos_then_seeded_variations():
    pytest.importorskip("skimage")
    from vc4nn.runtime.accuracy_set import PHOTOS, accuracy_inputs
    inputs = accuracy_inputs(len(PHOTOS) + 4, 48, 40, seed=3)
    labels = [label for label, _ in inputs]
    assert labels[:3] == ["chelsea", "coffee", "astronaut"]
    assert labels[len(PHOTOS):] == ["chelsea~3.0", "coffee~3.1", "astronaut~3.2", "rocket~3.3"]
    for _, frame in inputs:
        assert frame.shape == (48, 40, 3) and frame.dtype == np.uint8
    again = accuracy_inputs(len(PHOTOS) + 4, 48, 40, seed=3)
    other = accuracy_inputs(len(PHOTOS) + 4, 48, 40, seed=4)
    variations = [f for _, f in inputs[len(PHOTOS):]]
    assert all(np.array_equal(a, b) for a, (_, b) in zip(variations, again[len(PHOTOS):]))
    assert not any(np.array_equal(a, b) for a, (_, b) in zip(variations, other[len(PHOTOS):]))
    # A crop of chelsea, not the centre crop of the photo itself.
    assert not np.array_equal(variations[0], inputs[0][1])
    # Photo-like, not noise: neighbouring pixels are close (seeded uniform noise: ~85 apart).
    for frame in variations:
        x = frame.astype(float)
        assert np.mean(np.abs(np.diff(x, axis=1))) < 30 and x.std() > 5


def test_accuracy_inputs_count_below_the_photos():
    pytest.importorskip("skimage")
    from vc4nn.runtime.accuracy_set import accuracy_inputs
    assert [label for label, _ in accuracy_inputs(2, 16, 16)] == ["chelsea", "coffee"]


@pytest.fixture(scope="module")
def tiny_v1(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("acc") / "m.onnx")
    onnx.save(onnx_models.mobilenet_v1(32, 0.25), path)
    return path


def test_traced_run_matches_a_whole_run(tiny_v1, device):
    """The traced run (layer by layer, copies) gives the session's own output, and a copy of
    every device layer's output, the last one the classifier's scores."""
    frame = np.random.default_rng(1).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    with InferenceSession(tiny_v1, device=device, image_input="torchvision", progress=False,
                          replay=False) as sess:
        output, layers = traced_run(sess, {"input": frame})
        whole = sess.run(None, {"input": frame})[0].reshape(-1)
        names = [node.name for node, call in sess.steps if call is not None]
    np.testing.assert_array_equal(output, whole)
    assert list(layers) == names
    np.testing.assert_array_equal(layers[names[-1]].reshape(-1), whole)


def test_accuracy_command_text_and_options(tiny_v1, capsys):
    """The text table with its counts and bound; --launch and --board come from the shared
    device options; a bad -n is refused by argparse."""
    pytest.importorskip("skimage")
    from vc4nn.cli import main
    assert main(["accuracy", tiny_v1, "-n", "2", "--precisions", "fp16", "--launch", "direct",
                 "--board", "pi_zero", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "top-5 agree" in out and "top-5 set same" in out and "2 inputs (chelsea, coffee)" in out
    row = next(line for line in out.splitlines() if line.startswith("fp16 "))
    assert row.split()[2:5] == ["2/2", "2/2", "2/2"]
    assert "below 77.6% (top-1)" in out             # 1 - 0.05 ** (1 / 2)
    assert main(["accuracy", tiny_v1, "--json", "-n", "1", "--precisions", "fp16"]) == 0
    report = json.loads(capsys.readouterr().out)
    fp16 = report["precisions"]["fp16"]
    assert fp16["agree"] == {"inputs": 1, "top1": 1, "top5": 1, "top5_set": 1}
    assert fp16["per_input"][0]["top5"][0] == fp16["per_input"][0]["top5_fp32"][0]
    assert main(["accuracy", tiny_v1, "-n", "0"]) == 1
    assert "-n" in capsys.readouterr().err


def test_accuracy_tool_script(tiny_v1):
    """tools/accuracy.py is the same command: its help names the three agreement measures and
    a run prints the JSON report."""
    pytest.importorskip("skimage")
    tool = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "tools", "accuracy.py")
    helped = subprocess.run([sys.executable, tool, "--help"], capture_output=True, text=True)
    assert helped.returncode == 0
    for measure in ("top-1 agree", "top-5 agree", "top-5 set same", "Clopper-Pearson"):
        assert measure in helped.stdout
    ran = subprocess.run([sys.executable, tool, tiny_v1, "-n", "1", "--precisions", "auto",
                          "--json", "--quiet"], capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    report = json.loads(ran.stdout)
    assert report["inputs"] == ["chelsea"] and report["precisions"]["auto"]["agree"]["inputs"] == 1


def test_report_after_every_input(tiny_v1, device, tmp_path, capsys):
    """evaluate hands the report of the inputs done so far after each one; --save keeps the
    last one in a file; a partial report's text says how many were requested."""
    pytest.importorskip("skimage")
    from vc4nn.cli import main
    from vc4nn.runtime.accuracy import evaluate, text
    seen = []
    final = evaluate(tiny_v1, device, 2, ("fp16",), "torchvision", after_input=seen.append)
    assert [r["inputs"] for r in seen] == [["chelsea"], ["chelsea", "coffee"]]
    assert seen[-1] == final and final["precisions"]["fp16"]["agree"]["inputs"] == 2
    assert seen[0]["precisions"]["fp16"]["agree"]["inputs"] == 1
    assert "1 inputs (of 2 requested) (chelsea)" in text(seen[0])
    path = tmp_path / "report.json"
    assert main(["accuracy", tiny_v1, "-n", "2", "--precisions", "fp16", "--save", str(path),
                 "--quiet"]) == 0
    capsys.readouterr()
    saved = json.loads(path.read_text())
    assert saved["inputs"] == ["chelsea", "coffee"] and saved["inputs_requested"] == 2
    assert not (tmp_path / "report.json.part").exists()
