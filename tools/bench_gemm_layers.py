#!/usr/bin/env python3
"""MobileNet's GEMM-based layers (pointwise, fully connected, global pool) in the cycle model.

    python tools/bench_gemm_layers.py                        # v1 1.0/224, 12 QPUs, <= 192 pixels
    python tools/bench_gemm_layers.py --net v2 --pixels 0    # every pixel (slow in Python)
    python tools/bench_gemm_layers.py --only pw3,pw13 --json

Every figure is a cycle-model ESTIMATE (vc4nn/emulator/timing.py) at the board's V3D clock,
not a measurement. ``--pixels N`` runs a pointwise layer on min(H*W, N) pixels (a 1 x N input):
the kernel runs the same passes of rows x 12 QPUs over the whole weight matrix, only fewer of
them, so the share of peak carries over to the full layer (docs/kernels.md). Layers of the same
shape and options are run once. Peak = QPUs x 16 lanes x 2 flops / 4 clocks. Times exclude the
~100 us launch overhead of execute_qpu (per launch; T routes launch twice).
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_sgemm import STALL_ORDER, stall_shares  # noqa: E402
from vc4nn.emulator import EmulatorDevice  # noqa: E402
from vc4nn.kernels import pointwise as pointwise_kernel  # noqa: E402
from vc4nn.nn import mobilenet_shapes  # noqa: E402
from vc4nn.nn.layer_bench import run_layer  # noqa: E402

KINDS = ("pointwise", "global_avg_pool", "fully_connected")


def route(layer, pixels, num_qpus):
    if layer.kind != "pointwise":
        return ""
    plan = pointwise_kernel.PointwisePlan(1, pixels, layer.cin, layer.cout, num_qpus, True,
                                          layer.residual, layer.activation)
    return f"{'T' if plan.transposed else 'D'}{plan.panel.rows}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--net", choices=("v1", "v2"), default="v1")
    parser.add_argument("--alpha", type=float, default=1.0)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--qpus", type=int, default=12)
    parser.add_argument("--pixels", type=int, default=192, help="0: every pixel")
    parser.add_argument("--board", default="pi1")
    parser.add_argument("--only", help="comma-separated layer names")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    build = mobilenet_shapes.mobilenet_v1 if args.net == "v1" else mobilenet_shapes.mobilenet_v2
    layers = [l for l in build(args.alpha, args.size) if l.kind in KINDS]
    if args.only:
        names = args.only.split(",")
        layers = [l for l in layers if l.name in names]
    device = EmulatorDevice(board=args.board)
    rows, seen = [], {}
    for layer in layers:
        pixels = layer.height * layer.width
        if layer.kind == "pointwise" and args.pixels:
            pixels = min(pixels, args.pixels)
        key = (layer.kind, pixels, layer.cin, layer.cout, layer.residual, layer.activation)
        start = time.time()
        if key not in seen:
            seen[key] = run_layer(layer, device, args.qpus,
                                  pixels if layer.kind == "pointwise" else None)
        figures = seen[key]
        shares = stall_shares(figures.run)
        rows.append(dict(layer=layer.name, kind=layer.kind, shape=figures.shape,
                         full=f"{layer.height}x{layer.width}x{layer.cin}->{layer.cout}",
                         route=route(layer, pixels, args.qpus), qpus=args.qpus,
                         mhz=figures.run.clock_hz / 1e6, clocks=figures.cycles,
                         ms=figures.seconds * 1e3, gflops=figures.gflops,
                         peak=figures.peak_share, launches=figures.run.launches,
                         stalls=shares, wall_s=round(time.time() - start, 1)))
        if not args.json:
            print_row(rows[-1], header=len(rows) == 1, board=args.board)
    if args.json:
        print(json.dumps(rows, indent=1))


def print_row(row, header, board):
    if header:
        print(f"MobileNet GEMM layers, emulator cycle model ({board}) -- ESTIMATES, not "
              f"measurements")
        print(f"{'layer':>12} {'run as':>20} {'full layer':>20} {'route':>5} {'QPUs':>4} "
              f"{'clocks':>9} {'ms':>7} {'GFLOPS':>6} {'peak':>5} | "
              + " ".join(f"{c:>5}" for c in STALL_ORDER))
    print(f"{row['layer']:>12} {row['shape']:>20} {row['full']:>20} {row['route']:>5} "
          f"{row['qpus']:>4} {row['clocks']:>9} {row['ms']:>7.3f} {row['gflops']:>6.2f} "
          f"{row['peak']:>5.0%} | " + " ".join(f"{row['stalls'][c]:>5.0%}" for c in STALL_ORDER)
          + f"   ({row['wall_s']} s emulated)", flush=True)


if __name__ == "__main__":
    main()
