"""vc4nn.nn.add, global_avg_pool and fully_connected against float64 references written from
their definitions (explicit loops / einsum), emulator checks on."""

import numpy as np
import pytest

from vc4nn.device import Buffer
from vc4nn.errors import Vc4nnError
from vc4nn.kernels import elementwise, gemv, global_pool
from vc4nn.nn import (add, fully_connected, global_avg_pool, mobilenet_shapes,
                      prepare_fully_connected)
from vc4nn.nn.layer_args import DtypeError, LayerArgumentError, ShapeError

from .reference import activate, assert_close, dense


def rand(seed, *shape, scale=4.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


# -- add ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,num_qpus,activation", [
    ((1, 1, 1), 1, None),
    ((2, 2, 3), 4, "relu"),
    ((7, 7, 16), 12, "relu6"),          # 784 elements: 12 full blocks of 64, a tail of 16
    ((15, 1, 17), 12, None),            # 255: a tail of 63 (3 vectors and 15 elements)
    ((2, 14, 8), 4, "relu"),            # 224: 3 full blocks and a tail of 32 (no partial)
    ((14, 15, 3), 1, "relu6"),
])
def test_add(device, shape, num_qpus, activation):
    a, b = rand(1, *shape), rand(2, *shape)
    y = add(a, b, activation, device=device, num_qpus=num_qpus)
    expected = np.empty(shape)
    for index in np.ndindex(*shape):    # the definition, element by element
        expected[index] = float(a[index]) + float(b[index])
    assert_close(y, activate(expected, activation), np.abs(a) + np.abs(b), 1)


@pytest.mark.slow
@pytest.mark.parametrize("activation", [None, "relu6"])
def test_add_112(device, activation):
    a, b = rand(3, 112, 112, 24), rand(4, 112, 112, 24)
    y = add(a, b, activation, device=device)
    assert_close(y, activate(a.astype(np.float64) + b, activation), np.abs(a) + np.abs(b), 1)


def test_add_writes_nothing_past_its_result(device):
    """The tail's stores stop at the last element: a guard after the result stays intact."""
    a, b = rand(5, 3, 5, 7), rand(6, 3, 5, 7)
    arena = device.alloc(3 * 5 * 7 + 64, np.float32)
    arena[...] = 1234.5
    out = arena[:3 * 5 * 7].reshape(3, 5, 7)
    add(device.array(a), device.array(b), out=out, num_qpus=5)
    assert np.all(np.asarray(arena[3 * 5 * 7:]) == 1234.5)
    assert_close(out, a.astype(np.float64) + b, np.abs(a) + np.abs(b), 1)


def test_add_errors(device):
    a = rand(0, 2, 2, 3)
    with pytest.raises(ShapeError, match="b has shape"):
        add(a, rand(0, 2, 3, 2), device=device)
    with pytest.raises(DtypeError, match="b"):
        add(a, a.astype(np.float64), device=device)
    with pytest.raises(LayerArgumentError, match="activation"):
        add(a, a, activation="tanh", device=device)


# -- global_avg_pool ---------------------------------------------------------------------------
@pytest.mark.parametrize("h,w,c,num_qpus", [
    (1, 1, 1, 1), (2, 2, 3, 4), (7, 7, 17, 12), (15, 14, 32, 12), (1, 2, 144, 4), (14, 7, 8, 1),
    (2, 15, 16, 12),
])
def test_global_avg_pool(device, h, w, c, num_qpus):
    x = rand(h * w + c, h, w, c)
    y = global_avg_pool(x, device=device, num_qpus=num_qpus)
    expected = np.zeros(c)
    for i in range(h):
        for j in range(w):
            expected += x[i, j].astype(np.float64)
    expected /= h * w
    magnitude = np.abs(x.astype(np.float64)).sum(axis=(0, 1)) / (h * w)
    assert_close(y, expected, magnitude, h * w + 1)


@pytest.mark.slow
def test_global_avg_pool_112(device):
    x = rand(7, 112, 112, 3)
    y = global_avg_pool(x, device=device)
    assert_close(y, x.astype(np.float64).mean(axis=(0, 1)),
                 np.abs(x.astype(np.float64)).mean(axis=(0, 1)), 112 * 112 + 1)


def test_global_avg_pool_errors(device):
    with pytest.raises(ShapeError, match="x"):
        global_avg_pool(rand(0, 4, 4), device=device)
    with pytest.raises(ShapeError, match="out"):
        global_avg_pool(rand(0, 2, 2, 4), out=device.alloc(5, np.float32), device=device)


# -- fully_connected ---------------------------------------------------------------------------
@pytest.mark.parametrize("cin,cout,num_qpus,bias,activation", [
    (1, 1, 1, False, None),
    (3, 17, 4, True, "relu"),
    (16, 16, 12, True, None),
    (33, 100, 12, False, "relu6"),
    (144, 8, 1, True, "relu6"),
    (17, 144, 12, True, None),
    (8, 300, 2, False, "relu"),          # 19 blocks on 2 QPUs: groups of 8, two rounds
])
def test_fully_connected(device, cin, cout, num_qpus, bias, activation):
    x, w = rand(cin, cin, scale=1.0), rand(cout, cin, cout, scale=1.0)
    b = rand(7, cout) if bias else None
    y = fully_connected(x, w, b, activation, device=device, num_qpus=num_qpus)
    assert_close(y, *dense(x, w, b, None, activation), cin)


def test_fully_connected_nhwc_input_and_prepared(device):
    x, w, b = rand(1, 1, 1, 40, scale=1.0), rand(2, 40, 21, scale=1.0), rand(3, 21)
    prepared = prepare_fully_connected(w, b, device=device)
    assert prepared.nbytes == (48 + gemv.PAD_ROWS) * 32 * 4 + 32 * 4
    y, run = fully_connected(device.array(x), prepared, activation="relu", return_run=True)
    assert isinstance(y, Buffer) and y.shape == (1, 1, 21)
    assert_close(y, *dense(x, w, b, None, "relu"), 40)
    assert run.launches == 1
    prepared.free()


@pytest.mark.parametrize("group_size", [1, 3, 8])
def test_fully_connected_group_sizes(device, group_size):
    plan = gemv.FullyConnectedPlan(20, 70, 3, True, None, group_size=group_size)
    x, w, b = rand(1, 20, scale=1.0), rand(2, 20, 70, scale=1.0), rand(3, 70)
    weights, bias = gemv.prepare(plan, w, b)
    bufs = [device.array(v) for v in (x, weights, bias)]
    y = device.alloc(70, np.float32)
    device.execute(gemv.program_for(plan), plan.qpus,
                   plan.uniform_streams(bufs[0].address, bufs[1].address, y.address,
                                        bufs[2].address))
    assert_close(y, *dense(x, w, b, None, None), 20)


def test_fully_connected_errors(device):
    x, w = rand(0, 10), rand(1, 10, 4)
    with pytest.raises(ShapeError, match="x has 9"):
        fully_connected(rand(0, 9), w, device=device)
    with pytest.raises(ShapeError, match="pool"):
        fully_connected(rand(0, 2, 1, 10), w, device=device)
    with pytest.raises(ShapeError, match="bias"):
        fully_connected(x, w, rand(0, 5), device=device)
    with pytest.raises(DtypeError, match="w"):
        fully_connected(x, w.astype(np.float64), device=device)
    with pytest.raises(LayerArgumentError, match="bias"):
        fully_connected(x, prepare_fully_connected(w, device=device), rand(0, 4), device=device)
    with pytest.raises(Vc4nnError, match="num_qpus"):
        fully_connected(x, w, num_qpus=0, device=device)


def test_mobilenet_classifier_programs_assemble():
    """Every MobileNet v1/v2 classifier, global pool (1 and 12 QPUs): generated and assembled."""
    layers = {layer for _, layer in mobilenet_shapes.every_layer(("fully_connected",
                                                                  "global_avg_pool"))}
    for layer in layers:
        for qpus in (1, 12):
            if layer.kind == "fully_connected":
                gemv.program_for(gemv.FullyConnectedPlan(layer.cin, layer.cout, qpus, True))
            else:
                global_pool.program_for(global_pool.GlobalPoolPlan(
                    layer.height * layer.width, layer.cin, qpus))


def test_mobilenet_classifier_reduced(device):
    """MobileNet v2's classifier width (1000 outputs) on a reduced input (Cin 40, not 1280)."""
    x, w, b = rand(1, 40, scale=1.0), rand(2, 40, 1000, scale=1.0), rand(3, 1000)
    assert_close(fully_connected(x, w, b, device=device), *dense(x, w, b, None, None), 40)


@pytest.mark.slow
@pytest.mark.parametrize("cin,cout", [(1024, 1001), (1280, 1000)])
def test_mobilenet_classifier_full(device, cin, cout):
    x, w, b = rand(1, cin, scale=1.0), rand(2, cin, cout, scale=1.0), rand(3, cout)
    assert_close(fully_connected(x, w, b, device=device), *dense(x, w, b, None, None), cin)


def test_plans_reject_other_storage():
    for make in (lambda: elementwise.AddPlan(4, 1, b_storage="f16"),
                 lambda: global_pool.GlobalPoolPlan(4, 4, 1, out_storage="f16"),
                 lambda: gemv.FullyConnectedPlan(4, 4, 1, storage="f16")):
        with pytest.raises(Vc4nnError, match="'f16'"):
            make()


def test_add_in_place(device):
    a, b = rand(8, 5, 5, 8), rand(9, 5, 5, 8)
    a_buf = device.array(a)
    assert add(a_buf, device.array(b), "relu6", out=a_buf) is a_buf
    assert_close(a_buf, activate(a.astype(np.float64) + b, "relu6"), np.abs(a) + np.abs(b), 1)
