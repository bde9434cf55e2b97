"""One fp16 depthwise call on random halves checked against the float64 loop of
tests/nn/spatial_reference.py (the window kernels' tests of plan options share it)."""

import numpy as np

from vc4nn.nn import depthwise
from vc4nn.nn.layer_args import resolve_padding

from . import spatial_reference
from .reference import assert_close, assert_close_fp16

F16 = np.float16


def check_fp16_depthwise(device, h, w, c, stride, padding, activation, with_bias, qpus,
                         tiling, layout="hwc", dtype=F16):
    """Run depthwise on (h, w, c) halves (weights and bias halves too) with ``tiling``; the
    result (``layout``, ``dtype``) must match the loop on the same values. Returns the run."""
    rng = np.random.default_rng(h * w + c)
    x = rng.standard_normal((h, w, c)).astype(F16)
    wt = rng.standard_normal((3, 3, c)).astype(F16)
    bias = rng.standard_normal(c).astype(F16) if with_bias else None
    y, run = depthwise(x, wt, bias, stride=stride, padding=padding, activation=activation,
                       device=device, num_qpus=qpus, tiling=tiling, out_layout=layout,
                       dtype=dtype, return_run=True)
    assert y.dtype == dtype
    pads, _ = resolve_padding("test", padding, h, w, 3, 3, stride, stride)
    expected, magnitude = spatial_reference.depthwise(x, wt, bias, stride, pads, activation)
    if layout == "chw":
        expected = np.moveaxis(expected, 2, 0)
        magnitude = np.moveaxis(magnitude, 2, 0) if np.ndim(magnitude) == 3 else magnitude
    (assert_close_fp16 if dtype == F16 else assert_close)(y, expected, magnitude, terms=9)
    return run
