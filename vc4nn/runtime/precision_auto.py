"""precision="auto": the storage of each layer's result and weights, chosen on calibration inputs.

Every layer "fp16" would run fp16 is tried in each storage its kernels take (CANDIDATES): its
result and weights as halves; its result as halves and its weights float32 (the pointwise
kernel then gathers float32 weights through the TMU instead of widening halves, which is faster
on the big layers); or all float32. Each try runs the layer's bound call of a session built with
that storage, on the input a float32 session gave that layer (every activation input: add's b
and a fused residual too), for every calibration input, and measures the layer's time (the cycle
model in the emulator, the clock on a Pi) and its output error max |y - y32| / max |y32|. The
layer takes the fastest candidate whose error stays within the tolerance on every input
(float32 always qualifies, and wins ties). Layers are chosen one by one (greedy): a layer's time
is measured with its neighbours in halves, as they are in the tries.
"""

from .precision import relative_error, run_time, storage_plan, trace

# (storage of the result, of the weights); float32 first: it wins ties.
FP32 = ("fp32", "fp32")
CANDIDATES = (FP32, ("fp16", "fp16"), ("fp16", "fp32"))


def label(candidate):
    """"fp16/fp32": result (activation) storage / weight storage."""
    return "/".join(candidate)


def trial_plan(graph, names, weights):
    """The StoragePlan of the tries with halves for results: weights as ``weights``."""
    return storage_plan(graph, names, fp32_weights=names if weights == "fp32" else ())


def reference_traces(reference, feeds, names):
    """The float32 ``reference`` session's inputs, output and time of the layers ``names``,
    per calibration feed."""
    return [trace(reference, feed, names) for feed in feeds]


def try_layers(session, traces, names):
    """{layer: (worst error, total time)} of ``session``'s calls of the layers ``names``, each
    run on the reference's inputs of that layer (``traces``)."""
    out = {}
    for node, call in session.steps:
        if node.name not in names:
            continue
        worst, total = 0.0, 0
        for t in traces:
            inputs, y32, _ = t[node.name]
            for name, x in inputs.items():
                session.hwc_view(name)[...] = x
            _, run = session._invoke(node, call)
            worst = max(worst, relative_error(session.hwc_view(node.outputs[0]), y32))
            total += run_time(run)
        out[node.name] = (worst, total)
    return out


def choose(trials, traces, tolerance):
    """{layer: (candidate, note)} from ``trials`` ({candidate: try_layers' result}; float32's
    times from the reference ``traces``)."""
    choices = {}
    for name in next(iter(trials.values())):
        fp32_time = sum(t[name][2] for t in traces)
        tried = [(FP32, 0.0, fp32_time)] + [(c, *trials[c][name]) for c in CANDIDATES
                                             if c in trials]
        fits = [(time, i) for i, (_, error, time) in enumerate(tried) if error <= tolerance]
        best = tried[min(fits)[1]][0]
        parts = [f"{label(c)} error {error:.1e} {'<=' if error <= tolerance else '>'} "
                 f"{tolerance:g}, {time / fp32_time if fp32_time else 1:.2f}x fp32's time"
                 for c, error, time in tried[1:]]
        choices[name] = (best, f"{label(best)} of {'; '.join(parts)}")
    return choices


def chosen_plan(graph, choices, notes):
    """The session's StoragePlan from ``choose``'s choices; ``notes`` (the initial plan's, e.g.
    weights outside the halves' range) are kept."""
    halves = {name for name, ((result, _), _) in choices.items() if result == "fp16"}
    fp32_weights = {name for name, ((result, weights), _) in choices.items()
                    if result == "fp16" and weights == "fp32"}
    plan = storage_plan(graph, halves, fp32_weights)
    plan.notes = dict(notes, **{name: note for name, (_, note) in choices.items()})
    return plan
