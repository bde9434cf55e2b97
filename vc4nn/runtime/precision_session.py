"""precision="auto" on a session: the calibration inputs, the float32 reference, the per-layer
tries (precision_auto.py) and the check of the network's output (precision_output.py), each
try in the session rebuilt with the storage tried."""

from . import precision_auto as auto
from .precision import network_output, relative_error, synthetic_feed
from .precision_output import hold_output


def calibration_feeds(session, calibration):
    """The feeds of the calibration inputs (None: two seeded synthetic inputs)."""
    i = session.get_inputs()[0]
    if calibration is None:
        return [synthetic_feed(i, seed) for seed in range(2)]
    return [{i.name: x} for x in calibration]


def choose_storage(session, reference, tolerance, output_tolerance, calibration, progress):
    """The StoragePlan "auto" picks for ``session`` (built with its initial plan, not yet
    built), ``reference`` a float32 session of the same model (closed here)."""
    feeds = calibration_feeds(session, calibration)
    g, notes = session.graph, session.storage.notes
    names = {n for n, s in session.storage.layers.items() if s == "fp16"}
    try:
        traces, outputs32 = auto.reference_traces(reference, feeds, names)
    finally:
        reference.close()

    def tried(storage, layers):
        return session.built_with(storage, progress,
                                  lambda s: auto.try_layers(s, traces, layers))

    trials = {c: tried(auto.trial_plan(g, names, c[1]), names) for c in auto.TRIALS}
    choices = auto.choose(g, trials, traces, tolerance)
    flipped = auto.flips(g, choices, trials, traces, tolerance)
    if flipped:
        group = auto.affected(g, flipped)
        with_flips = dict(choices, **{n: (c, "") for n, c in flipped.items()})
        choices = auto.keep_faster(g, choices, flipped,
                                   tried(auto.chosen_plan(g, choices, notes), group),
                                   tried(auto.chosen_plan(g, with_flips, notes), group))

    def output_error(choices):
        outputs = session.built_with(auto.chosen_plan(g, choices, notes), progress,
                                     lambda s: [network_output(s, feed) for feed in feeds])
        return max(relative_error(y, y32) for y, y32 in zip(outputs, outputs32))

    kept_flips = {n for n in flipped if choices[n][0] != auto.FP32}
    choices, check = hold_output(g, choices, trials, traces, tolerance, output_tolerance,
                                 output_error, kept_flips)
    plan = auto.chosen_plan(g, choices, notes)
    plan.output_check = check
    return plan
