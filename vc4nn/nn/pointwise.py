"""Pointwise (1x1) convolution: ``y = act(x @ w + bias + residual)`` on the QPUs.

The kernel is the SGEMM panel kernel with a fused epilogue (vc4nn/kernels/pointwise.py,
docs/kernels.md "pointwise").
"""

import numpy as np

from ..device import Buffer, qpu_count
from ..kernels import panel_halves, pointwise as kernel
from .layer_args import (DTYPE_OF_STORAGE, LayerArgumentError, ShapeError, check_activation,
                         check_layout, check_on_device, check_out, check_stored_tensor,
                         check_tensor, check_tiling, pick_device, result_storage)
from .layer_call import LayerCall, PreparedWeights, chain, upload
from .tuned_plans import tuned_plan

LAYER = "pointwise"


class PreparedPointwise(PreparedWeights):
    """Weights (Cin, Cout) and optional bias (Cout,) in the kernel's layout in device memory.

    The panel kernel DMAs k-rows of the weights as they are (row-major (Cin, Cout) float32), so
    preparing is one copy to the device; a call given this object never touches them again.
    ``w_storage`` "fp16" (weights given as float16): halves in channel-pair words, rows padded
    to 32 channels (vc4nn/kernels/panel_halves.py); the bias stays float32.
    """

    def __init__(self, device, cin, cout, weights, bias, placement=None, w_storage="fp32"):
        super().__init__(device, weights, bias, placement)
        self.cin, self.cout, self.w_storage = cin, cout, w_storage


def prepare_pointwise(w, bias=None, device=None, layer=LAYER, placement=None):
    """Lay out weights (Cin, Cout) and bias (Cout,) once, in ``device``'s memory (in
    ``placement``, a layer_call.WeightArena, if given).
    Weights float16: fp16 storage (half the bytes the layer reads), float32 arithmetic."""
    device = pick_device(device, w, bias)
    _, w_storage = check_stored_tensor(layer, "w", w, 2)
    check_on_device(layer, "w", w, device)
    if bias is not None:
        check_bias(layer, bias, w.shape[1], device, stored=True)
        bias = np.asarray(bias, np.float32)       # a float16 bias is widened (exactly)
    cin, cout = w.shape
    w = np.asarray(w)
    weights = upload(device, panel_halves.lay_out(w) if w_storage == "fp16" else w, placement)
    return PreparedPointwise(device, cin, cout, weights,
                             None if bias is None else upload(device, bias, placement),
                             placement, w_storage)


def check_bias(layer, bias, cout, device, stored=False):
    """``stored``: float16 is allowed too (the bias given to prepare_pointwise)."""
    if stored:
        check_stored_tensor(layer, "bias", bias, 1)
    else:
        check_tensor(layer, "bias", bias, 1)
    check_on_device(layer, "bias", bias, device)
    if bias.shape != (cout,):
        raise ShapeError(f"{layer}: bias has shape {bias.shape}; the layer has {cout} output "
                         f"channels, so it must be ({cout},)")


def pointwise_plan(height, width, cin, cout, num_qpus, has_bias, has_residual, activation,
                   x_storage, y_storage, r_storage, w_storage, x_layout="hwc", **tiling):
    """The plan ``pointwise`` makes, before the tuned cache, from its checked arguments. The
    runtime and layer_plans.plan_for ask it for the plan of a call they describe."""
    return kernel.PointwisePlan(height, width, cin, cout, num_qpus, has_bias, has_residual,
                                activation, x_storage, y_storage, r_storage, w_storage,
                                input_layout=x_layout, **tiling)


def pointwise(x, w, bias=None, activation=None, residual=None, out=None, device=None,
              num_qpus=12, return_run=False, tiling=None, dtype=None, x_layout="hwc"):
    """1x1 convolution of ``x`` (H, W, Cin) with ``w`` (Cin, Cout) or a PreparedPointwise:
    ``act(x @ w + bias + residual)`` of shape (H, W, Cout). ``residual``: (H, W, Cout), added
    before the activation. Conventions of every layer: vc4nn/nn/layer_args.py.

    Storage: x, w and the residual are float32 or float16 each (fp16 storage, float32
    arithmetic; the bias is float32, a float16 one is widened). The result's dtype is
    ``out``'s, else ``dtype``, else x's.

    x_layout: "hwc", or "chw" when x is given channel-major, (Cin, H, W) (as
    ``depthwise(..., out_layout="chw")`` writes it): the kernel's transposed-input route reads
    it as it is, so the layer is one launch instead of a transpose and the GEMM (docs/kernels.md
    "Handing over transposed"). The result is (H, W, Cout) either way.

    tiling: {"transpose_input": bool, "max_rows": 1..8, "panel_vectors": 1..16,
    "gather_weights": bool, "balance_passes": bool, "spread_rows": bool, "spread_leaves": bool,
    "pair_gathers": bool, "park_rows": int, "chunk_depth": int, "stagger": bool} forces the
    route, the panel width, how the weights reach the VPM, whether the last pass takes fewer
    pixels, whether the pixels left over are spread one vector per QPU, whether only the QPUs
    without barrier work take them, whether x is gathered two k at a time across chunks, how
    many rows of a pass are stored during the next, how many k-rows of weights a chunk holds
    and whether the pixels retire at staggered points of a cyclic k stream (PointwisePlan);
    None takes the tuned plan of this shape from `vc4nn tune`'s cache
    (vc4nn/nn/tuned_plans.py), else the default."""
    prepared = w if isinstance(w, PreparedPointwise) else None
    device = pick_device(device if device is not None or prepared is None else prepared.device,
                         x, w, bias, residual, out)
    activation = check_activation(LAYER, activation)
    _, x_storage = check_stored_tensor(LAYER, "x", x, 3)
    check_on_device(LAYER, "x", x, device)
    if prepared is None:
        _, w_storage = check_stored_tensor(LAYER, "w", w, 2)
        check_on_device(LAYER, "w", w, device)
        cin, cout = w.shape
    else:
        if prepared.device is not device:
            raise LayerArgumentError(f"{LAYER}: w was prepared on another device than the one "
                                     f"the call runs on")
        cin, cout, w_storage = prepared.cin, prepared.cout, prepared.w_storage
        if bias is not None and prepared.bias is not None:
            raise LayerArgumentError(f"{LAYER}: bias given, but w was prepared with a bias")
    x_layout = check_layout(LAYER, "x_layout", x_layout)
    if x_layout == "chw":
        channels, height, width = x.shape
    else:
        height, width, channels = x.shape
    if channels != cin:
        raise ShapeError(f"{LAYER}: x has {channels} channels (shape {x.shape}, x_layout "
                         f"{x_layout!r}) but w has "
                         f"{cin} input channels (w is ({cin}, {cout}))")
    if bias is not None:
        check_bias(LAYER, bias, cout, device, stored=prepared is None)
    shape = (height, width, cout)
    r_storage = "fp32"
    if residual is not None:
        _, r_storage = check_stored_tensor(LAYER, "residual", residual, 3)
        check_on_device(LAYER, "residual", residual, device)
        if residual.shape != shape:
            raise ShapeError(f"{LAYER}: residual has shape {residual.shape}; the result is {shape}")
    y_storage = result_storage(LAYER, dtype, out, x_storage)
    out = check_out(LAYER, out, shape, DTYPE_OF_STORAGE[y_storage], device)
    num_qpus = qpu_count(num_qpus)
    has_bias = bias is not None or (prepared is not None and prepared.bias is not None)
    plan = pointwise_plan(height, width, cin, cout, num_qpus, has_bias, residual is not None,
                          activation, x_storage, y_storage, r_storage, w_storage, x_layout,
                          **check_tiling(LAYER, tiling, kernel.PointwisePlan,
                                         "transpose_input"))
    if tiling is None:
        plan = tuned_plan(plan, device)
    with LayerCall(device, not isinstance(x, Buffer)) as call:
        if prepared is None:
            prepared = prepare_pointwise(w, bias, device)
            call.temporaries += [buf for buf in (prepared.weights, prepared.bias) if buf is not None]
            bias = None
        x_dtype = DTYPE_OF_STORAGE[x_storage]
        x_buf = call.on_device(x, x_dtype)
        bias_buf = prepared.bias if bias is None else call.on_device(bias)
        res_buf = call.on_device(residual, DTYPE_OF_STORAGE[r_storage])
        y = call.result_buffer(out, shape, DTYPE_OF_STORAGE[y_storage])
        workspace = call.workspace((cin, plan.pixels), x_dtype) if plan.transpose else None
        runs = [device.execute(program, qpus, streams)
                for program, qpus, streams in kernel.launches(
                    plan, x_buf.address, prepared.weights.address, y.address,
                    bias=None if bias_buf is None else bias_buf.address,
                    residual=None if res_buf is None else res_buf.address,
                    workspace=None if workspace is None else workspace.address)]
        return call.finish(y, out, chain(runs), return_run)
