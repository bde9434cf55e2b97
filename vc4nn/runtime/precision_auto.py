"""precision="auto": the storage of each layer's result and weights, chosen on calibration inputs.

Every layer "fp16" would run fp16 is tried in each storage its kernels take (``candidates``):
its result and weights as halves; its result as halves and its weights float32 (the pointwise
kernel then gathers float32 weights through the TMU instead of widening halves, which is faster
on the big layers); or all float32. Each try runs the layer's bound call of a session built with
that storage on the input a float32 session gave that layer (every activation input: add's b and
a fused residual too), for every calibration input, and measures the layer's time (the cycle
model in the emulator, the clock on a Pi) and its output error max |y - y32| / max |y32|. The
layer takes the fastest candidate whose error stays within the tolerance on every input
(float32 always qualifies, and wins ties).

The tries measure each layer with its neighbours in halves, but a layer that keeps a float32
result makes its readers read float32 (a depthwise layer reading float32 takes ~1.6x as long):
so each layer that chose float32 although a half result qualified is measured again together
with its readers, in a session with the choices and in one with it flipped to halves, and
flipped where that is faster (``flips``, ``keep_faster``). The choices then go through the
check of the network's output (precision_output.py).
"""

from ..nn.storage import FP16_WEIGHTS
from .precision import decision_output, has_weights, read_view, readers, relative_error, \
    run_time, storage_plan, trace

# (storage of the result, of the weights)
FP32 = ("fp32", "fp32")
HALVES = ("fp16", "fp16")
HALF_RESULT = ("fp16", "fp32")
TRIALS = (HALVES, HALF_RESULT)          # the sessions the tries are made in


def node_named(graph, name):
    return next(node for node in graph.nodes if node.name == name)


def candidates(node):
    """The storages ``node``'s kernels take, float32 first (it wins ties)."""
    return [FP32, HALVES, HALF_RESULT] if node.op in FP16_WEIGHTS else [FP32, HALF_RESULT]


def label(graph, node, candidate):
    """"fp16/fp32": result (activation) storage / weight storage ("-": the layer has none)."""
    return f"{candidate[0]}/{candidate[1] if has_weights(graph, node) else '-'}"


def trial_plan(graph, names, weights):
    """The StoragePlan of the tries with halves for the results of ``names``, their weights
    as ``weights``."""
    return storage_plan(graph, names, fp32_weights=names if weights == "fp32" else ())


def reference_traces(reference, feeds, names):
    """(traces, outputs): per calibration feed, the float32 ``reference`` session's inputs,
    output and time of the layers ``names``, and the network's output (decision_output)."""
    traces, outputs = [], []
    for feed in feeds:
        traces.append(trace(reference, feed, names))
        outputs.append(decision_output(reference))
    return traces, outputs


def try_layers(session, traces, names):
    """{layer: (worst error, total time)} of ``session``'s calls of the layers ``names`` (those
    of them the traces hold), each run on the reference's inputs of that layer."""
    out = {}
    for node, call in session.steps:
        if node.name not in names or node.name not in traces[0]:
            continue
        worst, total = 0.0, 0
        for t in traces:
            inputs, y32, _ = t[node.name]
            for name, x in inputs.items():
                read_view(session, name)[...] = x
            _, run = session._invoke(node, call)
            worst = max(worst, relative_error(session.hwc_view(node.outputs[0]), y32))
            total += run_time(run)
        out[node.name] = (worst, total)
    return out


def options(graph, trials, traces, name):
    """[(candidate, worst error, total time)] of layer ``name``, float32 first."""
    node = node_named(graph, name)
    fp32_time = sum(t[name][2] for t in traces)
    return [(c, 0.0, fp32_time) if c == FP32 else (c, *trials[c][name])
            for c in candidates(node)]


def choose(graph, trials, traces, tolerance):
    """{layer: (candidate, note)} from ``trials`` ({HALVES / HALF_RESULT: try_layers' result})
    and float32's times in the reference ``traces``."""
    choices = {}
    for name in trials[HALVES]:
        tried = options(graph, trials, traces, name)
        fits = [(time, i) for i, (_, error, time) in enumerate(tried) if error <= tolerance]
        choices[name] = (tried[min(fits)[1]][0], note(graph, name, tried, tolerance))
    return choices


def note(graph, name, tried, tolerance):
    node, fp32_time = node_named(graph, name), tried[0][2]
    parts = [f"{label(graph, node, c)} error {error:.1e} {'<=' if error <= tolerance else '>'} "
             f"{tolerance:g}, {time / fp32_time if fp32_time else 1:.2f}x fp32's time"
             for c, error, time in tried[1:]]
    return '; '.join(parts)


def flips(graph, choices, trials, traces, tolerance):
    """{layer: its fastest qualifying candidate with a half result} of the layers that chose
    float32 although one qualified."""
    out = {}
    for name, (candidate, _) in choices.items():
        halves = [(time, c) for c, error, time in options(graph, trials, traces, name)
                  if c[0] == "fp16" and error <= tolerance]
        if candidate == FP32 and halves:
            out[name] = min(halves)[1]
    return out


def affected(graph, names):
    """The layers ``names`` and the layers reading their results."""
    consumers = graph.consumers()
    return set(names) | {r.name for name in names
                         for r in readers(consumers, node_named(graph, name).outputs[0])}


def keep_faster(graph, choices, flipped, before, after):
    """``choices`` with each flip of ``flipped`` kept where the layer and its readers take less
    time together in the session with the flips (``after``, try_layers' times) than without
    (``before``)."""
    out = dict(choices)
    for name, candidate in flipped.items():
        group = affected(graph, [name]) & set(before) & set(after)
        old = sum(before[n][1] for n in group)
        new = sum(after[n][1] for n in group)
        if new < old:
            out[name] = (candidate, choices[name][1] +
                         f"; with its readers {new / old:.2f}x the time of a float32 result")
    return out


def chosen_plan(graph, choices, notes):
    """The session's StoragePlan from the choices; ``notes`` (the initial plan's, e.g. weights
    outside the halves' range) are kept, and each chosen layer's note says what it chose."""
    halves = {name for name, ((result, _), _) in choices.items() if result == "fp16"}
    fp32_weights = {name for name, (candidate, _) in choices.items() if candidate == HALF_RESULT}
    plan = storage_plan(graph, halves, fp32_weights)
    plan.notes = dict(notes, **{
        name: f"{label(graph, node_named(graph, name), candidate)} of {text}"
        for name, (candidate, text) in choices.items()})
    return plan
