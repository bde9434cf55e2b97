"""vc4nn accuracy MODEL: how far fp16 storage (and "auto") moves a model's outputs from float32.

    vc4nn accuracy model.onnx                   # 8 inputs: the photos
    vc4nn accuracy model.onnx -n 64 --json      # the photos, then 56 seeded photo variations
    vc4nn accuracy model.onnx -n 96 --save r.json   # r.json: the report so far, after each input
    vc4nn accuracy model.onnx --png growth.png  # per-layer error growth chart (matplotlib)

Inputs (needs scikit-image and Pillow): the 8 RGB photos that ship with scikit-image (chelsea,
coffee, astronaut, rocket, motorcycle_left, hubble_deep_field, retina, ihc) resized to the
model's input, then up to N seeded variations of its photographs (random crop of 25-100% of
the area, rescale, mirror, colour jitter; --seed picks another set). The model gets uint8
frames with its normalisation (--normalization, as vc4nn classify).

Per precision, against the float32 run of the same model on the same inputs (counts of N):
  top-1 agree     the same top-1 class as float32
  top-5 agree     float32's top-1 class is among the top 5 classes (top-5 accuracy with
                  float32's answer as the label; never below top-1 agree)
  top-5 set same  the same five classes in the top 5, in any order (stricter than top-5
                  agree: a swap of the 5th and 6th classes counts as a miss)
  out err         max |y - y32| / max |y32| per input: max and mean over the inputs
and a one-sided 95% Clopper-Pearson upper bound on the top-1 and top-5 disagreement rates
(N inputs all agreeing bound the rate below 1 - 0.05^(1/N): 4.6% for N = 64, 1% needs
N = 299). Per-layer error growth: on the first input, each layer's output error relative to
float32 when the whole network runs in that precision (errors made upstream included).

Runs on the device given (the emulator by default; its times are not used here).
"""

import argparse
import contextlib
import json
import math
import os

import numpy as np

from ..errors import Vc4nnError
from .accuracy_set import PHOTOS, accuracy_inputs
from .precision import PRECISIONS as KNOWN_PRECISIONS, output_host_step, relative_error, trace

DEFAULT_INPUTS = 8
PRECISIONS = ("fp16", "auto")
CONFIDENCE = 0.95


def traced_run(session, feed):
    """(the model's first output, {layer name: its output}) of one run of ``session`` on
    ``feed``."""
    layers = {name: y for name, (_, y, _) in trace(session, feed, with_inputs=False).items()}
    if output_host_step(session) is not None:
        output = session.run(None, feed)[0]             # a host softmax: run it whole
    else:
        output = session._output(session.graph.outputs[0], {})
    return np.asarray(output).reshape(-1), layers


def top_k(y, k):
    """The indices of the k largest scores, largest first (ties: the lower index first)."""
    return [int(i) for i in np.argsort(-np.asarray(y).reshape(-1), kind="stable")[:k]]


def agreement(got, expected):
    """Counts over the inputs (``got``, ``expected``: one score vector per input; expected is
    float32's): "top1": same top-1 class; "top5": float32's top-1 class is among got's top 5
    (top-5 accuracy with float32's answer as the label); "top5_set": the same five classes in
    the top 5 (in any order)."""
    pairs = list(zip(got, expected))
    return {"inputs": len(pairs),
            "top1": sum(top_k(g, 1) == top_k(e, 1) for g, e in pairs),
            "top5": sum(top_k(e, 1)[0] in top_k(g, 5) for g, e in pairs),
            "top5_set": sum(set(top_k(g, 5)) == set(top_k(e, 5)) for g, e in pairs)}


def disagreement_bound(agree, count, confidence=CONFIDENCE):
    """The one-sided Clopper-Pearson upper bound on the disagreement rate when ``agree`` of
    ``count`` inputs agree: the rate p at which seeing at most count - agree disagreements has
    probability 1 - confidence (0 disagreements: 1 - (1 - confidence) ** (1 / count))."""
    failures = count - agree
    if failures >= count:
        return 1.0
    tail = 1 - confidence

    def at_most(p):
        return sum(math.comb(count, i) * p ** i * (1 - p) ** (count - i)
                   for i in range(failures + 1))

    lo, hi = failures / count, 1.0          # at_most falls as p grows
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if at_most(mid) > tail else (lo, mid)
    return hi


def evaluate(model, device, count=DEFAULT_INPUTS, precisions=PRECISIONS,
             normalization="auto", num_qpus=12, seed=0, progress=False, after_input=None):
    """The report (a dict): per precision, agreement and output errors, the per-layer growth.
    Float32's session and one per precision are open together (device memory: their sum) and
    each input goes through all of them before the next, so ``after_input(report)`` gets the
    report of the inputs done so far after each one."""
    from .session import InferenceSession

    def session(precision):
        return InferenceSession(model, device=device, num_qpus=num_qpus,
                                image_input=normalization, progress=progress,
                                precision=precision, replay=False)

    with contextlib.ExitStack() as stack:
        sessions = {p: stack.enter_context(session(p)) for p in ("fp32",) + tuple(precisions)}
        arg = sessions["fp32"].get_inputs()[0]
        if arg.type != "uint8" or len(arg.shape) != 3:
            raise Vc4nnError(f"{model}: the accuracy report feeds uint8 frames; the model's input "
                             f"is {arg.shape} {arg.type}")
        inputs = accuracy_inputs(count, arg.shape[0], arg.shape[1], seed)
        outputs = {p: [] for p in sessions}
        layers = {}
        for i, (_, frame) in enumerate(inputs):
            feed = {arg.name: frame}
            for precision, sess in sessions.items():
                if i == 0:          # the per-layer growth: on the first input
                    y, layers[precision] = traced_run(sess, feed)
                else:
                    y = sess.run(None, feed)[0].reshape(-1)
                outputs[precision].append(y)
            report = _report(model, sessions, [label for label, _ in inputs[:i + 1]],
                             outputs, layers)
            report["inputs_requested"] = count
            if after_input is not None:
                after_input(report)
    return report


def _report(model, sessions, labels, outputs, layers):
    expected = outputs["fp32"]
    report = {"model": model, "inputs": labels, "confidence": CONFIDENCE, "precisions": {}}
    for precision, sess in sessions.items():
        if precision == "fp32":
            continue
        got = outputs[precision]
        storage = {node.name: sess.storage.layer(node) for node, _ in sess.steps}
        weights = {node.name: sess.weight_storage(node) for node, _ in sess.steps}
        errors = [relative_error(g, e) for g, e in zip(got, expected)]
        counts = agreement(got, expected)
        report["precisions"][precision] = {
            "agree": counts,
            "top1_agreement": counts["top1"] / counts["inputs"],
            "top5_agreement": counts["top5"] / counts["inputs"],
            "top5_set_identical": counts["top5_set"] / counts["inputs"],
            "disagreement_bound": {
                key: disagreement_bound(counts[key], counts["inputs"])
                for key in ("top1", "top5")},
            "output_error_max": float(max(errors)),
            "output_error_mean": float(np.mean(errors)),
            "per_input": [{"input": label, "top5": top_k(g, 5), "top5_fp32": top_k(e, 5),
                           "error": err}
                          for label, g, e, err in zip(labels, got, expected, errors)],
            "layers": [{"layer": name, "storage": storage.get(name, "fp32"),
                        "weights": weights.get(name, "-"),
                        "error": relative_error(y, layers["fp32"][name])}
                       for name, y in layers[precision].items()],
            "fp16_layers": sum(s == "fp16" for s in storage.values()),
            "fp16_weight_layers": sum(w == "fp16" for w in weights.values()),
            "output_check": sess.storage.output_check,
            "gpu_memory_bytes": sess.memory()["total_bytes"],
        }
    return report


def _count(agree, key):
    return f"{agree[key]}/{agree['inputs']}"


def _of_requested(report):
    requested = report.get("inputs_requested", len(report["inputs"]))
    return f" (of {requested} requested)" if requested != len(report["inputs"]) else ""


def text(report):
    rows, bounds, growth = [], [], []
    for precision, r in report["precisions"].items():
        agree, bound, layers = r["agree"], r["disagreement_bound"], r["layers"]
        rows.append(f"{precision:10} {r['fp16_layers']:>11d} {_count(agree, 'top1'):>11} "
                    f"{_count(agree, 'top5'):>11} {_count(agree, 'top5_set'):>14} "
                    f"{r['output_error_max']:>11.2e} {r['output_error_mean']:>12.2e} "
                    f"{r['gpu_memory_bytes'] / 1e6:>7.2f}")
        bounds.append(f"{precision}: with {agree['inputs']} inputs the disagreement rate is "
                      f"below {bound['top1']:.1%} (top-1) and {bound['top5']:.1%} (top-5) at "
                      f"{report['confidence']:.0%} confidence (one-sided Clopper-Pearson; the "
                      f"inputs taken as independent draws)")
        if layers:
            worst = max(layers, key=lambda x: x["error"])
            growth.append(f"{precision}: per-layer error on '{report['inputs'][0]}' grows from "
                          f"{layers[0]['error']:.1e} ({layers[0]['layer']}) to "
                          f"{layers[-1]['error']:.1e} ({layers[-1]['layer']}); largest "
                          f"{worst['error']:.1e} at {worst['layer']}")
    return "\n".join(
        [f"{report['model']}: {len(report['inputs'])} inputs{_of_requested(report)} "
         f"({', '.join(report['inputs'])})",
         f"{'precision':10} {'fp16 layers':>11} {'top-1 agree':>11} {'top-5 agree':>11} "
         f"{'top-5 set same':>14} {'out err max':>11} {'out err mean':>12} {'GPU MB':>7}"]
        + rows
        + ["top-1 agree: the same top-1 class as float32; top-5 agree: float32's top-1 class is "
           "in the top 5; top-5 set same: the same five classes; out err: max |y - y32| / "
           "max |y32| per input"]
        + bounds + growth)


def chart(report, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise Vc4nnError("--png needs matplotlib: pip install 'vc4nn[plots]'") from None
    fig, ax = plt.subplots(figsize=(8, 4))
    for precision, r in report["precisions"].items():
        ax.semilogy([max(x["error"], 1e-9) for x in r["layers"]], marker=".", label=precision)
    ax.set_xlabel("layer (network order)")
    ax.set_ylabel("relative error vs fp32")
    ax.set_title(f"{os.path.basename(report['model'])}: per-layer error on "
                 f"'{report['inputs'][0]}'")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def save(report, path):
    """Write ``report`` as JSON to ``path`` whole or not at all (a reader never sees half)."""
    partial = path + ".part"
    with open(partial, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
    os.replace(partial, path)


def accuracy_main(argv):
    from ..cli_common import add_device_arguments, open_device_of, positive_int, seed
    p = argparse.ArgumentParser(prog="vc4nn accuracy", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help=".tflite or .onnx file")
    add_device_arguments(p)
    p.add_argument("-n", "--inputs", type=positive_int, default=DEFAULT_INPUTS, metavar="N",
                   help=f"inputs: the {len(PHOTOS)} photos, then seeded variations of "
                        f"scikit-image's photos (default {DEFAULT_INPUTS})")
    p.add_argument("--seed", type=seed, default=0, help="seed of the photo variations")
    p.add_argument("--precisions", default=",".join(PRECISIONS),
                   help="compared with fp32, comma-separated (default fp16,auto)")
    p.add_argument("--normalization", default="auto", choices=("auto", "tflite", "torchvision"))
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--save", default=None, metavar="FILE",
                   help="write the JSON report to FILE after every input (a long run can be "
                        "read or stopped midway: 'inputs' lists those done, "
                        "'inputs_requested' is N)")
    p.add_argument("--png", default=None, help="per-layer error growth chart")
    args = p.parse_args(argv)
    precisions = [x for x in args.precisions.split(",") if x]
    bad = [x for x in precisions if x not in KNOWN_PRECISIONS]
    if bad or not precisions:
        raise Vc4nnError(f"--precisions {args.precisions}: comma-separated precisions from "
                         f"{', '.join(KNOWN_PRECISIONS)}")
    with open_device_of(args) as device:
        report = evaluate(args.model, device, args.inputs, precisions, args.normalization,
                          args.qpus, args.seed, progress=False if args.quiet else None,
                          after_input=(lambda r: save(r, args.save)) if args.save else None)
    print(json.dumps(report, indent=1) if args.json else text(report))
    if args.png:
        chart(report, args.png)
    return 0
