"""vc4nn.nn.depthwise against a direct float64 loop (tests/nn/spatial_reference.py), with every
dynamic check of the emulator raising."""

import random

import numpy as np
import pytest

from vc4nn.errors import Vc4nnError
from vc4nn.kernels.window import program_for
from vc4nn.kernels.window_plan import PlanError, make_plan
from vc4nn.nn import PreparedDepthwise, depthwise, prepare_depthwise
from vc4nn.nn.layer_args import LayerArgumentError, resolve_padding

from . import spatial_reference
from .reference import assert_close

# (H, W, C, stride, padding, activation, bias, QPUs): every H/W in {1, 2, 7, 14, 15}, every C in
# {1, 3, 8, 16, 17, 32, 144}, both strides, each padding form, each activation, with and without
# bias, on 1, 4 and 12 QPUs, appear at least once.
FAST = [
    (1, 1, 1, 1, "same", None, False, 1),
    (2, 2, 3, 2, "same", "relu", True, 12),
    (7, 7, 17, 2, "valid", "relu6", True, 4),
    (7, 14, 8, 1, (0, 2, 1, 0), None, True, 12),
    (15, 7, 16, 1, "valid", "relu", False, 4),
    (14, 7, 32, 2, (2, 1, 0, 2), "relu6", False, 1),
    (2, 15, 144, 1, "same", None, True, 12),
    (15, 14, 17, 1, "same", "relu6", True, 12),
]


def run_case(device, h, w, c, stride, padding, activation, with_bias, qpus, seed=0, **options):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((h, w, c)).astype(np.float32)
    wt = rng.standard_normal((3, 3, c)).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float32) if with_bias else None
    y = depthwise(x, wt, bias, stride=stride, padding=padding, activation=activation,
                  device=device, num_qpus=qpus, **options)
    pads, _ = resolve_padding("test", padding, h, w, 3, 3, stride, stride)
    expected, magnitude = spatial_reference.depthwise(x, wt, bias, stride, pads, activation)
    assert_close(y, expected, magnitude, terms=9)
    return x, wt, bias, y


@pytest.mark.parametrize("case", FAST, ids=str)
def test_depthwise_matches_the_direct_loop(device, case):
    run_case(device, *case)


def fits(h, w, stride, padding):
    try:
        resolve_padding("test", padding, h, w, 3, 3, stride, stride)
    except Vc4nnError:
        return False
    return True


def slow_grid(count=40, seed=12):
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        cases.append((rng.choice((1, 2, 7, 14, 15)), rng.choice((1, 2, 7, 14, 15)),
                      rng.choice((1, 3, 8, 16, 17, 32, 144)), rng.choice((1, 2)),
                      rng.choice(("same", "valid", (1, 1, 1, 1), (0, 2, 2, 0))),
                      rng.choice((None, "relu", "relu6")), rng.choice((True, False)),
                      rng.choice((1, 4, 12))))
    cases = [c for c in cases if fits(*c[:2], c[3], c[4])]
    return cases + [(112, 112, 32, 1, "same", "relu6", True, 12),
                    (112, 112, 64, 2, "same", "relu6", True, 12)]


@pytest.mark.slow
@pytest.mark.parametrize("case", slow_grid(), ids=str)
def test_depthwise_grid(device, case):
    if case[0] == 112 and device.name != "emulator":
        pytest.skip("emulator-sized case")
    run_case(device, *case)


@pytest.mark.parametrize("tiling", [dict(tile_cols=3, tile_rows=2, in_chunk=1, out_chunk=2),
                                    dict(tile_cols=5, in_chunk=3, out_chunk=5)], ids=str)
def test_every_tiling_gives_the_same_result(device, tiling):
    run_case(device, 9, 11, 20, 1, "same", "relu", True, 4, tiling=tiling)


def test_a_second_call_reuses_the_program(device):
    pads, _ = resolve_padding("test", "same", 7, 7, 3, 3, 2, 2)
    plan = make_plan("depthwise", 7, 7, 17, (3, 3), (2, 2), pads, "relu6", 4)
    program = program_for(plan)
    hits = program_for.cache_info().hits
    run_case(device, 7, 7, 17, 2, "same", "relu6", True, 4)
    run_case(device, 7, 7, 17, 2, "same", "relu6", True, 4, seed=1)
    assert program_for.cache_info().hits == hits + 2
    assert program_for(plan) is program


def test_prepared_weights_and_device_buffers(device):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((7, 5, 19)).astype(np.float32)
    w = rng.standard_normal((3, 3, 19)).astype(np.float32)
    b = rng.standard_normal(19).astype(np.float32)
    prepared = prepare_depthwise(w, b, device=device)
    assert isinstance(prepared, PreparedDepthwise)
    assert prepared.nbytes == (9 + 1) * 32 * 4
    x_buf = device.array(x)
    out = device.alloc((7, 5, 19), np.float32)
    result = depthwise(x_buf, prepared, stride=1, activation="relu", out=out)
    assert result is out
    expected, magnitude = spatial_reference.depthwise(x, w, b, 1, (1, 1, 1, 1), "relu")
    assert_close(np.array(out), expected, magnitude, terms=9)
    y = depthwise(x_buf, prepared, stride=2, padding="valid")
    assert y.device is device and y.shape == (3, 2, 19)
    expected, magnitude = spatial_reference.depthwise(x, w, b, 2, (0, 0, 0, 0), None)
    assert_close(np.array(y), expected, magnitude, terms=9)
    prepared.free()


@pytest.mark.parametrize("call, message", [
    (lambda x, w, d: depthwise(x, w[:2], device=d), "(3, 3, C)"),
    (lambda x, w, d: depthwise(x, w[:, :, :3], device=d), "channels"),
    (lambda x, w, d: depthwise(x, w, activation="tanh", device=d), "activation"),
    (lambda x, w, d: depthwise(x, w, stride=0, device=d), "stride"),
    (lambda x, w, d: depthwise(x, w, padding=(3, 0, 0, 0), device=d), "padding"),
    (lambda x, w, d: depthwise(x, w, bias=np.zeros(3, np.float32), device=d), "bias"),
    (lambda x, w, d: depthwise(x.astype(np.float64), w, device=d), "dtype"),
])
def test_bad_arguments_name_what_is_wrong(device, call, message):
    x = np.zeros((4, 4, 5), np.float32)
    w = np.zeros((3, 3, 5), np.float32)
    with pytest.raises(Vc4nnError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call(x, w, device)


def test_a_tiling_past_the_vpm_is_refused():
    with pytest.raises(PlanError, match="VPM rows"):
        make_plan("depthwise", 56, 56, 64, (3, 3), (1, 1), (1, 1, 1, 1), None, 12,
                  in_chunk=8, out_chunk=8, max_qpus=12)
    with pytest.raises(PlanError, match="registers"):
        make_plan("depthwise", 14, 14, 16, (3, 3), (1, 1), (1, 1, 1, 1), None, 12,
                  tile_cols=12, split_accumulators=0)
    with pytest.raises(PlanError, match="registers"):   # split: 3 rows x 14 columns at most
        make_plan("depthwise", 16, 16, 16, (3, 3), (1, 1), (1, 1, 1, 1), None, 12,
                  tile_cols=15)
    with pytest.raises(LayerArgumentError):
        depthwise(np.zeros((2, 2, 1), np.float32), np.zeros((3, 3, 1), np.float32),
                  padding="full", device=object())
