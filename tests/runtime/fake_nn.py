"""A stand-in for ``vc4nn.nn`` with the contract's signatures, computing in numpy, so the
session's planner and executor can be tested before (and independently of) the QPU kernels.
Prepared weights live in device memory, so the device's allocation list shows leaks."""

import types

import numpy as np

from vc4nn.device import QpuStats, RunResult
from vc4nn.nn.layer_call import release, upload

from .reference import ACT, windows

CALLS = []


class Prepared:
    def __init__(self, w, bias, device, placement):
        self.device, self.placement = device, placement
        self.w = upload(device, np.asarray(w, np.float32), placement)
        self.b = upload(device, np.zeros(self.w.shape[-1], np.float32) if bias is None
                        else np.asarray(bias, np.float32), placement)
        self.nbytes = self.w.nbytes + self.b.nbytes

    def free(self):
        release(self.device, self.w, self.placement)
        release(self.device, self.b, self.placement)


def _result(flops):
    cycles = max(1, flops // 100)
    return RunResult(num_qpus=12, host_interrupts=12, qpus=[QpuStats(10, cycles, {"tmu": 1})],
                     cycles=cycles, seconds=cycles / 250e6, board="pi_zero", clock_hz=250e6)


def _finish(name, y, activation, out):
    CALLS.append(name)
    y = ACT[activation](y)
    assert out is not None and tuple(out.shape) == y.shape, (name, out.shape, y.shape)
    out[...] = y
    return out, _result(y.size)


def _prep(w, bias=None, device=None, placement=None):
    return Prepared(w, bias, device, placement)


def _conv(x, p, stride, padding, grouped):
    w = np.asarray(p.w, np.float64)
    kh, kw = w.shape[:2]
    win = windows(np.asarray(x, np.float64), kh, kw, (stride, stride), padding)
    eq = "hwijc,ijc->hwc" if grouped else "hwijc,ijco->hwo"
    return np.einsum(eq, win, w) + p.b


def conv2d(x, p, stride=1, padding="same", activation=None, out=None, x_layout="hwc", **kw):
    x = np.asarray(x).transpose(1, 2, 0) if x_layout == "chw" else x
    return _finish("conv2d", _conv(x, p, stride, padding, False), activation, out)


def depthwise(x, p, stride=1, padding="same", activation=None, out=None, out_layout="hwc",
              **kw):
    y = _conv(x, p, stride, padding, True)
    return _finish("depthwise", y.transpose(2, 0, 1) if out_layout == "chw" else y, activation,
                   out)


def pointwise(x, p, activation=None, residual=None, out=None, x_layout="hwc", **kw):
    x = np.asarray(x, np.float64)
    y = (x.transpose(1, 2, 0) if x_layout == "chw" else x) @ np.asarray(p.w, np.float64) + p.b
    if residual is not None:
        y = y + residual
    return _finish("pointwise", y, activation, out)


def fully_connected(x, p, activation=None, out=None, **kw):
    y = np.asarray(x, np.float64).reshape(-1) @ np.asarray(p.w, np.float64) + p.b
    return _finish("fully_connected", y, activation, out)


def add(a, b, activation=None, out=None, **kw):
    return _finish("add", np.asarray(a, np.float64) + b, activation, out)


def global_avg_pool(x, out=None, **kw):
    return _finish("global_avg_pool", np.asarray(x, np.float64).mean(axis=(0, 1)), None, out)


def avg_pool(x, size, stride, padding="valid", out=None, **kw):
    x = np.asarray(x, np.float64)
    win = windows(x, size, size, (stride, stride), padding)
    count = windows(np.ones(x.shape[:2] + (1,)), size, size, (stride, stride), padding)
    return _finish("avg_pool", win.sum(axis=(2, 3)) / count.sum(axis=(2, 3)), None, out)


module = types.SimpleNamespace(
    prepare_conv2d=_prep, prepare_depthwise=_prep, prepare_pointwise=_prep,
    prepare_fully_connected=_prep, conv2d=conv2d, depthwise=depthwise, pointwise=pointwise,
    fully_connected=fully_connected, add=add, global_avg_pool=global_avg_pool,
    avg_pool=avg_pool)
