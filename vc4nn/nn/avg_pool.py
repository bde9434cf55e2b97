"""Average pooling on the QPUs.

Divides by the number of *valid* (non-padded) elements of each window, as TFLite's
AVERAGE_POOL_2D does and as ONNX AveragePool with its default count_include_pad=0.
"""

from ..kernels.window_plan import WindowPlan, make_plan
from .layer_args import DTYPE_OF_STORAGE, check_int, check_on_device, check_out, \
    check_stored_tensor, check_tiling, pick_device, resolve_padding, result_storage
from .window_call import as_pair, run_window

LAYER = "avg_pool"


def avg_pool(x, size, stride, padding="valid", out=None, device=None, num_qpus=12,
             return_run=False, tiling=None, dtype=None):
    """y[i, j, c] = mean of x[., ., c] over the window's elements inside the image.

    size, stride: an int or (h, w). padding: "valid", "same" (TensorFlow) or (top, bottom,
    left, right). tiling: optional plan overrides (vc4nn.kernels.window_plan.WindowPlan).
    Storage: x float32 or float16; the result's dtype is ``out``'s, else ``dtype``, else x's.
    """
    device = pick_device(device, x, out)
    check_on_device(LAYER, "x", x, device)
    x, in_storage = check_stored_tensor(LAYER, "x", x, 3)
    size = as_pair(LAYER, "size", size, check_int)
    stride = as_pair(LAYER, "stride", stride, check_int)
    h, w, c = x.shape
    pads, (oh, ow) = resolve_padding(LAYER, padding, h, w, *size, *stride)
    out_storage = result_storage(LAYER, dtype, out, in_storage)
    out = check_out(LAYER, out, (oh, ow, c), DTYPE_OF_STORAGE[out_storage], device)
    plan = make_plan("avg_pool", h, w, c, size, stride, pads, None,
                     check_int(LAYER, "num_qpus", num_qpus), in_storage, out_storage,
                     **check_tiling(LAYER, tiling, WindowPlan, "tile_cols"))
    return run_window(plan, x, out, device, None, return_run)
