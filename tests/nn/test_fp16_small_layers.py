"""fp16 storage in add, global_avg_pool and fully_connected's input: tensors stored as halves,
float32 arithmetic. Against float64 loops applied to the same half-rounded inputs, with odd
channel counts (a half's lane shares its word with a neighbour, or with the bytes past the
tensor), 1 and 12 QPUs and every mix of storages."""

import numpy as np
import pytest

from vc4nn.linalg import DtypeError, ShapeError
from vc4nn.nn import add, fully_connected, global_avg_pool, prepare_fully_connected

from .reference import activate, assert_close, assert_close_fp16

F16, F32 = np.float16, np.float32


def values(rng, shape, dtype, scale=3.0):
    """Random values that are exact in ``dtype``."""
    return (scale * rng.standard_normal(shape)).astype(dtype)


def check(y, expected, magnitude, terms):
    if y.dtype == F16:
        assert_close_fp16(y, expected, magnitude, terms)
    else:
        assert_close(y, expected, magnitude, terms)


# (shape, a dtype, b dtype, dtype=, activation, QPUs, expected result dtype): sizes with a
# partial vector (1, 17, 33, odd H*W*C) and whole blocks of 64 (144 x 4).
ADD = [
    ((1,), F16, F16, None, None, 1, F16),
    ((3, 5, 17), F16, F16, None, "relu6", 12, F16),
    ((7, 3, 33), F16, F32, None, "relu", 12, F32),
    ((2, 2, 144), F32, F16, F16, None, 1, F16),
    ((5, 1, 144), F16, F16, F32, "relu", 12, F32),
    ((9, 7, 1), F32, F32, F16, "relu6", 12, F16),
]


def add_reference(a, b, activation):
    expected = np.empty(a.shape)
    flat_a, flat_b, flat_e = a.reshape(-1), b.reshape(-1), expected.reshape(-1)
    for i in range(flat_a.size):
        flat_e[i] = float(flat_a[i]) + float(flat_b[i])
    return activate(expected, activation), np.abs(a.astype(np.float64)) + np.abs(b)


@pytest.mark.parametrize("case", ADD, ids=str)
def test_add_fp16_storage(device, case):
    shape, ad, bd, dtype, activation, qpus, yd = case
    rng = np.random.default_rng(len(shape) + shape[-1])
    a, b = values(rng, shape, ad), values(rng, shape, bd)
    y = add(a, b, activation, device=device, num_qpus=qpus, dtype=dtype)
    assert y.dtype == yd
    check(y, *add_reference(a, b, activation), terms=1)


def test_add_fp16_buffers_in_place(device):
    """Device buffers, the result written over a (the runtime's in-place residual), and a view
    that starts 2 bytes into its buffer (so its halves pair up the other way in words)."""
    rng = np.random.default_rng(4)
    a, b = values(rng, (4, 5, 17), F16), values(rng, (341,), F16)
    expected, magnitude = add_reference(a, b[1:].reshape(a.shape), "relu")
    a_buf, b_buf = device.array(a), device.array(b)
    y = add(a_buf, b_buf[1:].reshape(a.shape), "relu", out=a_buf)
    assert y is a_buf
    assert_close_fp16(np.array(a_buf), expected, magnitude, terms=1)
    device.free(a_buf)
    device.free(b_buf)


def test_add_saturates_and_flushes(device):
    a = np.array([60000.0, 1e-4, -60000.0], F16)
    b = np.array([10000.0, -0.99e-4, 1.0], F16)
    y = add(a, b, device=device)
    assert np.isposinf(y[0]) and y[1] == 0 and y[2] == F16(-59999.0)


# (H, W, C, x dtype, dtype=, QPUs, expected result dtype): C even and odd (odd C moves each
# pixel's halves across word boundaries), pixel counts below, at and past the gathers ahead.
POOL = [
    (1, 1, 1, F16, None, 1, F16),
    (7, 7, 17, F16, None, 12, F16),
    (3, 5, 33, F16, F32, 12, F32),
    (5, 3, 144, F32, F16, 1, F16),
    (2, 3, 16, F16, F16, 4, F16),
    (9, 9, 32, F16, F32, 12, F32),
]


@pytest.mark.parametrize("case", POOL, ids=str)
def test_global_avg_pool_fp16_storage(device, case):
    h, w, c, xd, dtype, qpus, yd = case
    x = values(np.random.default_rng(c), (h, w, c), xd)
    y = global_avg_pool(x, device=device, num_qpus=qpus, dtype=dtype)
    assert y.dtype == yd
    expected, magnitude = np.zeros(c), np.zeros(c)
    for i in range(h):
        for j in range(w):
            for k in range(c):
                expected[k] += float(x[i, j, k]) / (h * w)
                magnitude[k] += abs(float(x[i, j, k])) / (h * w)
    check(y, expected, magnitude, terms=h * w + 1)


def test_global_avg_pool_fp16_out(device):
    x = device.array(values(np.random.default_rng(2), (3, 3, 17), F16))
    out = device.alloc((17,), F16)
    assert global_avg_pool(x, out=out) is out
    host = np.asarray(x, np.float64)
    assert_close_fp16(np.array(out), host.mean(axis=(0, 1)), np.abs(host).mean(axis=(0, 1)), 10)
    device.free(out)
    device.free(x)


@pytest.mark.parametrize("cin, cout, wd, bias, activation, qpus", [
    (1, 1, F32, False, None, 1),
    (17, 5, F16, True, "relu", 12),          # 17 = 16 + 1: the second x gather holds one half
    (33, 48, F32, True, "relu6", 1),
    (144, 40, F16, False, None, 12),
])
def test_fully_connected_fp16_input(device, cin, cout, wd, bias, activation, qpus):
    rng = np.random.default_rng(cin)
    x, w = values(rng, (1, 1, cin), F16, 1.0), values(rng, (cin, cout), wd, 1.0)
    b = values(rng, cout, F32, 1.0) if bias else None
    y = fully_connected(x, w, b, activation, device=device, num_qpus=qpus)
    assert y.dtype == F32 and y.shape == (1, 1, cout)
    expected, magnitude = np.zeros(cout), np.zeros(cout)
    for o in range(cout):
        for k in range(cin):
            expected[o] += float(x[0, 0, k]) * float(w[k, o])
            magnitude[o] += abs(float(x[0, 0, k]) * float(w[k, o]))
        if b is not None:
            expected[o] += b[o]
            magnitude[o] += abs(b[o])
    assert_close(y, activate(expected, activation).reshape(1, 1, cout),
                 magnitude.reshape(1, 1, cout), terms=cin)


def test_fully_connected_fp16_input_past_the_end_is_not_read(device):
    """Lanes past Cin read the last half, not what follows it: an inf behind x (in the same
    word) must not reach the result through a zero weight (0 * inf = NaN)."""
    buf = device.array(np.array([1.0, 2.0, 3.0, np.inf], F16))
    w = np.ones((3, 2), F16)
    prepared = prepare_fully_connected(w, device=device)
    y = fully_connected(buf[:3], prepared, device=device)
    assert np.array_equal(np.array(y), [6.0, 6.0])
    prepared.free()
    device.free(buf)


def test_storage_errors_name_the_argument(device):
    x16 = np.zeros((2, 2, 3), F16)
    with pytest.raises(DtypeError, match="b has dtype float64"):
        add(x16, np.zeros((2, 2, 3)), device=device)
    with pytest.raises(DtypeError, match="dtype='fp8'"):
        add(x16, x16, device=device, dtype="fp8")
    out = device.alloc((2, 2, 3), F32)
    with pytest.raises(DtypeError, match="dtype=.*out has dtype float32"):
        add(x16, x16, out=out, dtype=F16, device=device)
    device.free(out)
    with pytest.raises(DtypeError, match="x has dtype int32"):
        global_avg_pool(np.zeros((2, 2, 3), np.int32), device=device)
    out = device.alloc((3,), F16)
    with pytest.raises(ShapeError, match="out has shape"):
        fully_connected(np.zeros(4, F16), np.zeros((4, 3), F32), out=out, device=device)
    device.free(out)
