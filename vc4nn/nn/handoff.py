"""When a depthwise layer should hand its result to the pointwise layer after it channel-major.

A pointwise layer whose NHWC rows alias in the TMU cache (Cin*4 a multiple of 1 KB on 12 QPUs:
v1 1.0/224's pw5-pw13) runs as two launches: a transpose of x into [Cin, H*W], then the panel
kernel's transposed-input path (``PointwisePlan.route``). A depthwise layer can write its result
in that layout (``depthwise(..., out_layout="chw")``: vertical VDW stores) and the pointwise
layer read it as it is (``pointwise(..., x_layout="chw")``): one launch and one pass over the
activation fewer, for slightly dearer depthwise stores (docs/kernels.md "Handing over
transposed": every pair of v1 1.0/224 is faster in total). The runtime
(vc4nn/runtime/handoff.py) and `vc4nn bench-layers` ask this module.
"""

import dataclasses

from ..errors import Vc4nnError
from .tuned_plans import tuned_plan


def hands_over(depthwise_plan, pointwise_plan, device):
    """Whether the depthwise layer of ``depthwise_plan`` (a WindowPlan, NHWC result) should
    write its result channel-major for the pointwise layer of ``pointwise_plan`` (a
    PointwisePlan reading it as x, in the same storage): the pointwise layer, as its call would
    plan it (tuned cache included), transposes x itself, and the depthwise plan can store the
    layout. Halves too: the pointwise kernel's transposed path reads plain halves [Cin, H*W],
    as its own transpose writes them and the depthwise kernel's pixel pairs store them."""
    if depthwise_plan.out_storage != pointwise_plan.x_storage:
        return False
    if not tuned_plan(pointwise_plan, device).transposed:
        return False
    try:
        channel_major(depthwise_plan).check()
    except Vc4nnError:          # e.g. a channel's row longer than a VDW stride reaches
        return False
    return True


def channel_major(depthwise_plan):
    """The plan writing the same result channel-major, its tiling chosen anew for that layout
    (the staging of its stores decides how many QPUs it spreads over)."""
    tiling = dict.fromkeys(("tile_cols", "tile_rows", "in_chunk", "out_chunk", "store_buffers",
                            "max_qpus"), 0)
    return dataclasses.replace(depthwise_plan, out_layout="chw", **tiling).with_defaults()


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
