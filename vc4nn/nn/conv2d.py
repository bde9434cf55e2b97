"""Convolution (KH, KW, Cin, Cout) with fused bias and activation, for small input depths: the
MobileNet stem. Kernel: vc4nn/kernels/conv2d.py."""

import numpy as np

from ..device import Buffer, streams_in_buffer
from ..kernels import conv2d as kernel
from ..kernels import conv2d_channels
from .depthwise import contiguous
from .layer_args import DTYPE_OF_STORAGE, LayerArgumentError, check_activation, check_int, \
    check_layout, check_on_device, check_out, check_stored_tensor, check_tensor, pick_device, \
    resolve_padding, result_storage
from .layer_call import LayerCall, release, upload

LAYER = "conv2d"


class PreparedConv2d:
    """Weights (KH, KW, Cin, Cout) and bias (Cout,) as the word stream the kernel reads (per
    16-channel block, per pass of taps, per output channel: bias, then the taps), in device
    memory."""

    def __init__(self, w, bias, device, taps_per_pass=0, placement=None):
        # The weights travel as 32-bit uniforms, which nothing unpacks: float16 weights are
        # widened here (exactly).
        w, _ = check_stored_tensor(LAYER, "w", contiguous(w), 4)
        w = w.astype(np.float32)
        kh, kw, cin, cout = w.shape
        if bias is None:
            bias = np.zeros(cout, np.float32)
        else:
            bias, _ = check_stored_tensor(LAYER, "bias", contiguous(bias), 1)
            bias = bias.astype(np.float32)
            if bias.shape != (cout,):
                raise LayerArgumentError(f"{LAYER}: bias has shape {bias.shape}; w has {cout} "
                                         f"output channels")
        self.shape, self.taps_per_pass, self.device = w.shape, taps_per_pass, device
        layout = kernel.Conv2dPlan(kh, kw, cin, cout, kh, kw, 1, 1, (0, 0, 0, 0),
                                   taps_per_pass=taps_per_pass).check()
        self.placement = placement
        self.buffer = upload(device, np.asarray(layout.weight_stream(w, bias), np.float32),
                             placement)

    @property
    def nbytes(self):
        return self.buffer.nbytes

    def free(self):
        release(self.device, self.buffer, self.placement)


def prepare_conv2d(w, bias=None, device=None, taps_per_pass=0, placement=None):
    """Lay out conv2d weights (KH, KW, Cin, Cout) and bias (Cout,) once, on ``device`` (in
    ``placement``, a layer_call.WeightArena, if given)."""
    taps_per_pass = check_int(LAYER, "taps_per_pass", taps_per_pass, low=0)
    return PreparedConv2d(w, bias, pick_device(device), taps_per_pass, placement)


def conv2d(x, w, bias=None, stride=1, padding="same", activation=None, out=None, device=None,
           num_qpus=12, return_run=False, dtype=None, x_layout="hwc", lanes="auto"):
    """y[i, j, o] = act(bias[o] + sum over the window and c of x[., ., c] * w[., ., c, o]).

    x (H, W, Cin); stride any int >= 1; padding "same" (TensorFlow), "valid" or (top, bottom,
    left, right). Built for small Cin (the stem); any shape is computed correctly.
    x_layout "chw": x is given as planes, (Cin, H, W), as an NCHW model's input comes (copying
    it in needs no transpose); the kernel then reads no padding, so the padding must come to
    zero (pad the planes in memory).
    Storage: x float32 (the network's input); w float32 or float16; the result float32 or
    float16: ``out``'s dtype, else ``dtype``, else float32.
    lanes: what the kernel's 16 lanes hold: "pixels" (any shape), "channels" (Cout 32, a window
    of at most 27 taps, no left padding: the stem, faster), "auto" channels where they fit.
    """
    device = pick_device(device, x, out)
    check_on_device(LAYER, "x", x, device)
    x = check_tensor(LAYER, "x", x, 3)
    x_layout = check_layout(LAYER, "x_layout", x_layout)
    stride = check_int(LAYER, "stride", stride)
    activation = check_activation(LAYER, activation)
    num_qpus = check_int(LAYER, "num_qpus", num_qpus)
    h, wd, channels = (x.shape[1], x.shape[2], x.shape[0]) if x_layout == "chw" else x.shape
    shape = w.shape if isinstance(w, PreparedConv2d) else np.shape(w)
    if len(shape) != 4 or shape[2] != channels:
        raise LayerArgumentError(f"{LAYER}: w has shape {tuple(shape)}; it must be (KH, KW, "
                                 f"{channels}, Cout) for x of shape {x.shape} (x_layout "
                                 f"{x_layout!r})")
    kh, kw, cin, cout = shape
    pads, (oh, ow) = resolve_padding(LAYER, padding, h, wd, kh, kw, stride, stride)
    if x_layout == "chw" and any(pads):
        raise LayerArgumentError(f"{LAYER}: x_layout='chw' reads no padding, but padding "
                                 f"{padding!r} pads {tuple(pads)} (top, bottom, left, right) "
                                 f"here; pad the planes in memory and give padding='valid'")
    out_storage = result_storage(LAYER, dtype, out, "fp32")
    out = check_out(LAYER, out, (oh, ow, cout), DTYPE_OF_STORAGE[out_storage], device)
    prepared = w if isinstance(w, PreparedConv2d) else None
    if prepared is not None and bias is not None:
        raise LayerArgumentError(f"{LAYER}: give the bias to prepare_conv2d, not with prepared "
                                 f"weights")
    taps_per_pass = prepared.taps_per_pass if prepared else 0
    if lanes not in kernel.LANE_CHOICES:
        raise LayerArgumentError(f"{LAYER}: lanes={lanes!r}: one of {kernel.LANE_CHOICES}")
    plan = kernel.with_lanes(kernel.Conv2dPlan(
        h, wd, cin, cout, kh, kw, stride, stride, pads, activation, num_qpus,
        out_storage=out_storage, taps_per_pass=taps_per_pass, in_layout=x_layout), lanes).check()
    if prepared is None:
        prepared = PreparedConv2d(w, bias, device, taps_per_pass)
    try:
        with LayerCall(device, host_result=not isinstance(x, Buffer)) as call:
            x_buf = call.on_device(x)
            y = call.result_buffer(out, (oh, ow, cout), DTYPE_OF_STORAGE[out_storage])
            zero = call.zeros(plan.zero_words).address if plan.zero_words else 0
            streams = uniform_streams(call, plan, x_buf, y, prepared.buffer, zero)
            run = device.execute(kernel.program_for(plan), plan.qpus, streams)
            return call.finish(y, out, run, return_run)
    finally:
        if prepared is not w:
            prepared.free()


def uniform_streams(call, plan, x_buf, y, weights, zero_address):
    """The QPUs' uniform streams in one device buffer (records hold addresses inside it)."""
    if plan.lanes == "channels":
        table = call.temporary(2 * kernel.LANES, np.uint32)
        table[:] = np.array(conv2d_channels.lane_table(plan), np.uint32)
        return conv2d_channels.streams(plan, x_buf.address, y.address, weights.address,
                                       table.address, zero_address)
    addresses = (x_buf.address, y.address, weights.address, zero_address)
    return streams_in_buffer(lambda words: call.temporary(words, np.uint32), plan.qpus,
                             lambda bases: plan.streams(bases, *addresses))
