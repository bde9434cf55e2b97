"""Global average pooling: (H, W, C) -> (C,). Kernel: vc4nn/kernels/global_pool.py."""

from ..device import Buffer, qpu_count
from ..kernels import global_pool as kernel
from .layer_args import DTYPE_OF_STORAGE, check_on_device, check_out, check_stored_tensor, \
    pick_device, result_storage
from .layer_call import LayerCall

LAYER = "global_avg_pool"


def global_avg_pool(x, out=None, device=None, num_qpus=12, return_run=False, dtype=None):
    """The mean of ``x`` (H, W, C) over its H*W pixels, shape (C,).

    Storage: x float32 or float16 (fp16 storage; the sum is float32); the result's dtype is
    ``out``'s, else ``dtype``, else x's."""
    device = pick_device(device, x, out)
    check_on_device(LAYER, "x", x, device)
    x, in_storage = check_stored_tensor(LAYER, "x", x, 3)
    height, width, channels = x.shape
    out_storage = result_storage(LAYER, dtype, out, in_storage)
    out = check_out(LAYER, out, (channels,), DTYPE_OF_STORAGE[out_storage], device)
    plan = kernel.GlobalPoolPlan(height * width, channels, qpu_count(num_qpus), in_storage,
                                 out_storage)
    with LayerCall(device, not isinstance(x, Buffer)) as call:
        x_buf = call.on_device(x, DTYPE_OF_STORAGE[in_storage])
        y = call.result_buffer(out, (channels,), DTYPE_OF_STORAGE[out_storage])
        run = device.execute(kernel.program_for(plan), plan.qpus,
                             plan.uniform_streams(x_buf.address, y.address))
        return call.finish(y, out, run, return_run)
