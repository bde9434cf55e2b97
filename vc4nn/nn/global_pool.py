"""Global average pooling: (H, W, C) -> (C,). Kernel: vc4nn/kernels/global_pool.py."""

import numpy as np

from ..device import Buffer, qpu_count
from ..kernels import global_pool as kernel
from .layer_args import check_on_device, check_out, check_tensor, pick_device
from .layer_call import LayerCall

LAYER = "global_avg_pool"


def global_avg_pool(x, out=None, device=None, num_qpus=12, return_run=False):
    """The mean of ``x`` (H, W, C) over its H*W pixels, shape (C,)."""
    device = pick_device(device, x, out)
    check_tensor(LAYER, "x", x, 3)
    check_on_device(LAYER, "x", x, device)
    height, width, channels = x.shape
    out = check_out(LAYER, out, (channels,), np.float32, device)
    plan = kernel.GlobalPoolPlan(height * width, channels, qpu_count(num_qpus))
    with LayerCall(device, not isinstance(x, Buffer)) as call:
        x_buf = call.on_device(x)
        y = call.result_buffer(out, (channels,))
        run = device.execute(kernel.program_for(plan), plan.qpus,
                             plan.uniform_streams(x_buf.address, y.address))
        return call.finish(y, out, run, return_run)
