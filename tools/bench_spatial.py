#!/usr/bin/env python3
"""Spatial layers (depthwise, the stem conv2d, avg_pool) in the emulator's cycle model: time
against the memory roofline.

    python tools/bench_spatial.py             # MobileNet v1 1.0/224 depthwise layers, stem, pool
    python tools/bench_spatial.py --reduce 4  # the same with H and W divided by 4 (minutes)
    python tools/bench_spatial.py --json      # one JSON object per layer

Every figure is a cycle-model ESTIMATE (vc4nn/emulator/timing.py) at the board's V3D clock,
not a measurement. Roofline: the input loaded once and the output stored once, one DMA memory
row per pixel and 16-channel block, at the model's DMA rates (vc4nn/nn/spatial_bench.py); the
fraction is roofline time / modelled kernel time (1.0 = the memory bus never idles). The launch
overhead (100 us) is left out of both. Correctness is the tests' job (tests/nn/); this tool
only times the layers.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vc4nn.emulator import EmulatorDevice  # noqa: E402
from vc4nn.nn.mobilenet_shapes import mobilenet_v1, mobilenet_v2  # noqa: E402
from vc4nn.nn.spatial_bench import measure  # noqa: E402

NETWORKS = {"v1": mobilenet_v1, "v2": mobilenet_v2}


def layers(network, alpha, size):
    """(name, measure() arguments) of the network's spatial layers, one per distinct shape."""
    seen, out = set(), []
    for layer in NETWORKS[network](alpha, size):
        if layer.kind == "depthwise":
            args = ("depthwise", layer.height, layer.width, layer.cin, None, layer.stride)
        elif layer.kind == "conv2d":
            args = ("conv2d", layer.height, layer.width, layer.cin, layer.cout, layer.stride)
        elif layer.kind == "global_avg_pool":
            args = ("avg_pool", layer.height, layer.width, layer.cin, None, layer.height)
        else:
            continue
        if args not in seen:
            seen.add(args)
            out.append((layer.name, args, layer.activation))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--network", choices=sorted(NETWORKS), default="v1")
    parser.add_argument("--alpha", type=float, default=1.0)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--reduce", type=int, default=1,
                        help="divide H and W of every layer but the pool by this")
    parser.add_argument("--qpus", type=int, default=12)
    parser.add_argument("--board", default="pi_zero")
    parser.add_argument("--only", default="", help="comma-separated layer names")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    device = EmulatorDevice(board=args.board)
    only = set(filter(None, args.only.split(",")))
    if not args.json:
        print(f"cycle-model estimates, board {args.board}, {args.qpus} QPUs, fp32, "
              f"MobileNet {args.network} {args.alpha}/{args.size}, H and W / {args.reduce}")
        print(f"{'layer':8} {'kind':9} {'in HxWxC':>14} {'s':>2} {'kernel ms':>10} "
              f"{'roof ms':>8} {'roof %':>7} {'MB moved':>9} {'host s':>7}")
    for name, (kind, h, w, c, cout, stride), activation in layers(args.network, args.alpha,
                                                                   args.size):
        if only and name not in only:
            continue
        if kind != "avg_pool":
            h, w = max(1, h // args.reduce), max(1, w // args.reduce)
        started = time.time()
        result = measure(kind, h, w, c, cout, stride, "valid" if kind == "avg_pool" else "same",
                         activation, device=device, num_qpus=args.qpus,
                         size=h if kind == "avg_pool" else 3)
        result["layer"], result["host_seconds"] = name, time.time() - started
        if args.json:
            print(json.dumps(result), flush=True)
            continue
        roof_ms = 1e3 * result["roofline_clocks"] / (result["clock_mhz"] * 1e6)
        print(f"{name:8} {kind:9} {f'{h}x{w}x{c}':>14} {stride:>2} {result['kernel_ms']:>10.3f} "
              f"{roof_ms:>8.3f} {100 * result['roofline_fraction']:>6.0f}% "
              f"{result['bytes'] / 1e6:>9.2f} {result['host_seconds']:>7.0f}", flush=True)


if __name__ == "__main__":
    main()
