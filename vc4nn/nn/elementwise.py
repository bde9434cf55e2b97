"""Elementwise add of two activations of the same shape, with an optional activation.

For residuals the pointwise layer cannot fuse; kernel: vc4nn/kernels/elementwise.py.
"""

from ..device import Buffer, qpu_count
from ..kernels import elementwise as kernel
from .layer_args import DTYPE_OF_STORAGE, ShapeError, check_activation, check_on_device, \
    check_out, check_stored_tensor, pick_device, result_storage
from .layer_call import LayerCall

LAYER = "add"


def add(a, b, activation=None, out=None, device=None, num_qpus=12, return_run=False,
        dtype=None):
    """``act(a + b)`` for two tensors of the same shape (any number of dimensions).

    Storage: a and b are float32 or float16 each (fp16 storage, float32 arithmetic). The
    result's dtype is ``out``'s, else ``dtype``, else float16 if both a and b are, else float32
    (numpy's promotion).
    """
    device = pick_device(device, a, b, out)
    activation = check_activation(LAYER, activation)
    storages = []
    for name, x in (("a", a), ("b", b)):
        check_on_device(LAYER, name, x, device)
        storages.append(check_stored_tensor(LAYER, name, x, getattr(x, "ndim", 1))[1])
    if a.shape != b.shape:
        raise ShapeError(f"{LAYER}: a has shape {a.shape} but b has shape {b.shape}; they must "
                         f"be the same")
    default = "fp16" if storages == ["fp16", "fp16"] else "fp32"
    y_storage = result_storage(LAYER, dtype, out, default)
    out = check_out(LAYER, out, a.shape, DTYPE_OF_STORAGE[y_storage], device)
    plan = kernel.AddPlan(int(a.size), qpu_count(num_qpus), activation, *storages, y_storage)
    with LayerCall(device, not isinstance(a, Buffer)) as call:
        a_buf, b_buf = (call.on_device(x, DTYPE_OF_STORAGE[s]) for x, s in zip((a, b), storages))
        y = call.result_buffer(out, a.shape, DTYPE_OF_STORAGE[y_storage])
        run = device.execute(kernel.program_for(plan), plan.qpus,
                             plan.uniform_streams(a_buf.address, b_buf.address, y.address))
        return call.finish(y, out, run, return_run)
