"""Elementwise add of two activations of the same shape, with an optional activation.

For residuals the pointwise layer cannot fuse; kernel: vc4nn/kernels/elementwise.py.
"""

import numpy as np

from ..device import Buffer, qpu_count
from ..kernels import elementwise as kernel
from .layer_args import ShapeError, check_activation, check_on_device, check_out, check_tensor, \
    pick_device
from .layer_call import LayerCall

LAYER = "add"


def add(a, b, activation=None, out=None, device=None, num_qpus=12, return_run=False):
    """``act(a + b)`` for two float32 tensors of the same shape (any number of dimensions)."""
    device = pick_device(device, a, b, out)
    activation = check_activation(LAYER, activation)
    for name, x in (("a", a), ("b", b)):
        check_tensor(LAYER, name, x, getattr(x, "ndim", 1))
        check_on_device(LAYER, name, x, device)
    if a.shape != b.shape:
        raise ShapeError(f"{LAYER}: a has shape {a.shape} but b has shape {b.shape}; they must "
                         f"be the same")
    out = check_out(LAYER, out, a.shape, np.float32, device)
    plan = kernel.AddPlan(int(a.size), qpu_count(num_qpus), activation)
    with LayerCall(device, not isinstance(a, Buffer)) as call:
        a_buf, b_buf = call.on_device(a), call.on_device(b)
        y = call.result_buffer(out, a.shape)
        run = device.execute(kernel.program_for(plan), plan.qpus,
                             plan.uniform_streams(a_buf.address, b_buf.address, y.address))
        return call.finish(y, out, run, return_run)
