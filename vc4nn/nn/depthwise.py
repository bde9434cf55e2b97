"""Depthwise 3x3 convolution (channel multiplier 1) with fused bias and activation."""

import numpy as np

from ..kernels.window_plan import LANES, WindowPlan, make_plan
from .layer_args import DTYPE_OF_STORAGE, STORAGE_OF_DTYPE, LayerArgumentError, \
    check_activation, check_int, check_layout, check_on_device, check_out, check_stored_tensor, \
    check_tiling, layout_shape, pick_device, resolve_padding, result_storage
from .layer_call import release, upload
from .tuned_plans import tuned_plan
from .window_call import run_window

LAYER = "depthwise"
KERNEL = (3, 3)


class PreparedDepthwise:
    """Weights (KH, KW, C) and bias (C,) in the kernel's layout: one row of padded channels per
    tap, then the bias row (zeros without a bias), in device memory, stored as w's dtype
    (float32, or float16: fp16 storage, the bias rounded to a half too)."""

    def __init__(self, w, bias, device, placement=None):
        w, self.storage = check_stored_tensor(LAYER, "w", contiguous(w), 3)
        if w.shape[:2] != KERNEL:
            raise LayerArgumentError(f"{LAYER}: w has shape {w.shape}; it must be (3, 3, C)")
        kh, kw, c = w.shape
        padded = -(-c // LANES) * LANES
        table = np.zeros((kh * kw + 1, padded), w.dtype)
        table[:kh * kw, :c] = w.reshape(kh * kw, c)
        if bias is not None:
            bias, _ = check_stored_tensor(LAYER, "bias", contiguous(bias), 1)
            if bias.shape != (c,):
                raise LayerArgumentError(f"{LAYER}: bias has shape {bias.shape}; w has {c} "
                                         f"channels")
            table[kh * kw, :c] = bias
        self.device = device
        self.kernel, self.channels, self.has_bias = (kh, kw), c, bias is not None
        self.placement = placement
        self.buffer = upload(device, table, placement)

    @property
    def nbytes(self):
        return self.buffer.nbytes

    def free(self):
        release(self.device, self.buffer, self.placement)


def contiguous(array):
    """Weights may be any float32 or float16 view: they are copied into the kernel's layout
    anyway."""
    array = np.asarray(array)
    return np.ascontiguousarray(array) if array.dtype in STORAGE_OF_DTYPE else array


def prepare_depthwise(w, bias=None, device=None, placement=None):
    """Lay out depthwise weights (3, 3, C) and bias (C,) once, on ``device`` (in ``placement``,
    a layer_call.WeightArena, if given)."""
    device = pick_device(device)
    return PreparedDepthwise(w, bias, device, placement)


def depthwise_plan(height, width, channels, strides, pads, activation, num_qpus, x_storage,
                   out_storage, w_storage, out_layout="hwc", **tiling):
    """The plan ``depthwise`` makes, before the tuned cache, from its checked arguments:
    ``strides`` (rows, columns), ``pads`` (top, bottom, left, right). The runtime and
    layer_plans.plan_for ask it for the plan of a call they describe."""
    return make_plan("depthwise", height, width, channels, KERNEL, tuple(strides), tuple(pads),
                     activation, num_qpus, x_storage, out_storage, w_storage, out_layout,
                     **tiling)


def depthwise(x, w, bias=None, stride=1, padding="same", activation=None, out=None, device=None,
              num_qpus=12, return_run=False, tiling=None, dtype=None, out_layout="hwc"):
    """y[i, j, c] = act(bias[c] + sum over the 3x3 window of x * w[., ., c]); x (H, W, C).

    out_layout: "hwc" (the result is (OH, OW, C)) or "chw" (channel-major, (C, OH, OW): row c
    holds channel c's OH*OW pixels, the transposed input ``pointwise(..., x_layout="chw")``
    reads without a transpose launch; docs/kernels.md "Handing over transposed").

    stride: 1 or 2 (any int >= 1 works). padding: "same" (TensorFlow), "valid" or
    (top, bottom, left, right). tiling: optional overrides of the plan (tile_cols, tile_rows,
    in_chunk, out_chunk); see vc4nn.kernels.window_plan.WindowPlan. None: the tuned plan of
    this shape from `vc4nn tune`'s cache (vc4nn/nn/tuned_plans.py), else the default.

    Storage: x, w (and the result) are float32 or float16 each (fp16 storage, float32
    arithmetic). The result's dtype is ``out``'s, else ``dtype``, else x's.
    """
    device = pick_device(device, x, out)
    check_on_device(LAYER, "x", x, device)
    x, in_storage = check_stored_tensor(LAYER, "x", x, 3)
    stride = check_int(LAYER, "stride", stride)
    activation = check_activation(LAYER, activation)
    h, wd, c = x.shape
    pads, (oh, ow) = resolve_padding(LAYER, padding, h, wd, *KERNEL, stride, stride)
    out_storage = result_storage(LAYER, dtype, out, in_storage)
    out_layout = check_layout(LAYER, "out_layout", out_layout)
    out = check_out(LAYER, out, layout_shape(out_layout, oh, ow, c),
                    DTYPE_OF_STORAGE[out_storage], device)
    prepared = w if isinstance(w, PreparedDepthwise) else None
    w_storage = prepared.storage if prepared else check_stored_tensor(LAYER, "w", contiguous(w),
                                                                      3)[1]
    plan = depthwise_plan(h, wd, c, (stride, stride), pads, activation,
                          check_int(LAYER, "num_qpus", num_qpus), in_storage, out_storage,
                          w_storage, out_layout,
                          **check_tiling(LAYER, tiling, WindowPlan, "tile_cols"))
    if tiling is None:
        plan = tuned_plan(plan, device)
    if prepared is not None:
        if bias is not None:
            raise LayerArgumentError(f"{LAYER}: give the bias to prepare_depthwise, not with "
                                     f"prepared weights")
        if prepared.device is not device:
            raise LayerArgumentError(f"{LAYER}: the prepared weights live on another device")
    else:
        prepared = PreparedDepthwise(w, bias, device)
    try:
        if c != prepared.channels:
            raise LayerArgumentError(f"{LAYER}: x has {c} channels, w has {prepared.channels}")
        return run_window(plan, x, out, device, prepared.buffer, return_run)
    finally:
        if prepared is not w:
            prepared.free()
