"""vc4nn.nn.conv2d against a direct float64 loop, with every dynamic check raising."""

import collections
import dataclasses

import numpy as np
import pytest

from asm import isa
from asm.encoding import branch_target, decode

from vc4nn.emulator.timing import Timing
from vc4nn.errors import Vc4nnError
from vc4nn.kernels import conv2d as conv2d_kernel
from vc4nn.kernels import conv2d_channels
from vc4nn.nn import PreparedConv2d, conv2d, prepare_conv2d
from vc4nn.nn.layer_args import resolve_padding

from . import spatial_reference
from .reference import assert_close

# (H, W, Cin, Cout, kernel, stride, padding, activation, bias, QPUs)
FAST = [
    (15, 14, 3, 32, 3, 2, "same", "relu6", True, 12),      # the stem, reduced
    (7, 2, 1, 1, 1, 1, "valid", None, False, 1),
    (9, 20, 5, 17, 3, 1, (1, 1, 2, 0), "relu", True, 4),   # 45 taps: two passes of 29
    (7, 7, 2, 3, 2, 3, "same", None, True, 12),             # even kernel, stride 3
]
SLOW = [
    (14, 15, 16, 8, 3, 1, "same", "relu", True, 12),
    (15, 7, 8, 16, 5, 3, "valid", "relu6", False, 4),
    (1, 1, 3, 144, 3, 2, "same", None, True, 12),
    (224, 224, 3, 32, 3, 2, "same", "relu6", True, 12),     # MobileNet v1/v2 1.0 stem
]


def run_case(device, h, w, cin, cout, k, stride, padding, activation, with_bias, qpus, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((h, w, cin)).astype(np.float32)
    wt = rng.standard_normal((k, k, cin, cout)).astype(np.float32)
    bias = rng.standard_normal(cout).astype(np.float32) if with_bias else None
    y = conv2d(x, wt, bias, stride, padding, activation, device=device, num_qpus=qpus)
    pads, _ = resolve_padding("test", padding, h, w, k, k, stride, stride)
    expected, magnitude = spatial_reference.conv2d(x, wt, bias, stride, pads, activation)
    assert_close(y, expected, magnitude, terms=k * k * cin)


@pytest.mark.parametrize("case", FAST, ids=str)
def test_conv2d_matches_the_direct_loop(device, case):
    run_case(device, *case)


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW, ids=str)
def test_conv2d_slow(device, case):
    run_case(device, *case)


def test_prepared_weights_a_second_call_and_device_buffers(device):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 5, 3)).astype(np.float32)
    w = rng.standard_normal((3, 3, 3, 20)).astype(np.float32)
    b = rng.standard_normal(20).astype(np.float32)
    prepared = prepare_conv2d(w, b, device=device)
    assert isinstance(prepared, PreparedConv2d) and prepared.nbytes == 20 * 28 * 4
    x_buf = device.array(x)
    pads, _ = resolve_padding("test", "same", 6, 5, 3, 3, 2, 2)
    expected, magnitude = spatial_reference.conv2d(x, w, b, 2, pads, "relu")
    y = conv2d(x_buf, prepared, stride=2, activation="relu")
    assert y.device is device
    assert_close(np.array(y), expected, magnitude, terms=27)
    misses = conv2d_kernel.program_for.cache_info().misses
    out = device.alloc((3, 3, 20), np.float32)
    assert conv2d(x_buf, prepared, stride=2, activation="relu", out=out) is out
    assert conv2d_kernel.program_for.cache_info().misses == misses
    assert_close(np.array(out), expected, magnitude, terms=27)
    prepared.free()


@pytest.mark.parametrize("kwargs, message", [
    (dict(w=np.zeros((3, 3, 4, 8), np.float32)), "Cout"),
    (dict(bias=np.zeros(3, np.float32)), "bias"),
    (dict(stride=-1), "stride"),
    (dict(activation="gelu"), "activation"),
    (dict(w=np.zeros((9, 9, 3, 8), np.float32), padding="valid"), "smaller"),
])
def test_bad_arguments_name_what_is_wrong(device, kwargs, message):
    args = dict(x=np.zeros((5, 5, 3), np.float32), w=np.zeros((3, 3, 3, 8), np.float32),
                device=device)
    args.update(kwargs)
    with pytest.raises(Vc4nnError, match=message):
        conv2d(**args)


# The rolled path (one pass, Cout a multiple of 8): the blocks loop over a shared 8-channel
# body; an odd count of full blocks, a block of 8 run first (Cout = 16k + 8), fp16 results.
ROLLED = [
    (9, 18, 3, 48, 3, 2, "same", None, True, "fp32"),
    (6, 7, 2, 40, 3, 1, (0, 2, 1, 0), "relu", True, "fp16"),
    (5, 17, 3, 16, 3, 2, "valid", "relu6", False, "fp16"),
    (7, 20, 3, 24, 3, 2, "same", "relu6", True, "fp32"),       # the 0.75 stem, reduced
    (4, 5, 1, 8, 2, 1, "same", None, True, "fp32"),
]


@pytest.mark.parametrize("case", ROLLED, ids=str)
def test_rolled_blocks_match_the_direct_loop(device, case):
    h, w, cin, cout, k, stride, padding, activation, with_bias, storage = case
    plan = conv2d_kernel.Conv2dPlan(h, w, cin, cout, k, k, stride, stride, (0, 0, 0, 0))
    assert plan.rolled
    rng = np.random.default_rng(cout)
    x = rng.standard_normal((h, w, cin)).astype(np.float32)
    wt = rng.standard_normal((k, k, cin, cout)).astype(np.float32)
    bias = rng.standard_normal(cout).astype(np.float32) if with_bias else None
    y = conv2d(x, wt, bias, stride, padding, activation, device=device, num_qpus=5,
               dtype=np.float16 if storage == "fp16" else None)
    assert_matches_the_direct_loop(y, x, wt, bias, stride, padding, activation, storage)


def assert_matches_the_direct_loop(y, x, wt, bias, stride, padding, activation, storage):
    """y against the float64 direct loop: float32 within the sum's rounding, fp16 within a
    half's rounding on top of it."""
    (h, w, cin), (kh, kw) = x.shape, wt.shape[:2]
    pads, _ = resolve_padding("test", padding, h, w, kh, kw, stride, stride)
    expected, magnitude = spatial_reference.conv2d(x, wt, bias, stride, pads, activation)
    if storage == "fp16":
        assert y.dtype == np.float16
        np.testing.assert_allclose(y.astype(np.float64), expected,
                                   atol=1e-2 * (1 + magnitude.max()), rtol=2 ** -10)
    else:
        assert_close(y, expected, magnitude, terms=kh * kw * cin)


def backward_branch_loops(program):
    """(first, last) instruction of every loop: a relative branch back, to its last delay slot."""
    found = []
    for i, word in enumerate(program.words):
        ins = decode(int(word))
        if ins.sig == isa.SIG_BRANCH and ins.rel and not ins.reg:
            target = branch_target(ins, isa.INSTRUCTION_BYTES * i) // isa.INSTRUCTION_BYTES
            if target <= i:
                found.append((target, i + isa.BRANCH_DELAY_SLOTS))
    return found


# Planes (x_layout "chw", an NCHW model's input copied in without a transpose): no padding in
# the kernel, so the planes come padded; the reference reads the (H, W, C) transpose.
PLANES = [
    (15, 14, 3, 32, 3, 2, "relu6", True, 12, "fp16"),      # the stem, reduced: rolled
    (9, 20, 5, 17, 3, 1, "relu", True, 4, "fp32"),         # two passes, channels past r2/r3
    (7, 7, 1, 8, 2, 3, None, False, 3, "fp32"),
]


@pytest.mark.parametrize("case", PLANES, ids=str)
def test_planes_match_the_direct_loop(device, case):
    h, w, cin, cout, k, stride, activation, with_bias, qpus, storage = case
    rng = np.random.default_rng(h * w)
    x = rng.standard_normal((h, w, cin)).astype(np.float32)
    wt = rng.standard_normal((k, k, cin, cout)).astype(np.float32)
    bias = rng.standard_normal(cout).astype(np.float32) if with_bias else None
    planes = np.ascontiguousarray(x.transpose(2, 0, 1))
    y = conv2d(planes, wt, bias, stride, "valid", activation, device=device, num_qpus=qpus,
               dtype=np.float16 if storage == "fp16" else None, x_layout="chw")
    expected, magnitude = spatial_reference.conv2d(x, wt, bias, stride, (0, 0, 0, 0),
                                                   activation)
    if storage == "fp16":
        np.testing.assert_allclose(y.astype(np.float64), expected,
                                   atol=1e-2 * (1 + magnitude.max()), rtol=2 ** -10)
    else:
        assert_close(y, expected, magnitude, terms=k * k * cin)


def test_planes_take_no_padding(device):
    planes = np.zeros((3, 6, 6), np.float32)
    with pytest.raises(Vc4nnError, match="x_layout='chw' reads no padding.*pads \\(0, 1, 0, 1\\)"):
        conv2d(planes, np.zeros((3, 3, 3, 8), np.float32), stride=2, padding="same",
               device=device, x_layout="chw")
    with pytest.raises(Vc4nnError, match="x_layout='nchw'"):
        conv2d(planes, np.zeros((3, 3, 3, 8), np.float32), device=device, x_layout="nchw")
    with pytest.raises(Vc4nnError, match="it must be \\(KH, KW, 3, Cout\\)"):
        conv2d(planes, np.zeros((3, 3, 6, 8), np.float32), padding="valid", device=device,
               x_layout="chw")


@pytest.mark.parametrize("storage", ["fp32", "fp16"])
@pytest.mark.parametrize("activation, cout", [(None, 32), ("relu6", 32), ("relu6", 24)])
def test_the_stems_loops_fit_the_instruction_cache(storage, activation, cout):
    """Every loop of the MobileNet stem's program (1.0 and 0.75), the per-group loop included,
    stays in a slice's instruction cache: at most 512 instructions (4 KB) and no more of its
    64-byte lines in one set than the set has ways (the program starts on a line). It used to
    be ~1300 instructions (each 16-channel block written out), so every group fetched its code
    again."""
    timing = Timing()
    line = timing.icache_line_bytes // isa.INSTRUCTION_BYTES
    sets = timing.icache_bytes // (timing.icache_line_bytes * timing.icache_ways)
    plan = conv2d_kernel.Conv2dPlan(224, 224, 3, cout, 3, 3, 2, 2, (0, 1, 0, 1), activation,
                                    out_storage=storage)
    planes = conv2d_kernel.Conv2dPlan(225, 225, 3, cout, 3, 3, 2, 2, (0, 0, 0, 0), activation,
                                      out_storage=storage, in_layout="chw")
    for plan in (plan, planes):
        assert_loops_fit(plan, timing, line, sets)
    if cout == 32:
        for plan in (plan, planes):
            assert_loops_fit(dataclasses.replace(plan, lanes="channels"), timing, line, sets)


def assert_loops_fit(plan, timing, line, sets):
    loops = backward_branch_loops(conv2d_kernel.program_for(plan))
    assert len(loops) >= 2                          # records, halves
    for first, last in loops:
        assert last - first + 1 <= timing.icache_bytes // isa.INSTRUCTION_BYTES
        per_set = collections.Counter(n % sets for n in range(first // line, last // line + 1))
        assert max(per_set.values()) <= timing.icache_ways, (first, last)


# Channel lanes (kernels/conv2d_channels.py, Cout 32): padding rows read the zero row, a
# right-padded last column runs a prefix of the taps (a record of it alone: 34 columns at
# stride 2), records of 1 whole pixel (no prefetching pixel), planes, fewer taps than one VPM
# read setup or than the TMU lookups in flight, one QPU (QPU 0 loads the VPM weights and
# releases nobody).
# (H, W, Cin, kernel, stride, padding, activation, storage, x_layout, QPUs)
CHANNEL_LANES = [
    (15, 14, 3, 3, 2, "same", "relu6", "fp32", "hwc", 12),     # the stem, reduced
    (15, 14, 3, 3, 2, "same", "relu6", "fp16", "hwc", 12),
    (16, 17, 3, 3, 2, "valid", "relu", "fp32", "chw", 5),
    (16, 17, 3, 3, 2, "valid", None, "fp16", "chw", 5),
    (5, 34, 3, 3, 2, (0, 1, 0, 1), "relu6", "fp16", "hwc", 1),
    (7, 9, 1, 3, 1, (1, 1, 0, 1), "relu", "fp32", "hwc", 4),
    (9, 20, 5, 1, 1, "same", None, "fp32", "hwc", 3),          # 5 taps
    (6, 7, 3, 1, 1, "valid", "relu6", "fp16", "hwc", 2),       # 3 taps
    (8, 11, 3, 2, 1, (0, 1, 0, 1), None, "fp32", "hwc", 7),    # 12 taps
    (6, 36, 3, 3, 2, (0, 1, 0, 1), "relu", "fp16", "hwc", 3),  # a record of 1 whole + edge
    (5, 35, 3, 3, 2, "valid", "relu6", "fp32", "chw", 2),      # a record of 1 whole pixel
]


@pytest.mark.parametrize("case", CHANNEL_LANES, ids=str)
def test_channel_lanes_match_the_direct_loop(device, case):
    h, w, cin, k, stride, padding, activation, storage, layout, qpus = case
    rng = np.random.default_rng(h * w + cin)
    x = rng.standard_normal((h, w, cin)).astype(np.float32)
    wt = rng.standard_normal((k, k, cin, 32)).astype(np.float32)
    bias = rng.standard_normal(32).astype(np.float32)
    given = np.ascontiguousarray(x.transpose(2, 0, 1)) if layout == "chw" else x
    y = conv2d(given, wt, bias, stride, padding, activation, device=device, num_qpus=qpus,
               dtype=np.float16 if storage == "fp16" else None, x_layout=layout,
               lanes="channels")
    assert_matches_the_direct_loop(y, x, wt, bias, stride, padding, activation, storage)


def test_auto_lanes_take_channels_for_the_stem_only():
    stem = conv2d_kernel.Conv2dPlan(224, 224, 3, 32, 3, 3, 2, 2, (0, 1, 0, 1), "relu6")
    assert conv2d_channels.fits(stem) is None
    assert "Cout 24" in conv2d_channels.fits(dataclasses.replace(stem, cout=24))
    assert "left padding" in conv2d_channels.fits(dataclasses.replace(stem, pads=(1, 1, 1, 1)))
    assert "registers" in conv2d_channels.fits(dataclasses.replace(stem, cin=4))


def test_channel_lanes_refuse_what_they_cannot_run(device):
    x = np.zeros((12, 23, 3), np.float32)
    with pytest.raises(Vc4nnError, match="channel lanes: left padding"):
        conv2d(x, np.zeros((3, 3, 3, 32), np.float32), stride=2, padding="same",
               device=device, lanes="channels")
    with pytest.raises(Vc4nnError, match="lanes='rows'"):
        conv2d(x, np.zeros((3, 3, 3, 32), np.float32), device=device, lanes="rows")
