"""fp16 storage in the sliding-window kernels (depthwise, avg_pool): activations and weights
stored as halves, float32 arithmetic. Against the direct float64 loops of
tests/nn/spatial_reference.py applied to the same half-rounded inputs."""

import numpy as np
import pytest

from vc4nn.linalg import DtypeError, ShapeError
from vc4nn.nn import avg_pool, conv2d, depthwise, prepare_depthwise
from vc4nn.nn.layer_args import resolve_padding

from . import spatial_reference
from .reference import assert_close, assert_close_fp16

F16, F32 = np.float16, np.float32

# (H, W, C, stride, padding, activation, bias, QPUs, x dtype, w dtype, result dtype): C in
# {1, 17, 144} (a block of 16 channels with 1 or 15 lanes past the end), both strides, every
# padding form, each storage of each tensor at least once.
DEPTHWISE = [
    (1, 1, 1, 1, "same", None, False, 1, F16, F16, F16),
    (7, 9, 17, 1, "same", "relu6", True, 12, F16, F32, F16),
    (9, 7, 17, 2, "same", "relu", True, 4, F16, F16, F32),
    (6, 5, 144, 2, "valid", None, True, 12, F32, F16, F16),
    (5, 8, 144, 1, (0, 2, 1, 0), "relu6", False, 12, F16, F16, F16),
    (8, 3, 33, 2, (2, 1, 0, 2), None, True, 1, F32, F32, F16),
]


def halves(rng, shape, dtype):
    """Random values that are exact in ``dtype``."""
    return rng.standard_normal(shape).astype(dtype)


def check(y, expected, magnitude, terms):
    if y.dtype == F16:
        assert_close_fp16(y, expected, magnitude, terms)
    else:
        assert_close(y, expected, magnitude, terms)


@pytest.mark.parametrize("case", DEPTHWISE, ids=str)
def test_depthwise_fp16_storage(device, case):
    h, w, c, stride, padding, activation, with_bias, qpus, xd, wd, yd = case
    rng = np.random.default_rng(c)
    x, wt = halves(rng, (h, w, c), xd), halves(rng, (3, 3, c), wd)
    bias = halves(rng, c, wd) if with_bias else None
    y = depthwise(x, wt, bias, stride=stride, padding=padding, activation=activation,
                  device=device, num_qpus=qpus, dtype=yd)
    assert y.dtype == yd
    pads, _ = resolve_padding("test", padding, h, w, 3, 3, stride, stride)
    expected, magnitude = spatial_reference.depthwise(x, wt, bias, stride, pads, activation)
    check(y, expected, magnitude, terms=9)


def test_depthwise_fp16_buffers_in_place(device):
    """Device buffers: the result lands in an fp16 ``out``, and a prepared fp16 weight table
    holds half the bytes of a float32 one."""
    rng = np.random.default_rng(5)
    x = device.array(halves(rng, (6, 6, 40), F16))
    wt, bias = halves(rng, (3, 3, 40), F16), halves(rng, 40, F16)
    prepared = prepare_depthwise(wt, bias, device=device)
    assert prepared.nbytes == 10 * 48 * 2
    out = device.alloc((6, 6, 40), F16)
    y = depthwise(x, prepared, activation="relu", out=out)
    assert y is out
    expected, magnitude = spatial_reference.depthwise(np.asarray(x), wt, bias, 1,
                                                      (1, 1, 1, 1), "relu")
    assert_close_fp16(np.array(out), expected, magnitude, terms=9)
    prepared.free()


def test_fp16_result_saturates_and_flushes(device):
    """Outside the halves' range the pack gives inf; below the smallest normal half, 0."""
    x = np.zeros((3, 3, 2), F16)
    x[1, 1] = [60000.0, 1e-3]
    wt = np.zeros((3, 3, 2), F32)
    wt[1, 1] = [4.0, 1e-3]                       # 240000 and 1e-6
    y = depthwise(x, wt, padding="same", device=device, dtype=F16)
    assert np.isposinf(y[1, 1, 0]) and y[1, 1, 1] == 0


# (H, W, C, size, stride, padding, QPUs, x dtype, result dtype)
AVG_POOL = [
    (7, 7, 17, 7, 1, "valid", 1, F16, F16),
    (7, 14, 1, 3, 2, "same", 4, F16, F32),
    (15, 2, 144, (2, 1), (1, 2), (1, 0, 0, 0), 12, F32, F16),
]


@pytest.mark.parametrize("case", AVG_POOL, ids=str)
def test_avg_pool_fp16_storage(device, case):
    h, w, c, size, stride, padding, qpus, xd, yd = case
    x = halves(np.random.default_rng(3), (h, w, c), xd)
    y = avg_pool(x, size, stride, padding, device=device, num_qpus=qpus, dtype=yd)
    size2 = size if isinstance(size, tuple) else (size, size)
    stride2 = stride if isinstance(stride, tuple) else (stride, stride)
    pads, _ = resolve_padding("test", padding, h, w, *size2, *stride2)
    expected, magnitude = spatial_reference.avg_pool(x, size2, stride2, pads)
    check(y, expected, magnitude, terms=size2[0] * size2[1] + 2)


def test_storage_errors_name_the_argument(device):
    x16 = np.zeros((4, 4, 3), F16)
    w = np.zeros((3, 3, 3), F32)
    with pytest.raises(DtypeError, match="x has dtype float64"):
        depthwise(np.zeros((4, 4, 3)), w, device=device)
    with pytest.raises(DtypeError, match="w has dtype int32"):
        depthwise(x16, np.zeros((3, 3, 3), np.int32), device=device)
    with pytest.raises(DtypeError, match="dtype='fp8'"):
        avg_pool(x16, 2, 2, device=device, dtype="fp8")
    out = device.alloc((4, 4, 3), F32)
    with pytest.raises(DtypeError, match="dtype=.*out has dtype float32"):
        depthwise(x16, w, out=out, device=device, dtype=F16)
    device.free(out)
    out = device.alloc((4, 4, 2), F16)
    with pytest.raises(ShapeError, match="out has shape"):
        depthwise(x16, w, out=out, device=device)
    device.free(out)


@pytest.mark.parametrize("h, w, cin, cout, stride, padding, wd", [
    (9, 11, 3, 17, 2, "same", F16),          # the stem's shape, reduced: 17 = 16 + 1 channels
    (5, 6, 2, 32, 1, (1, 0, 0, 1), F32),
])
def test_conv2d_fp16_result(device, h, w, cin, cout, stride, padding, wd):
    """conv2d reads float32 (the network input) and stores its result as halves."""
    rng = np.random.default_rng(cout)
    x, wt, bias = halves(rng, (h, w, cin), F32), halves(rng, (3, 3, cin, cout), wd), \
        halves(rng, cout, wd)
    y = conv2d(x, wt, bias, stride, padding, "relu6", device=device, dtype=F16)
    pads, _ = resolve_padding("test", padding, h, w, 3, 3, stride, stride)
    expected, magnitude = spatial_reference.conv2d(x, wt, bias, stride, pads, "relu6")
    assert_close_fp16(y, expected, magnitude, terms=9 * cin)


def test_conv2d_reads_float32_only(device):
    with pytest.raises(DtypeError, match="x has dtype float16"):
        conv2d(np.zeros((4, 4, 3), F16), np.zeros((3, 3, 3, 4), F32), device=device)
