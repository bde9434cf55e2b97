"""Running a sliding-window plan (depthwise, avg_pool): buffers, uniform streams, the launch."""

from ..device import Buffer
from ..kernels.window import program_for
from ..kernels.window_streams import uniform_streams
from .layer_args import DTYPE_OF_STORAGE, LayerArgumentError, layout_shape
from .layer_call import LayerCall


def run_window(plan, x, out, device, weights, return_run):
    """Launch ``plan`` on ``x`` (host array or buffer); ``weights`` a device buffer or None."""
    with LayerCall(device, host_result=not isinstance(x, Buffer)) as call:
        x_buf = call.on_device(x, DTYPE_OF_STORAGE[plan.in_storage])
        y = call.result_buffer(out, layout_shape(plan.out_layout, plan.out_h, plan.out_w,
                                                 plan.channels),
                               DTYPE_OF_STORAGE[plan.out_storage])
        streams = uniform_streams(plan, x_buf.address, y.address,
                                  0 if weights is None else weights.address)
        run = device.execute(program_for(plan), plan.qpus, streams)
        return call.finish(y, out, run, return_run)


def as_pair(layer, name, value, check_int):
    """(h, w) from an int or a pair of ints."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise LayerArgumentError(f"{layer}: {name}={value!r} must be an int or (h, w)")
        return tuple(check_int(layer, name, v) for v in value)
    v = check_int(layer, name, value)
    return v, v

