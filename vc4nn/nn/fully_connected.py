"""Fully connected layer: ``y = act(x @ w + bias)``, the classifier of MobileNet.

A GEMV; kernel and weight layout: vc4nn/kernels/gemv.py.
"""

import numpy as np

from ..device import Buffer, qpu_count
from ..kernels import gemv as kernel
from .layer_args import (DTYPE_OF_STORAGE, LayerArgumentError, ShapeError, check_activation,
                         check_on_device, check_out, check_stored_tensor, pick_device)
from .layer_call import LayerCall, PreparedWeights, upload

LAYER = "fully_connected"


class PreparedFullyConnected(PreparedWeights):
    """Weights and bias in the GEMV kernel's padded layout in device memory (laid out once);
    ``w_storage``: "fp16" when w was float16 (the bias stays float32)."""

    def __init__(self, device, cin, cout, weights, bias, placement=None, w_storage="fp32"):
        super().__init__(device, weights, bias, placement)
        self.cin, self.cout, self.w_storage = cin, cout, w_storage


def prepare_fully_connected(w, bias=None, device=None, placement=None):
    """Lay out weights (Cin, Cout) and bias (Cout,) once, in ``device``'s memory (in
    ``placement``, a layer_call.WeightArena, if given). Weights float16: fp16 storage (half the
    bytes the layer reads), float32 arithmetic."""
    device = pick_device(device, w, bias)
    _, w_storage = check_stored_tensor(LAYER, "w", w, 2)
    cin, cout = w.shape
    if bias is not None:
        check_stored_tensor(LAYER, "bias", bias, 1)
        if bias.shape != (cout,):
            raise ShapeError(f"{LAYER}: bias has shape {bias.shape}; the layer has {cout} outputs, "
                             f"so it must be ({cout},)")
    layout = kernel.FullyConnectedPlan(cin, cout, 1, w_storage=w_storage)
    weights, padded = kernel.prepare(layout, np.asarray(w), None if bias is None else np.asarray(bias))
    return PreparedFullyConnected(device, cin, cout, upload(device, weights, placement),
                                  None if padded is None else upload(device, padded, placement),
                                  placement, w_storage)


def fully_connected(x, w, bias=None, activation=None, out=None, device=None, num_qpus=12,
                    return_run=False):
    """``act(x @ w + bias)`` for ``x`` of shape (Cin,) or (1, 1, Cin) and ``w`` (Cin, Cout) or a
    PreparedFullyConnected; the result has shape (Cout,) or (1, 1, Cout) like ``x``.

    Storage: x float32 or float16, w float32 or float16 (fp16 storage; the arithmetic is
    float32); the result is float32."""
    prepared = w if isinstance(w, PreparedFullyConnected) else None
    device = pick_device(device if device is not None or prepared is None else prepared.device,
                         x, w, bias, out)
    activation = check_activation(LAYER, activation)
    ndim = getattr(x, "ndim", 1)
    _, x_storage = check_stored_tensor(LAYER, "x", x, 3 if ndim == 3 else 1)
    if ndim == 3 and x.shape[:2] != (1, 1):
        raise ShapeError(f"{LAYER}: x has shape {x.shape}; give (Cin,) or (1, 1, Cin) (pool the "
                         f"activation first)")
    check_on_device(LAYER, "x", x, device)
    if prepared is None:
        check_stored_tensor(LAYER, "w", w, 2)
        cin, cout = w.shape
    else:
        if prepared.device is not device:
            raise LayerArgumentError(f"{LAYER}: w was prepared on another device than the one "
                                     f"the call runs on")
        if bias is not None:
            raise LayerArgumentError(f"{LAYER}: give the bias to prepare_fully_connected with "
                                     f"the weights")
        cin, cout = prepared.cin, prepared.cout
    if x.shape[-1] != cin:
        raise ShapeError(f"{LAYER}: x has {x.shape[-1]} elements (shape {x.shape}) but w has "
                         f"{cin} input rows (w is ({cin}, {cout}))")
    shape = (1, 1, cout) if ndim == 3 else (cout,)
    out = check_out(LAYER, out, shape, np.float32, device)
    num_qpus = qpu_count(num_qpus)
    with LayerCall(device, not isinstance(x, Buffer)) as call:
        if prepared is None:
            prepared = prepare_fully_connected(w, bias, device)
            call.temporaries += [buf for buf in (prepared.weights, prepared.bias) if buf is not None]
        plan = kernel.FullyConnectedPlan(cin, cout, num_qpus, prepared.bias is not None,
                                         activation, x_storage, w_storage=prepared.w_storage)
        x_buf = call.on_device(x, DTYPE_OF_STORAGE[x_storage])
        y = call.result_buffer(out, shape)
        scratch = call.temporary(kernel.LANES)
        streams = plan.uniform_streams(x_buf.address, prepared.weights.address, y.address,
                                       None if prepared.bias is None else prepared.bias.address,
                                       scratch.address)
        run = device.execute(kernel.program_for(plan), plan.qpus, streams)
        return call.finish(y, out, run, return_run)
