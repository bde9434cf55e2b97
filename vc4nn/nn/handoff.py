"""When a depthwise layer should hand its result to the pointwise layer after it channel-major.

A pointwise layer whose NHWC rows alias in the TMU cache (Cin*4 a multiple of 1 KB on 12 QPUs:
v1 1.0/224's pw5-pw13) runs as two launches: a transpose of x into [Cin, H*W], then the panel
kernel's transposed-input path (``PointwisePlan.route``). A depthwise layer can write its result
in that layout (``depthwise(..., out_layout="chw")``: vertical VDW stores) and the pointwise
layer read it as it is (``pointwise(..., x_layout="chw")``): one launch and one pass over the
activation fewer, for slightly dearer depthwise stores (docs/kernels.md "Handing over
transposed": every pair of v1 1.0/224 is faster in total). A float32 pointwise layer that reads
x directly is handed it channel-major too: its transposed path's gathers touch fewer cache
lines (``reads_channel_major_faster``). The runtime
(vc4nn/runtime/handoff.py) and `vc4nn bench-layers` ask this module.
"""

import dataclasses

from ..errors import Vc4nnError
from ..kernels.window_plan import CHOSEN_FIELDS
from .tuned_plans import tuned_plan


def hands_over(depthwise_plan, pointwise_plan, device):
    """Whether the depthwise layer of ``depthwise_plan`` (a WindowPlan, NHWC result) should
    write its result channel-major for the pointwise layer of ``pointwise_plan`` (a
    PointwisePlan reading it as x, in the same storage): the pointwise layer, as its call would
    plan it (tuned cache included), transposes x itself or reads float32 x faster channel-major
    (``reads_channel_major_faster``), and the depthwise plan can store the layout. Halves too:
    the pointwise kernel's transposed path reads plain halves [Cin, H*W], as its own transpose
    writes them and the depthwise kernel's pixel pairs store them."""
    if depthwise_plan.out_storage != pointwise_plan.x_storage:
        return False
    tuned = tuned_plan(pointwise_plan, device)
    if not (tuned.transposed or reads_channel_major_faster(depthwise_plan, tuned)):
        return False
    try:
        channel_major(depthwise_plan).check()
    except Vc4nnError:          # e.g. a channel's row longer than a VDW stride reaches
        return False
    return True


def reads_channel_major_faster(depthwise_plan, pointwise_plan):
    """Whether a float32 pointwise layer that would read x NHWC (direct route, none forced: a tuned
    or given ``transpose_input``/``max_rows`` is kept) is faster, with its depthwise writer's dearer
    vertical stores, reading it channel-major. The transposed path's gather reads 8 consecutive
    pixels of one channel (one or two TMU cache lines, which never alias), the direct one 8 pixels
    Cin*4 bytes apart (8 lines; at Cin = 128 two per set within a TMU pair). That pays after a
    stride-1 depthwise layer, and after a stride-2 one when x has at least MIN_CHW_CHANNELS channels
    and MIN_CHW_PIXELS pixels, or MIN_NARROWING_CHW_PIXELS when the pointwise layer has fewer
    outputs than inputs (v2's projections; with the window kernels' channel-major plans of session 7
    and the instruction cache in the model, v2 1.0/224 b6 (s2, 14x14x192 -> 64) 1.601 -> 1.481 ms,
    b13 (s2, 7x7x576 -> 160) 1.697 -> 1.604, v2 0.5/128 b3 0.998 -> 0.927, b6 0.274 -> 0.263, v2
    0.25/224 b13 0.348 -> 0.347; v1's stride-2 pairs, which widen, stayed faster NHWC below 28x28:
    0.5/128 dw4 0.942 -> 0.945, dw6 0.618 -> 0.622; with 48 channels v2 0.25/224's b6 0.407 ->
    0.414); smaller stride-2 pairs lose up to 6%. Measured (cycle model, pi_zero, 12 QPUs, full
    layers, default plans; ms of the depthwise + pointwise pair, NHWC -> channel-major): v1 1.0/224
    dw1+pw1 11.99 -> 11.43, dw2+pw2 (s2, 56x56x64) 10.52 -> 10.16, dw3+pw3 12.17 -> 11.54, dw4+pw4
    (s2, 28x28x128) 6.60 -> 6.40; v2 1.0/224 every dw+project pair so chosen 0.3-9% faster (b0 9.28
    -> 8.42, b1 (s2, 56x56x96) 12.29 -> 11.82, b3 (s2, 28x28x144) 4.49 -> 4.28), b13 (s2, 7x7x576)
    1.623 -> 1.636; v1 0.5/128 stride 1 (64x64x16, 32x32x64, 16x16x128) 3-6% faster, stride 2
    32x32x32 1.546 -> 1.642, 16x16x64 0.869 -> 0.915, 8x8x128 0.565 -> 0.587, 4x4x256 0.684 ->
    0.694. Halves read channel-major after a stride-1 depthwise layer of at least MIN_CHW_CHANNELS
    channels (session 8, the fp16 pointwise kernel's pieces and parking, the fp16 depthwise
    kernel's channel pairs, which store NHWC only; ms of the pair, NHWC -> channel-major): v1
    1.0/224 dw3+pw3 9.095 -> 8.715, dw5+pw5 7.156 -> 6.878, dw1+pw1 (32 channels) 7.852 -> 7.856,
    stride 2 dw2+pw2 6.826 -> 6.933, dw4+pw4 4.676 -> 4.795; v2 1.0/224 every stride-1 pair so
    chosen faster (b2 6.793 -> 6.605, b4 2.383 -> 2.210, b16 2.657 -> 2.493; fp16 v2 81.14 ->
    80.04 ms, v1 82.72 -> 82.06), though v2 b2's depthwise layer alone then runs 1.57x its float32
    time, not 1.74x. Session 9 (the fp16 depthwise kernel's half-row load buffers, which made
    its channel-major plans cheaper, and the fp16 pointwise kernel's deep chunks) added the pairs
    of fewer channels that gain: a multiple of 32 channels, or 112x112 pixels (fp16, ms of the
    pair, NHWC -> channel-major): v1 1.0/224 dw1+pw1 (112x112x32) 6.961 -> 6.608, v2 1.0/224
    b0 (112x112x32 -> 16) 6.53 -> 5.95, v1 0.25/224 dw1+pw1 (112x112x8) 2.487 -> 2.450, dw3+pw3
    (56x56x32) 1.834 -> 1.670, v2 0.35/224 b0 (112x112x16 -> 8) 3.578 -> 3.210; and leaves the
    ones that lose: v1 0.5/128 dw1+pw1 (64x64x16) 1.386 -> 1.437, v2 0.35/224 b2 (56x56x48 ->
    8) 2.531 -> 2.994. The precision choice ("auto") compares sessions by the values they hand
    over."""
    if (pointwise_plan.input_layout != "hwc" or pointwise_plan.transpose_input is not None
            or pointwise_plan.max_rows is not None):
        return False
    stride_1 = depthwise_plan.stride_h == depthwise_plan.stride_w == 1
    if pointwise_plan.x_storage == "fp16":
        return stride_1 and (pointwise_plan.cin >= MIN_CHW_CHANNELS or pointwise_plan.cin % 32 == 0
                             or pointwise_plan.pixels >= MIN_FP16_CHW_PIXELS)
    if stride_1:
        return True
    if pointwise_plan.cin < MIN_CHW_CHANNELS:
        return False
    narrows = pointwise_plan.cout < pointwise_plan.cin       # MobileNet v2's projections
    return pointwise_plan.pixels >= (MIN_NARROWING_CHW_PIXELS if narrows else MIN_CHW_PIXELS)


# see reads_channel_major_faster
MIN_CHW_CHANNELS, MIN_CHW_PIXELS, MIN_NARROWING_CHW_PIXELS = 64, 28 * 28, 7 * 7
MIN_FP16_CHW_PIXELS = 112 * 112


def channel_major(depthwise_plan):
    """The plan writing the same result channel-major, its tiling and loop shape chosen anew for
    that layout (the staging of its stores decides how many QPUs it spreads over)."""
    choose = {f.name: f.default for f in dataclasses.fields(depthwise_plan)
              if f.name in CHOSEN_FIELDS}
    return dataclasses.replace(depthwise_plan, out_layout="chw", **choose).with_defaults()


def network_handoffs(layers, num_qpus, device, storage="fp32"):
    """Names of the layers of a network (``mobilenet_shapes.Layer`` list, in order) that hand
    over channel-major: each depthwise layer whose result the next, pointwise layer reads, and
    that pointwise layer, where ``hands_over`` says so (what the runtime would do)."""
    from .layer_figures import out_size
    from .layer_plans import plan_for
    names = set()
    for dw, pw in zip(layers, layers[1:]):
        if dw.kind != "depthwise" or pw.kind != "pointwise" or (pw.height, pw.width, pw.cin) != (
                out_size(dw.height, dw.stride), out_size(dw.width, dw.stride), dw.cin):
            continue
        dw_plan, _ = plan_for(dw, dw.height, dw.width, num_qpus, device, storage=storage)
        pw_plan, _ = plan_for(pw, pw.height, pw.width, num_qpus, device, storage=storage)
        if hands_over(dw_plan, pw_plan, device):
            names.update((dw.name, pw.name))
    return names
