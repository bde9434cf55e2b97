"""precision="auto", second stage: hold the network's output, not only each layer's.

The per-layer stage (precision_auto.py) bounds each layer's own error. What moves a decision is
the error that reaches the output, and the two differ: rounding a layer's weights to halves
changes its filter the same way at every pixel (a systematic error, which the global pool keeps),
while rounding its result is independent from pixel to pixel and mostly averages out. On
torchvision's MobileNetV2 the first depthwise layer's fp16 weights, a 1e-4 error of their own,
move the top-1/top-2 margin of an input by twice the margin (docs/runtime.md "Precision").

So the whole network is run in the chosen storage on the calibration inputs and its output (the
logits: a host softmax's input) compared with float32's: error max |y - y32| / max |y32|. Above
``output_tolerance`` the stage takes protections: first layers' weights back to float32 (their
result stays a half if that qualified on the layer's own error, else all float32), cheapest
first, then half results back to float32, cheapest first. Weights first because their error is
the one that reaches the output and they cost little time (a depthwise layer's 3x3 weights per
channel, a pointwise layer's gathered by the TMU); a half result is the large saving. A
protection's cost is the layer's time in its new storage minus its chosen time, from the
per-layer tries. The stage takes protections in that order while their running total of cost
stays within a budget, for budgets of BUDGETS of the layers' chosen time in turn, and stops at
the first whose output error is within the tolerance (the full budget is every layer float32).
Each level costs one run of the network per calibration input.

A result that stays a half although float32 was faster alone (precision_auto.flips: its readers
gain more) is not offered back (its cost is its readers'); its weights are.
"""

from .precision_auto import FP32, HALF_RESULT, HALVES, options

# Budgets tried in turn, as fractions of the chosen layers' total time.
BUDGETS = (0.005, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


def protections(graph, choices, trials, traces, tolerance, flipped=()):
    """[(cost, layer, candidate)]: the steps towards float32 from each layer's choice, weights
    first, each kind cheapest first. A layer storing fp16 weights may keep float32 weights
    (HALF_RESULT, where a half result qualified on its own error, else FP32); every layer
    storing halves may then go all float32 (FP32). ``flipped``: layers whose result is not
    offered (their half result is for their readers; their weights are)."""
    weights, results = [], []
    for name, (chosen, _) in choices.items():
        if chosen == FP32:
            continue
        tried = {c: (error, time) for c, error, time in options(graph, trials, traces, name)}

        def step(candidate):
            return tried[candidate][1] - tried[chosen][1], name, candidate

        if chosen == HALVES and tried[HALF_RESULT][0] <= tolerance:
            weights.append(step(HALF_RESULT))
            results.append(step(FP32))
        else:
            (weights if chosen == HALVES else results).append(step(FP32))
    return sorted(weights) + sorted(s for s in results if s[1] not in flipped)


def within(steps, budget):
    """The first protections of ``steps`` whose running total of cost stays within budget
    (negative costs count as none)."""
    taken, total = [], 0
    for cost, name, step in steps:
        total += max(cost, 0)
        if total > budget:
            break
        taken.append((cost, name, step))
    return taken


def chosen_time(graph, choices, trials, traces):
    total = 0
    for name, (chosen, _) in choices.items():
        total += next(time for c, _, time in options(graph, trials, traces, name) if c == chosen)
    return total


def protected(choices, taken, error, output_tolerance, total):
    """``choices`` with the protections ``taken`` (a layer with both steps taken: FP32), each
    note saying why."""
    out, cost = dict(choices), {}
    for step_cost, name, step in taken:
        if out[name][0] != FP32:
            out[name] = (step, choices[name][1])
            cost[name] = max(step_cost, 0)        # FP32's is from the choice too
    for name in cost:
        step = out[name][0]
        what = "weights" if step == HALF_RESULT else "result and weights"
        out[name] = (step, f"{choices[name][1]}; float32 {what} to hold the network's output "
                           f"(output error {error:.1e} > {output_tolerance:g} without the "
                           f"protections), +{cost[name] / total:.2%} of the layers' time")
    return out


def hold_output(graph, choices, trials, traces, tolerance, output_tolerance, measure,
                flipped=()):
    """(choices, summary): ``choices`` with the protections the output needs, and a line saying
    what the output check found. ``measure(choices)``: the network's worst output error on the
    calibration inputs with those choices."""
    error = measure(choices)
    if error <= output_tolerance:
        return choices, (f"network output error {error:.1e} <= {output_tolerance:g} on the "
                         f"calibration inputs: no layer protected")
    steps = protections(graph, choices, trials, traces, tolerance, flipped)
    total = chosen_time(graph, choices, trials, traces) or 1
    first, taken, held = error, [], choices
    for budget in BUDGETS:
        affordable = within(steps, budget * total)
        if len(affordable) == len(taken):
            continue                                # no step more than the last budget's
        taken = affordable
        held = protected(choices, taken, first, output_tolerance, total)
        # every step taken is every offered layer float32: float32's own output
        error = 0.0 if len(taken) == len(steps) and not flipped else measure(held)
        if error <= output_tolerance:
            break
    layers = {name for _, name, _ in taken}
    cost = sum(max(c, 0) for c, n, step in taken if held[n][0] == step)
    return held, (f"network output error {first:.1e} > {output_tolerance:g} on the "
                  f"calibration inputs; {len(layers)} layers protected (+{cost / total:.1%} "
                  f"of the layers' time): {error:.1e}")
