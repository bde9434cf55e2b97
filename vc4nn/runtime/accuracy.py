"""vc4nn accuracy MODEL: how far fp16 storage (and "auto") moves a model's outputs from float32.

    vc4nn accuracy model.onnx                   # 8 inputs: photos, then seeded synthetic images
    vc4nn accuracy model.tflite -n 12 --json
    vc4nn accuracy model.onnx --png growth.png  # per-layer error growth chart (matplotlib)

Inputs: the RGB photos that ship with scikit-image (chelsea, coffee, astronaut, ...; skipped if
scikit-image is missing) resized to the model's input, then seeded synthetic images (smooth
random colour fields with noise) up to N. The model gets uint8 frames with its normalisation
(--normalization, as vc4nn classify). Per precision: top-1 and top-5 agreement with the
float32 run (top-1: same class; top-5: same set of five), and the output's relative error
max |y - y32| / max |y32| per input (max and mean over the inputs). Per-layer error growth: on
the first input, each layer's output error relative to float32 when the whole network runs in
that precision (errors made upstream included), which shows where the error grows.

Runs on the device given (the emulator by default; its times are not used here).
"""

import argparse
import json
import os

import numpy as np

from ..cli_common import seed as seed_number
from ..errors import Vc4nnError
from .precision import PRECISIONS as KNOWN_PRECISIONS, relative_error

PHOTOS = ("chelsea.png", "coffee.png", "astronaut.png", "rocket.jpg", "motorcycle_left.png",
          "hubble_deep_field.jpg", "retina.jpg", "ihc.png")
DEFAULT_INPUTS = 8
PRECISIONS = ("fp16", "auto")


def photo_paths():
    try:
        import skimage
    except ImportError:
        return []
    folder = os.path.join(os.path.dirname(skimage.__file__), "data")
    return [os.path.join(folder, name) for name in PHOTOS
            if os.path.exists(os.path.join(folder, name))]


def synthetic_frame(h, w, seed):
    """A smooth random colour field plus fine noise: image-like statistics without a photo."""
    rng = np.random.default_rng(seed)
    coarse = rng.uniform(0, 255, (4, 4, 3))
    rows = np.linspace(0, 3, h)
    cols = np.linspace(0, 3, w)
    r0, c0 = np.floor(rows).astype(int).clip(0, 2), np.floor(cols).astype(int).clip(0, 2)
    fr, fc = (rows - r0)[:, None, None], (cols - c0)[None, :, None]
    field = ((1 - fr) * (1 - fc) * coarse[r0][:, c0] + fr * (1 - fc) * coarse[r0 + 1][:, c0]
             + (1 - fr) * fc * coarse[r0][:, c0 + 1] + fr * fc * coarse[r0 + 1][:, c0 + 1])
    return np.clip(field + rng.normal(0, 12, (h, w, 3)), 0, 255).astype(np.uint8)


def accuracy_inputs(count, h, w, seed=0):
    """[(label, uint8 frame)]: the photos first, then synthetic frames, ``count`` in all."""
    from .image import load_frame
    out = [(os.path.splitext(os.path.basename(p))[0], load_frame(p, h, w))
           for p in photo_paths()[:count]]
    for k in range(count - len(out)):
        out.append((f"synthetic{seed + k}", synthetic_frame(h, w, seed + k)))
    return out


def traced_run(session, feed):
    """(the model's first output, {layer name: its output (float64)}) of one run of
    ``session`` on ``feed``: the layers are called one by one and copied as they finish (the
    arena lends its bytes on)."""
    session._write_input(feed)
    layers = {}
    for node, call in session.steps:
        if call is not None:
            session._invoke(node, call)
            layers[node.name] = np.array(session._view(node.outputs[0]), np.float64)
    output = session.graph.outputs[0]
    if any(node.outputs[0] == output for node in session.host_steps):
        output = session.run(None, feed)[0]             # a host softmax: run it whole
    else:
        output = session._output(output, {})
    return np.asarray(output).reshape(-1), layers


def top_k(y, k):
    return list(np.argsort(-np.asarray(y).reshape(-1), kind="stable")[:k])


def evaluate(model, device, count=DEFAULT_INPUTS, precisions=PRECISIONS,
             normalization="auto", num_qpus=12, seed=0):
    """The report (a dict): per precision, agreement and output errors, the per-layer growth."""
    from .session import InferenceSession

    def session(precision):
        return InferenceSession(model, device=device, num_qpus=num_qpus,
                                image_input=normalization, progress=False,
                                precision=precision, replay=False)

    with session("fp32") as reference:
        arg = reference.get_inputs()[0]
        if arg.type != "uint8" or len(arg.shape) != 3:
            raise Vc4nnError(f"{model}: the accuracy report feeds uint8 frames; the model's input "
                             f"is {arg.shape} {arg.type}")
        h, w = arg.shape[:2]
        inputs = accuracy_inputs(count, h, w, seed)
        feeds = [{arg.name: frame} for _, frame in inputs]
        first, reference_layers = traced_run(reference, feeds[0])
        expected = [first] + [reference.run(None, feed)[0].reshape(-1) for feed in feeds[1:]]
    report = {"model": model, "inputs": [label for label, _ in inputs], "precisions": {}}
    for precision in precisions:
        with session(precision) as sess:
            first, layers = traced_run(sess, feeds[0])
            got = [first] + [sess.run(None, feed)[0].reshape(-1) for feed in feeds[1:]]
            storage = {node.name: sess.storage.layer(node) for node, _ in sess.steps}
            memory = sess.memory()["total_bytes"]
        errors = [relative_error(g, e) for g, e in zip(got, expected)]
        report["precisions"][precision] = {
            "top1_agreement": float(np.mean([top_k(g, 1) == top_k(e, 1)
                                             for g, e in zip(got, expected)])),
            "top5_agreement": float(np.mean([set(top_k(g, 5)) == set(top_k(e, 5))
                                             for g, e in zip(got, expected)])),
            "output_error_max": float(max(errors)),
            "output_error_mean": float(np.mean(errors)),
            "per_input": [{"input": label, "top1": int(top_k(g, 1)[0]),
                           "top1_fp32": int(top_k(e, 1)[0]), "error": err}
                          for (label, _), g, e, err in zip(inputs, got, expected, errors)],
            "layers": [{"layer": name, "storage": storage.get(name, "fp32"),
                        "error": relative_error(y, reference_layers[name])}
                       for name, y in layers.items()],
            "fp16_layers": sum(s == "fp16" for s in storage.values()),
            "gpu_memory_bytes": memory,
        }
    return report


def text(report):
    lines = [f"{report['model']}: {len(report['inputs'])} inputs ({', '.join(report['inputs'])})",
             f"{'precision':10} {'fp16 layers':>11} {'top-1 agree':>11} {'top-5 agree':>11} "
             f"{'out err max':>11} {'out err mean':>12} {'GPU MB':>7}"]
    for precision, r in report["precisions"].items():
        lines.append(f"{precision:10} {r['fp16_layers']:>11d} {r['top1_agreement']:>11.1%} "
                     f"{r['top5_agreement']:>11.1%} {r['output_error_max']:>11.2e} "
                     f"{r['output_error_mean']:>12.2e} {r['gpu_memory_bytes'] / 1e6:>7.2f}")
    lines.append("top-k agreement: same top-1 class / same top-5 set as float32; out err: "
                 "max |y - y32| / max |y32| per input")
    for precision, r in report["precisions"].items():
        layers = r["layers"]
        if not layers:
            continue
        worst = max(layers, key=lambda x: x["error"])
        lines.append(f"{precision}: per-layer error on '{report['inputs'][0]}' grows from "
                     f"{layers[0]['error']:.1e} ({layers[0]['layer']}) to {layers[-1]['error']:.1e}"
                     f" ({layers[-1]['layer']}); largest {worst['error']:.1e} at {worst['layer']}")
    return "\n".join(lines)


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


def accuracy_main(argv):
    from .. import open_device
    from ..cli_common import qpus
    p = argparse.ArgumentParser(prog="vc4nn accuracy", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help=".tflite or .onnx file")
    p.add_argument("--device", default=None, help="emulator (default) or pi")
    p.add_argument("--qpus", type=qpus, default=12)
    p.add_argument("--board", default=None, help="emulator board preset")
    p.add_argument("-n", "--inputs", type=int, default=DEFAULT_INPUTS,
                   help=f"inputs: the photos, then synthetic images (default {DEFAULT_INPUTS})")
    p.add_argument("--seed", type=seed_number, default=0,
                   help="first seed of the synthetic images (an int >= 0)")
    p.add_argument("--precisions", default=",".join(PRECISIONS),
                   help="compared with fp32, comma-separated (default fp16,auto)")
    p.add_argument("--normalization", default="auto", choices=("auto", "tflite", "torchvision"))
    p.add_argument("--json", action="store_true")
    p.add_argument("--png", default=None, help="per-layer error growth chart")
    args = p.parse_args(argv)
    precisions = [x for x in args.precisions.split(",") if x]
    bad = [x for x in precisions if x not in KNOWN_PRECISIONS]
    if bad or args.inputs < 1:
        raise Vc4nnError(f"--precisions {args.precisions} / -n {args.inputs}: precisions from "
                         f"{', '.join(KNOWN_PRECISIONS)}; at least one input")
    with open_device(args.device, **({"board": args.board} if args.board else {})) as device:
        report = evaluate(args.model, device, args.inputs, precisions, args.normalization,
                          args.qpus, args.seed)
    print(json.dumps(report, indent=1) if args.json else text(report))
    if args.png:
        chart(report, args.png)
    return 0
