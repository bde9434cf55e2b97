"""vc4nn tune: search the tilings of MobileNet's layers in the cycle model and cache the winners.

    vc4nn tune --net v1                        # v1 1.0/224, Pi Zero preset, 12 QPUs
    vc4nn tune --net v2 --board pi1 --only b1.dw,b2.expand
    vc4nn tune --cache ./plans.json --json     # a cache file of your own; results as JSON
    vc4nn tune --net v1 --storage fp16         # the fp16 kernels' plans (their own keys)

Pointwise layers try every route (pixels per QPU, transposing the activation first) and panel
width, depthwise layers tile widths and heights (vc4nn/nn/tuning.py). Each candidate runs in the
emulator's cycle model; the fastest is stored in the tuned-plan cache, keyed by the layer's
exact shape and options, the QPU count and the board preset, and the layer functions (hence the
runtime) use it from then on (an explicit tiling= argument overrides). Cache: --cache, else
$VC4NN_TUNE_CACHE, else ~/.cache/vc4nn/tuned-plans.json. All times are cycle-model ESTIMATES at
the board's clock.

On the pure-Python emulator core pointwise candidates run on --pixels pixels (default 96; the
ranking of routes does not depend on the pixel count); with the C core, full layers (--pixels 0).
"""

import json
import sys

from .cli_bench import QUICK_PIXELS, handoff_layers, network_layers
from .cli_common import add_network_arguments, count


def add_arguments(parser):
    add_network_arguments(parser, "v1")
    parser.add_argument("--board", default="pi_zero", help="board preset (default pi_zero)")
    parser.add_argument("--only", default="", help="comma-separated layer names")
    parser.add_argument("--pixels", type=count, default=None,
                        help=f"pointwise candidates on at most this many pixels (0: all; "
                        f"default {QUICK_PIXELS} on the Python core, 0 on the C core)")
    parser.add_argument("--storage", choices=("fp32", "fp16"), default="fp32",
                        help="fp16: tune the layers as they run with activations and weights "
                        "stored as halves (precision fp16 or auto); their plans have keys of "
                        "their own")
    parser.add_argument("--cache", default=None, help="cache file (default: see above)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--show", action="store_true",
                        help="list the cache's records (default vs tuned) instead of tuning")


def tune_main(args):
    from .emulator import EmulatorDevice
    from .nn.tuned_plans import cache_path
    from .nn.tuning import tune_layers
    if args.show:
        return show_cache(cache_path(args.cache))
    device = EmulatorDevice(board=args.board)
    pixels = args.pixels
    if pixels is None:
        pixels = 0 if getattr(device, "core", "python") == "c" else QUICK_PIXELS
    labelled = network_layers(args)
    handed = handoff_layers(args, device)
    layers = [layer for _, layer in labelled]
    path = cache_path(args.cache)
    results = tune_layers(layers, device, path, args.qpus, pixels,
                          lambda line: print(line, file=sys.stderr, flush=True),
                          {layer: "chw" for network, layer in labelled
                           if (network, layer.name) in handed}, args.storage)
    rows = [{"layer": r.layer.name, "kind": r.layer.kind, "key": r.key,
             "default": r.default, "default_ms": 1e3 * r.default_clocks / r.clock_hz,
             "tuned": r.best, "tuned_ms": 1e3 * r.best_clocks / r.clock_hz,
             "speedup": r.speedup, "measured_on": r.run_shape, "scale": r.scale,
             "candidates": len(r.tried)} for r in results]
    if args.json:
        print(json.dumps({"board": args.board, "qpus": args.qpus, "storage": args.storage,
                          "cache": path,
                          "estimate": "cycle model, not measured", "layers": rows}, indent=1))
        return 0
    print(f"Tuned {len(rows)} layers; cache {path}. Cycle-model ESTIMATES, {args.board} "
          f"{device.timing.clock_hz / 1e6:.0f} MHz, {args.qpus} QPUs, storage {args.storage}; "
          f"kernel time only.")
    print(f"{'layer':12} {'measured on':20} {'default':34} {'ms':>8} {'tuned':34} {'ms':>8} "
          f"{'gain':>6}")
    for row in rows:
        scaled = "" if row["scale"] == 1 else f" x{row['scale']:.3g}"
        print(f"{row['layer']:12} {row['measured_on'] + scaled:20} {brief(row['default']):34} "
              f"{row['default_ms']:>8.3f} {brief(row['tuned']):34} {row['tuned_ms']:>8.3f} "
              f"{row['speedup'] - 1:>6.1%}")
    return 0


def brief(tiling):
    """A tiling in a few characters: D8 / T8 (route, pixels per QPU) or c8 r14 i16 o2."""
    if "max_rows" in tiling:
        return f"{'T' if tiling['transpose_input'] else 'D'}{tiling['max_rows']}"
    letters = {"tile_cols": "c", "tile_rows": "r", "in_chunk": "i", "out_chunk": "o"}
    return " ".join(f"{letter}{tiling[name]}" for name, letter in letters.items()
                    if name in tiling)


def show_cache(path):
    """Print every record of the cache: key, what it was measured on, default vs tuned."""
    from .nn.tuned_plans import TuneCache
    from .emulator.timing import BOARDS
    cache = TuneCache(path)
    print(f"{len(cache.records)} tuned layers in {path}; clocks are cycle-model ESTIMATES "
          f"(kernel time at the board's clock)")
    for key, record in sorted(cache.records.items()):
        kind, shape, qpus, board = key.split("|")
        hz = BOARDS[board.split("=")[1]].clock_hz if board.split("=")[1] in BOARDS else None
        ms = (lambda clocks: f"{1e3 * clocks / hz:.3f} ms" if hz and clocks else "?")
        default, tuned = record.get("default_clocks"), record.get("clocks")
        gain = f"{default / tuned - 1:.1%}" if default and tuned else "?"
        print(f"{kind} {shape} {qpus} {board}\n    measured on {record.get('measured_on')}"
              f" x{record.get('scale', 1):.3g}: default {brief(record.get('default_tiling', {}))}"
              f" {ms(default)} -> tuned {brief(record['tiling'])} {ms(tuned)} (gain {gain})")
    return 0
