#!/usr/bin/env python3
"""MobileNet end to end through the runtime: GPU time per inference, launches, host work, memory.

    python tools/bench_mobilenet.py --plan-only              # memory plans, no kernels run
    python tools/bench_mobilenet.py --model v1 --size 224    # MobileNet v1 1.0/224 (random weights)
    python tools/bench_mobilenet.py --model v1 --launch both # mailbox and direct launches, one run
    python tools/bench_mobilenet.py --model mnv2             # torchvision's MobileNetV2 (real)
    python tools/bench_mobilenet.py --model v2 --width 0.35 --size 32   # tiny MobileNetV2-style
    python tools/bench_mobilenet.py --model FILE.onnx        # any file
    python tools/bench_mobilenet.py --model v1 --precision auto   # fp16 storage where it pays
    python tools/bench_mobilenet.py --model v1 --no-group-launches  # every layer its own launch

In the emulator every GPU time is a cycle-model ESTIMATE at the board's V3D clock (default
pi_zero); the Pi Zero host figure scales this machine's measured host work by an assumed factor
(vc4nn/runtime/bench.py). v1/v2 with random weights are built as the tests' models
(vc4nn/runtime/random_mobilenets.py), v2 with all 17 blocks of the real network (the tests'
default has 12); the timing does not depend on the weights.
"""

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import onnx  # noqa: E402

import vc4nn  # noqa: E402
from vc4nn.device import LAUNCH_PATHS  # noqa: E402
from vc4nn.nn.mobilenet_shapes import V2_GROUPS  # noqa: E402
from vc4nn.runtime.bench import PI_ZERO_HOST_FACTOR, bench  # noqa: E402
from vc4nn.runtime.launch_fusion import add_grouping_argument  # noqa: E402
from vc4nn.runtime.loader import load_graph  # noqa: E402
from vc4nn.runtime.planner import plan_memory  # noqa: E402
from vc4nn.runtime.precision import PRECISIONS  # noqa: E402


def model_file(name, size, width, folder):
    if os.path.exists(name):
        return name
    path = os.path.join(folder, f"{name}_{width}_{size}.onnx")
    if name == "mnv2":
        from vc4nn.runtime.mobilenet_v2 import export_mobilenet_v2
        return export_mobilenet_v2(path)
    from vc4nn.runtime import random_mobilenets
    if name == "v1":
        model = random_mobilenets.mobilenet_v1(size, width, classes=1000)
    else:       # all 17 blocks: the tests' default v2 has 12
        model = random_mobilenets.mobilenet_v2(size, width, classes=1000, blocks=V2_GROUPS)
    onnx.save(model, path)
    return path


def plan_line(path):
    plan = plan_memory(load_graph(path))
    mib = 2 ** 20
    return {"model": path, "arena_bytes": plan.arena_bytes, "weight_bytes": plan.weight_bytes,
            "total_bytes": plan.total_bytes(), "text":
            f"{os.path.basename(path)}: planned GPU memory {plan.total_bytes() / mib:.2f} MiB "
            f"= activation arena {plan.arena_bytes / mib:.2f} MiB + float32 weights "
            f"{plan.weight_bytes / mib:.2f} MiB ({plan.total_bytes() / 1e6:.1f} MB)"}


def bench_one(path, args, launch):
    options = {"launch": launch}
    if (args.device or "emulator") == "emulator":
        options["board"] = args.board
    with vc4nn.open_device(args.device, **options) as device, \
            vc4nn.InferenceSession(path, device=device, num_qpus=args.qpus,
                                   memory_budget=args.memory_budget * 1e6 or None,
                                   precision=args.precision,
                                   group_launches=args.group_launches) as sess:
        report = bench(sess)
        fp16 = sum(s == "fp16" for s in sess.storage.layers.values())
    report["board"] = args.board
    report["precision"] = args.precision
    report["lines"].insert(0, f"-- {launch} launches --")
    report["lines"].append(f"precision {args.precision}: {fp16} of "
                           f"{len(sess.storage.layers)} layers store fp16")
    if sess.storage.output_check:
        report["lines"].append(f"auto: {sess.storage.output_check}")
    return report


def comparison(reports):
    """The two paths side by side, each figure naming the launches it includes."""
    lines = ["-- mailbox against direct launches, per inference --"]
    gpu = {r["launch_path"]: r["gpu_seconds"] for r in reports}
    for r in reports:
        lines.append(f"{r['launch_path']:>8}: GPU {r['gpu_seconds'] * 1e3:.2f} ms "
                     f"({r['launches']} {r['launch_path']} launches included)")
    saved = gpu["mailbox"] - gpu["direct"]
    lines.append(f"direct saves {saved * 1e3:.2f} ms of GPU time per inference "
                 f"({saved / gpu['mailbox'] * 100:.1f}%)")
    out = {"gpu_seconds": gpu, "lines": lines}
    if reports[0]["gpu_estimated"]:
        # The runtime's host work does not depend on the launch path in the emulator (launches
        # are answered at once while it is measured), so both totals use the less disturbed of
        # the two measurements of the same work; the Pi backend's launch code differs by path.
        runtime = min(r["host_seconds_this_machine"] for r in reports)
        host = {r["launch_path"]: (runtime + r["backend_host_seconds_this_machine"])
                * PI_ZERO_HOST_FACTOR for r in reports}
        total = {path: seconds + host[path] for path, seconds in gpu.items()}
        lines.append(f"end to end on a Pi Zero (estimate): mailbox {total['mailbox'] * 1e3:.1f} "
                     f"ms (host work {host['mailbox'] * 1e3:.1f} ms), direct "
                     f"{total['direct'] * 1e3:.1f} ms (host work {host['direct'] * 1e3:.1f} ms)")
    else:
        total = {r["launch_path"]: r["wall_seconds_median"] for r in reports}
        lines.append(f"end to end measured (median wall time, host work included): mailbox "
                     f"{total['mailbox'] * 1e3:.2f} ms, direct {total['direct'] * 1e3:.2f} ms")
    out["total_seconds"] = total
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="v1", help="v1, v2, mnv2 or an .onnx/.tflite file")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--width", type=float, default=1.0)
    p.add_argument("--qpus", type=int, default=12)
    p.add_argument("--board", default="pi_zero")
    p.add_argument("--device", default=None)
    p.add_argument("--launch", choices=LAUNCH_PATHS + ("both",), default="mailbox",
                   help="launch path (both: one session per path, in this run)")
    p.add_argument("--plan-only", action="store_true", help="memory plans of v1 and mnv2")
    p.add_argument("--memory-budget", type=float, default=24.0, metavar="MB",
                   help="device memory the session may hold with recorded launches; 0: no limit")
    p.add_argument("--precision", default="fp32", choices=PRECISIONS,
                   help="storage of weights and activations (InferenceSession precision=)")
    add_grouping_argument(p)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        if args.plan_only:
            reports = [plan_line(model_file(m, args.size, args.width, folder))
                       for m in ("v1", "mnv2")]
        else:
            path = model_file(args.model, args.size, args.width, folder)
            launches = LAUNCH_PATHS if args.launch == "both" else (args.launch,)
            reports = [bench_one(path, args, launch) for launch in launches]
            if len(reports) == 2:
                reports.append(comparison(reports))
    if args.json:
        print(json.dumps([{k: v for k, v in r.items() if k not in ("lines", "text")}
                          for r in reports], indent=1, default=str))
    else:
        for report in reports:
            print(report.get("text") or "\n".join(report["lines"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
