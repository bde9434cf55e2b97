"""Bad input, generated for the public functions beyond the device (vc4nn.nn's layers and
prepare_* functions, vc4nn.InferenceSession and its methods): each argument of a call that works
is replaced in turn by wrong types, sizes, NaN/inf, empty and huge values, and the call must end
in a typed error (vc4nn.errors.Vc4nnError) whose message names the argument.

The call with the good arguments runs first in every case, so a bad value is the only change.
"""

import math

import numpy as np
import pytest

import vc4nn
import vc4nn.nn as nn

from vc4nn.runtime.image import Normalization

from .test_bad_inputs import expect_typed_error

HUGE = 1 << 70
F32 = np.float32
X = np.ones((4, 4, 16), F32)                      # an (H, W, C) activation


def bad_arrays(shape):
    """Arrays that are not a float tensor of ``shape``: other types, dtypes, ranks, empty, and
    last a strided view (which the prepare_* functions copy into their layout)."""
    return [None, "x", 5, [[1.0]], np.ones(shape, np.int32), np.ones(shape, np.float64),
            np.ones(shape + (2,), F32), np.ones((0,) + shape[1:], F32),
            np.ones(shape, F32)[..., ::2] if shape[-1] > 1 else np.ones((2,), F32)]


QPUS = [0, 13, -1, 4.5, math.nan, "12", None, HUGE]
SCALARS = [0, -1, 4.5, math.nan, math.inf, "1", None, HUGE, (1, 1, 1)]
COMMON = {"num_qpus": QPUS, "device": ["emulator", 5, object()],
          "out": ["x", 5, np.ones((4, 4, 16), F32)]}

# function -> (good arguments, {argument: bad values})
LAYERS = {
    "conv2d": (dict(x=np.ones((5, 5, 3), F32), w=np.ones((3, 3, 3, 16), F32),
                    bias=np.ones(16, F32), stride=2),
               dict(x=bad_arrays((5, 5, 3)), w=bad_arrays((3, 3, 3, 16)),
                    bias=bad_arrays((16,))[1:] + [np.ones(15, F32)], stride=SCALARS,
                    padding=["bogus", 5, (1,), (-1, -1, -1, -1), (HUGE,) * 4],
                    activation=["sigmoid", 5], dtype=[object, "U4", np.int32, "frob"])),
    "depthwise": (dict(x=X, w=np.ones((3, 3, 16), F32), bias=np.ones(16, F32)),
                  dict(x=bad_arrays((4, 4, 16)), w=bad_arrays((3, 3, 16)) + [
                      np.ones((5, 5, 16), F32), np.ones((3, 3, 8), F32)],
                      bias=bad_arrays((16,))[1:] + [np.ones(15, F32)], stride=SCALARS,
                      padding=["bogus", 5, (-1, -1, -1, -1)], activation=["sigmoid", 5],
                      tiling=["x", 5, object(), {"frob": 1}], dtype=[object, "U4", np.int32])),
    "pointwise": (dict(x=X, w=np.ones((16, 32), F32), bias=np.ones(32, F32)),
                  dict(x=bad_arrays((4, 4, 16)), w=bad_arrays((16, 32)) + [
                      np.ones((8, 32), F32)], bias=bad_arrays((32,))[1:] + [np.ones(31, F32)],
                      residual=["x", 5, np.ones((4, 4, 16), F32), np.ones((4, 4, 32), F32)[1:]],
                      activation=["sigmoid", 5], tiling=["x", 5, object()])),
    "fully_connected": (dict(x=np.ones(64, F32), w=np.ones((64, 10), F32),
                             bias=np.ones(10, F32)),
                        dict(x=[None, "x", 5, np.ones(64, np.int32), np.ones(0, F32),
                                np.ones(63, F32)],
                             w=bad_arrays((64, 10))[:-1] + [np.ones((63, 10), F32)],
                             bias=bad_arrays((10,))[1:] + [np.ones(9, F32)],
                             activation=["sigmoid", 5])),
    "avg_pool": (dict(x=X, size=2, stride=2),
                 dict(x=bad_arrays((4, 4, 16)), size=SCALARS + [(2,)], stride=SCALARS,
                      padding=["bogus", 5], tiling=["x", 5], dtype=[object, np.int32])),
    "global_avg_pool": (dict(x=X), dict(x=bad_arrays((4, 4, 16)), dtype=[object, np.int32])),
    "add": (dict(a=X, b=X), dict(a=bad_arrays((4, 4, 16)), b=bad_arrays((4, 4, 16)) + [
        np.ones((4, 4, 8), F32)], activation=["sigmoid", 5], dtype=[object, np.int32])),
    "prepare_conv2d": (dict(w=np.ones((3, 3, 3, 16), F32)),
                       dict(w=bad_arrays((3, 3, 3, 16))[:-1], bias=["x", np.ones(15, F32)],
                            taps_per_pass=[-1, 4.5, "x", math.nan, HUGE],
                            placement=["x", 5])),
    "prepare_depthwise": (dict(w=np.ones((3, 3, 16), F32)),
                          dict(w=bad_arrays((3, 3, 16))[:-1], bias=["x", np.ones(15, F32)],
                               placement=["x", 5])),
    "prepare_pointwise": (dict(w=np.ones((16, 32), F32)),
                          dict(w=bad_arrays((16, 32))[:-1], bias=["x", np.ones(31, F32)],
                               placement=["x", 5])),
    "prepare_fully_connected": (dict(w=np.ones((64, 10), F32)),
                                dict(w=bad_arrays((64, 10))[:-1], bias=["x", np.ones(9, F32)],
                                     placement=["x", 5])),
}
# A size too large for the input is named by what it makes: a window bigger than the input.
NAMED_AS = {("avg_pool", "size"): ("window",)}
CASES = [(name, argument) for name, (good, bad) in LAYERS.items()
         for argument in list(bad) + [a for a in COMMON if not name.startswith("prepare")
                                      or a == "device"]]


@pytest.fixture(scope="module")
def device():
    with vc4nn.open_device("emulator") as d:
        yield d


@pytest.mark.parametrize("name, argument", CASES)
def test_layer_functions_refuse_bad_arguments_by_name(name, argument, device):
    function = getattr(nn, name)
    good, bad = LAYERS[name]
    function(**good, device=device)
    values = bad[argument] if argument in bad else COMMON[argument]
    for value in values:
        if argument == "out" and name in ("fully_connected", "conv2d") and value is not None \
                and getattr(value, "shape", None) == X.shape:
            continue        # a host array where a device buffer belongs: covered by "x"/5
        kwargs = dict(good, device=device)
        kwargs[argument] = value
        expect_typed_error(lambda: function(**kwargs), argument,
                           also=NAMED_AS.get((name, argument), ()))


# -- InferenceSession -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    onnx = pytest.importorskip("onnx")
    from vc4nn.runtime.random_mobilenets import mobilenet_v1
    path = tmp_path_factory.mktemp("model") / "tiny.onnx"
    onnx.save(mobilenet_v1(size=32, width=0.25), str(path))
    return str(path)


SESSION_CASES = {
    "path": [5, None, b"x", "/nonexistent.onnx", "/dev/zero", "/"],
    "device": ["emulator", 5],
    "num_qpus": [0, 13, math.nan, "12", None, 4.5, HUGE],
    "image_input": ["bogus", 5, [], "TFLITE", ((0, 0, 0), (1, 1, 1)),
                    Normalization((0, 0), (1, 1)), Normalization(("a", "b", "c"), (1, 1, 1)),
                    Normalization((0, 0, 0), (0, 1, 1)), Normalization((0, math.nan, 0), (1,) * 3),
                    Normalization(0, 1)],
    "progress": ["bar", 5],
    "replay": ["yes", 5, None],
    "memory_budget": [-1, 0, math.nan, math.inf, "24"],
    "precision": ["fp64", 5, None],
    "tolerance": [math.nan, -1, 0, "0.01", None],
    "calibration": ["x", 5, [5]],
    "launch": ["fast", 5],
}
# A file that cannot be read is named by its path.
SESSION_NAMED_AS = {"path": ("/nonexistent.onnx", "/dev/zero", "(in /)")}


@pytest.mark.parametrize("argument", sorted(SESSION_CASES))
def test_inference_session_refuses_bad_options_by_name(argument, tiny_model, device):
    vc4nn.InferenceSession(tiny_model, device=device, progress=False).close()
    for value in SESSION_CASES[argument]:
        kwargs = dict(path=tiny_model, device=device, progress=False)
        kwargs[argument] = value
        expect_typed_error(lambda: vc4nn.InferenceSession(**kwargs).close(), argument,
                           also=SESSION_NAMED_AS.get(argument, ()))


def test_inference_session_run_refuses_bad_feeds_and_a_closed_session(tiny_model, device):
    session = vc4nn.InferenceSession(tiny_model, device=device, progress=False)
    x = np.ones((1, 3, 32, 32), F32)
    reference = session.run(None, {"input": x})[0]
    for names in (5, "x", ["nope"], [5]):
        expect_typed_error(lambda: session.run(names, {"input": x}), "output")
    for feed in (None, 5, [x], {}, {"nope": x}, {"input": x, "extra": x}):
        expect_typed_error(lambda: session.run(None, feed), "run() takes")
    for value in ("x", x[0], x.astype(np.float64), x.astype(np.int32),
                  np.zeros((1, 3, 0, 32), F32), x[..., ::2]):
        expect_typed_error(lambda: session.run(None, {"input": value}), "input")
        expect_typed_error(lambda: session.profile({"input": value}), "input")
    # the refusals left the session as it was
    assert np.array_equal(session.run(None, {"input": x})[0], reference)
    session.close()
    expect_typed_error(lambda: session.run(None, {"input": x}), "closed")


# -- the subcommands that run networks -----------------------------------------------------------

@pytest.fixture
def photo(tmp_path):
    image = pytest.importorskip("PIL.Image")
    path = tmp_path / "photo.png"
    image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(path)
    return str(path)


NETWORK_OPTIONS = {"--alpha": ["nan", "-1", "0", "5", "x"], "--size": ["0", "-5", "5000", "x"],
                   "--qpus": ["0", "13", "nan"], "--pixels": ["-1", "x"]}


@pytest.mark.parametrize("command", ["bench-layers", "tune"])
def test_layer_tools_refuse_bad_numbers_before_running(command, capsys):
    from .test_bad_inputs import cli_error
    cases = dict(NETWORK_OPTIONS, **({"--rows": ["-1", "x"]} if command == "bench-layers" else {}))
    for option, values in cases.items():
        for value in values:
            err = cli_error([command, option, value, "--only", "nope"], capsys)
            assert f"argument {option}:" in err, (option, value, err)


def test_model_commands_refuse_bad_values(tiny_model, photo, tmp_path, capsys):
    from .test_bad_inputs import cli_error
    binary = tmp_path / "labels.bin"
    binary.write_bytes(b"\xff\xfe\x00" * 10)
    cases = [(["classify", tiny_model, photo, "--top", "-1"], "--top"),
             (["classify", tiny_model, photo, "--top", "0"], "--top"),
             (["classify", tiny_model, photo, "--labels", "/dev/zero"], "not a regular file"),
             (["classify", tiny_model, photo, "--labels", str(binary)], "not UTF-8"),
             (["classify", tiny_model, photo, "--memory-budget", "nan"], "memory_budget"),
             (["classify", tiny_model, photo, "--memory-budget", "-1"], "memory_budget"),
             (["classify", tiny_model, "/dev/zero"], "/dev/zero"),
             (["classify", "/dev/zero", photo], "not a regular file"),
             (["profile", "/dev/zero"], "not a regular file"),
             (["profile", tiny_model, "--png", "/nonexistent/p.png"], "argument --png"),
             (["bench-layers", "--png", str(tmp_path)], "is a folder"),
             (["bench-layers", "--save", "/nonexistent/r.json"], "argument --save"),
             (["bench", tiny_model, "--runs", "0"], "--runs"),
             (["bench", tiny_model, "--runs", "-1"], "--runs"),
             (["accuracy", tiny_model, "--seed", "-1"], "--seed"),
             (["bench-layers", "--boards", ",,"], "names no board"),
             (["bench-layers", "--net", ","], "no network named"),
             (["ops", "extra"], "unrecognized"),
             (["export-mobilenet-v2", str(tmp_path / "o.onnx"), "--weights", str(binary)],
              "not a readable PyTorch checkpoint"),
             (["export-mobilenet-v2", str(tmp_path / "o.onnx"), "--weights", "/dev/zero"],
              "not a regular file"),
             (["demo", "--image", str(binary)], "cannot read the image"),
             (["demo", "--image", "/nonexistent.png"], "cannot read the image")]
    for argv, fragment in cases:
        quiet = ["--quiet"] if argv[0] in ("classify", "profile", "bench") else []
        assert fragment in cli_error(argv + quiet, capsys), argv


# The subcommands whose bad inputs the tests above and tests/cli/test_bad_inputs.py generate; a
# new subcommand fails this test until its bad inputs are tested too.
COVERED = {"asm", "assemble", "disasm", "doctor", "run", "sgemm", "classify", "profile", "bench",
           "accuracy", "ops", "export-mobilenet-v2", "demo", "bench-layers", "tune"}


def test_every_subcommand_has_its_bad_inputs_tested():
    from .test_vc4nn_cli import subcommands
    assert set(subcommands()) == COVERED
