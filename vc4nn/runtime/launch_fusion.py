"""Which consecutive layers run in one launch: a pass over the memory plan.

Inside one launch a TMU read can return stale data: the layers' VDW stores do not invalidate
the TMU caches or the L2, only the host clears them, before each launch (facts section 3;
the emulator's ``tmu_stale_read``). A run of layers is safe in one launch when no bytes read
in it are rewritten before it ends: the planner keeps every value read in the span alive to
the span's end (``plan_memory(launch_spans=...)``), and values never share a 64-byte line.
The workspace a layer borrows from the arena is only lent where nothing alive uses it, and a
layer that took one ends its launch (``replay_chain.chains_of``).

Keeping values alive longer can grow the arena. Like tinygrad's scheduler, the pass plans
memory first and then fuses where the plan has slack: spans grow layer by layer, greedily, as
long as the arena stays within ``max_arena_bytes`` (by default the arena of the plan without
spans: launches fused for no extra memory).
"""

from .planner import VIEW_OPS, device_steps, plan_memory


def planned_launches(graph, storage_shapes, itemsizes, fuse=True):
    """(launch spans, the memory plan made for them) of ``graph``; no spans unless ``fuse``."""
    def plan_for(spans):
        return plan_memory(graph, storage_shapes, itemsizes=itemsizes, launch_spans=spans)
    if not fuse:
        return [], plan_for(())
    return launch_spans(graph, plan_for, plan_for(()).arena_bytes)


def launch_spans(graph, plan_for, max_arena_bytes):
    """[(first, last) step] of the launch groups of more than one layer, and the plan made
    with them. ``plan_for(spans)`` plans memory with those spans."""
    steps = device_steps(graph)
    spans, plan = [], plan_for(())        # (the base plan twice: cheap next to a session load)
    start = None                    # first step of the span being grown
    for index, node in enumerate(steps):
        if node.op in VIEW_OPS:
            continue                # a view launches nothing: it joins whatever span it is in
        if start is None:
            start = index
            continue
        trial = plan_for(spans + [(start, index)])
        if trial.arena_bytes <= max_arena_bytes:
            if spans and spans[-1][0] == start:
                spans[-1] = (start, index)
            else:
                spans.append((start, index))
            plan = trial
        else:
            start = index
    return spans, plan


def add_grouping_argument(parser):
    """The CLI's switch for ``InferenceSession(group_launches=)``."""
    parser.add_argument("--no-group-launches", dest="group_launches", action="store_false",
                        help="launch every layer on its own (default: consecutive layers share "
                             "a launch where the memory plan allows it; per-layer times then "
                             "go to the first layer of each launch)")
