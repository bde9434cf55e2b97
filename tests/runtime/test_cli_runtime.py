"""The runtime's CLI commands, run with the numpy stand-in for the kernels (the device tests run
them on the QPU kernels)."""

import json
import os

import numpy as np
import onnx
import pytest

import vc4nn
from vc4nn.cli import main
from vc4nn.runtime.bench import PI_ZERO_HOST_FACTOR
from vc4nn.runtime import random_mobilenets as onnx_models


@pytest.fixture
def model_path(tmp_path):
    path = str(tmp_path / "m.onnx")
    onnx.save(onnx_models.mobilenet_v1(32, 0.25, classes=3), path)
    return path


@pytest.fixture
def image_path(tmp_path):
    PIL = pytest.importorskip("PIL.Image")
    path = str(tmp_path / "img.png")
    rng = np.random.default_rng(0)
    PIL.fromarray(rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)).save(path)
    return path


def test_classify_with_labels_file(fake_layers, model_path, image_path, tmp_path, capsys):
    labels = tmp_path / "labels.txt"
    labels.write_text("ant\nbee\ncat\n")
    assert main(["classify", model_path, image_path, "--top", "2", "--labels", str(labels),
                 "--quiet"]) == 0
    out = capsys.readouterr().out
    ranked = [line for line in out.splitlines() if line.lstrip()[:2] in ("1.", "2.")]
    assert len(ranked) == 2 and all(line.split()[-1] in ("ant", "bee", "cat") for line in ranked)
    assert "cycle-model estimate" in out and "MHz" in out


def test_classify_labels_file_of_wrong_length(fake_layers, model_path, image_path, tmp_path,
                                              capsys):
    labels = tmp_path / "labels.txt"
    labels.write_text("ant\nbee\n")
    assert main(["classify", model_path, image_path, "--labels", str(labels),
                 "--quiet"]) == 1
    assert "2 labels; the model has 3 classes" in capsys.readouterr().err


def test_profile_json_and_png(fake_layers, model_path, tmp_path, capsys):
    png = tmp_path / "p.png"
    assert main(["profile", model_path, "--json", "--png", str(png), "--quiet"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["op"] for r in report["layers"]][:3] == ["conv2d", "depthwise", "pointwise"]
    assert report["memory"]["arena_bytes"] > 0 and png.read_bytes()[:4] == b"\x89PNG"


def test_bench_reports_estimates(fake_layers, model_path, capsys):
    assert main(["bench", model_path, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "cycle-model estimate" in out and "Pi Zero" in out and "GPU memory" in out


def test_bench_per_launch_path(fake_layers, model_path, capsys):
    """--launch picks the path; the empty-launch probe differs by the two documented overheads
    (100 us mailbox, 5 us direct: facts §3 and the GPU_FFT calibration)."""
    probes = {}
    for launch in ("mailbox", "direct"):
        assert main(["bench", model_path, "--quiet", "--json", "--launch", launch]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["launch_path"] == launch
        probes[launch] = report["launch_probe"]["device_seconds"]
        # the Pi Zero host estimate counts the runtime's work and the Pi backend's launch code
        assert report["backend_host_seconds_this_machine"] >= 0
        assert report["host_seconds_pi_zero_estimate"] == pytest.approx(
            (report["host_seconds_this_machine"] + report["backend_host_seconds_this_machine"])
            * PI_ZERO_HOST_FACTOR)
        assert report["emulation_cpu_seconds"] > 0        # the emulated run's CPU, reported
        assert any("s of CPU here" in line for line in report["lines"])
    assert probes["mailbox"] - probes["direct"] == pytest.approx(95e-6)
    assert main(["bench", model_path, "--quiet", "--launch", "direct"]) == 0
    out = capsys.readouterr().out
    assert "launches (direct path)" in out and "direct launch overhead included" in out
    assert main(["bench", model_path, "--launch", "fast"]) == 1     # a usage error: status 1
    assert "invalid choice: 'fast'" in capsys.readouterr().err


def test_session_launch_must_match_its_device(fake_layers, model_path):
    from vc4nn.errors import DeviceError
    from vc4nn.runtime.session import InferenceSession
    with InferenceSession(model_path, launch="direct", progress=False) as sess:
        assert sess.device.launch_path == "direct"
    with vc4nn.open_device("emulator") as dev:
        with pytest.raises(DeviceError, match="launch='direct' but the emulator device given "
                                              "launches by the mailbox path"):
            InferenceSession(model_path, device=dev, launch="direct", progress=False)


def test_unsupported_model_is_one_line(model_path, tmp_path, capsys):
    model = onnx.load(model_path)
    model.graph.node[0].op_type = "ConvTranspose"
    bad = str(tmp_path / "bad.onnx")
    onnx.save(model, bad)
    assert main(["bench", bad]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ConvTranspose" in err and "bad.onnx" in err


def test_ops_lists_both_formats(capsys):
    assert main(["ops"]) == 0
    out = capsys.readouterr().out
    assert "DEPTHWISE_CONV_2D" in out and "BatchNormalization" in out


def test_imagenet_names_come_from_the_package():
    from vc4nn.runtime.image import class_names
    names = class_names(1001)
    assert names[0] == "background" and "tabby" in names[282]
    assert "tabby" in class_names(1000)[281]


def test_demo_exports_the_model_once_and_classifies_the_cat(tmp_path, monkeypatch):
    """`vc4nn demo` is `vc4nn classify` on torchvision's MobileNetV2 (exported once into the
    model cache) and scikit-image's chelsea.png; the run itself is the slow real-model test."""
    from vc4nn.runtime import cli, demo, mobilenet_v2
    from vc4nn.runtime.errors import ModelError
    try:
        mobilenet_v2.weights_path()
    except ModelError as error:
        pytest.skip(str(error))
    pytest.importorskip("skimage")
    monkeypatch.setenv(demo.ENV_VAR, str(tmp_path / "models"))
    calls = []
    monkeypatch.setattr(cli, "classify_main", lambda argv: calls.append(argv) or 0)
    assert cli.main("demo", ["--qpus", "4"]) == 0
    model, image = calls[0][:2]
    assert model == str(tmp_path / "models" / demo.MODEL_FILE)
    graph = onnx.load(model).graph
    assert graph.input[0].name == "input" and len(graph.node) > 100
    assert os.path.basename(image) == "chelsea.png" and os.path.exists(image)
    assert calls[0][2:] == ["--normalization", "torchvision", "--qpus", "4"]
    monkeypatch.setattr(mobilenet_v2, "export_mobilenet_v2", lambda *a: pytest.fail("again"))
    assert cli.main("demo", []) == 0 and calls[1][0] == model
