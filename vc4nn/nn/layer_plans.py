"""The plan a layer function builds for a ``mobilenet_shapes.Layer``, and its tiling choices:
what the benchmark reports and what `vc4nn tune` varies. The pointwise and depthwise plans are
the layer modules' own (``pointwise_plan``, ``depthwise_plan``) for a call with a bias, "same"
padding and the layer's activation."""

from ..kernels import conv2d as conv2d_kernel
from ..kernels import pointwise as pointwise_kernel
from .depthwise import KERNEL, depthwise_plan
from .layer_args import resolve_padding
from .pointwise import pointwise_plan
from .tuned_plans import plan_tiling, tuned_plan

TUNABLE = ("pointwise", "depthwise")


def plan_for(layer, height, width, num_qpus, device, tiling=None, storage="fp32",
             layout="hwc", weights=None):
    """(plan, source) of ``layer`` run on a height x width input (activations and weights in
    ``storage``, where the kind has fp16 kernels): source is "explicit"
    (``tiling`` given), "default" (``tiling`` == {} or nothing in the cache) or "tuned".
    ``layout``: "chw" for a depthwise layer's result or a pointwise layer's input handed over
    channel-major (vc4nn/nn/handoff.py). ``weights``: a pointwise layer's weights' storage
    (None: ``storage``). Kinds without tiling choices give (None, "default")."""
    if layer.kind == "pointwise":
        plan = pointwise_plan(height, width, layer.cin, layer.cout, num_qpus, True,
                              layer.residual, layer.activation, storage, storage,
                              storage if layer.residual else "fp32", weights or storage,
                              layout,
                              **(tiling or {}))
    elif layer.kind == "depthwise":
        pads, _ = resolve_padding("depthwise", "same", height, width, *KERNEL, layer.stride,
                                  layer.stride)
        plan = depthwise_plan(height, width, layer.cin, (layer.stride, layer.stride), pads,
                              layer.activation, num_qpus, storage, storage, storage, layout,
                              **(tiling or {}))
    elif layer.kind == "conv2d":
        pads, _ = resolve_padding("conv2d", "same", height, width, 3, 3, layer.stride,
                                  layer.stride)
        return conv2d_kernel.with_lanes(conv2d_kernel.Conv2dPlan(
            height, width, layer.cin, layer.cout, 3, 3, layer.stride, layer.stride, pads,
            layer.activation, num_qpus, out_storage=storage)).check(), "default"
    else:
        return None, "default"
    if tiling is not None:
        return plan, "explicit" if tiling else "default"
    tuned = tuned_plan(plan, device)
    return tuned, "default" if tuned == plan else "tuned"


def resolved_tiling(plan):
    """The tiling the generator uses for ``plan`` (defaults resolved)."""
    if plan is None:
        return {}
    if isinstance(plan, pointwise_kernel.PointwisePlan):
        return {"transpose_input": plan.transposed, "max_rows": plan.most_rows,
                "panel_vectors": plan.vectors,
                "gather_weights": plan.gathers, "balance_passes": plan.balance_passes,
                "spread_rows": plan.spreads, "spread_leaves": plan.spreads_on_leaves,
                "pair_gathers": plan.pairs, "park_rows": plan.parks,
                "chunk_depth": plan.depth, "stagger": plan.staggers}
    if isinstance(plan, conv2d_kernel.Conv2dPlan):
        if plan.lanes == "channels":
            return {"lanes": "channels"}
        return {"taps_per_pass": plan.pass_taps}
    plan = plan.with_defaults()
    tiling = plan_tiling(plan)
    tiling.pop("buffers")
    return dict(tiling, max_qpus=plan.qpus)     # (its chunks decide how many QPUs it spreads over)
