"""vc4nn bench-layers: every layer of MobileNet v1 and v2 in the emulator's cycle model.

    vc4nn bench-layers                         # v1 and v2 1.0/224, Pi Zero and Pi 1 presets
    vc4nn bench-layers --quick --net v1        # reduced runs, scaled (minutes on the Python core)
    vc4nn bench-layers --only pw13,dw13 --json
    vc4nn bench-layers --net v1 --kind gemm --stalls   # pointwise, FC, pool; per-stall shares
    vc4nn bench-layers --net v1 --kind spatial --rows 8 --boards pi_zero   # stem, dw, pool
    vc4nn bench-layers --net v1 --storage fp16 # activations and weights as halves
    vc4nn bench-layers --net v1 --storage fp16 --fp32-weights   # activations only
    vc4nn bench-layers --from-json a.json b.json --markdown --png layers.png

Per layer: its shape, kernel time on each board preset, GFLOPS, bytes moved, % of the
arithmetic peak (QPUs x 16 lanes x 2 flops / 4 clocks), % of the memory roofline (its bytes
moved once in 64-byte DMA rows at the model's DMA rates) and what bounds it (the largest share of
QPU time: instruction issue, memory = DMA/VPM/uniform fills, icache = instruction-cache misses,
TMU, semaphores, imbalance = QPUs idle at the end); totals per network. Every figure is a
cycle-model ESTIMATE at the board's V3D clock; kernel times exclude the launch overhead (stated
per network).

Full layers run when the emulator's C core is in use. On the pure-Python core (or with
--quick) pointwise layers run on at most --pixels pixels (and spatial layers on at most --rows
output rows if given), and their time is scaled to the full layer; such rows say "x N" and are never
presented as full runs. --full forces full layers on any core.

--kind picks layers by kind (conv2d, depthwise, pointwise, global_avg_pool, fully_connected, or
the groups gemm = pointwise, fully_connected, global_avg_pool and spatial = conv2d, depthwise,
global_avg_pool); --kind add lists v2's residual adds as layers of their own (as run when not
fused into the projection, whose residual then drops out; never in the default list); --stalls
adds each stall cause's share of QPU time, the share of the run the memory bus was busy ("bus":
near 100% the layer is bound by the bus, however high its QPUs' issue share) and the tiling that
ran.
The network total is checked against the issue's target only when every layer ran.
"""

import json
import sys
import time

from .cli_common import add_network_arguments, count, output_file
from .errors import Vc4nnError

QUICK_PIXELS = 96           # one pass of 8 pixels x 12 QPUs
QUICK_ROWS = 0             # spatial layers are cheap to emulate: full unless --rows is given
NETWORKS = ("v1", "v2")
DEFAULT_BOARDS = "pi_zero,pi1"
KIND_GROUPS = {"gemm": ("pointwise", "fully_connected", "global_avg_pool"),
               "spatial": ("conv2d", "depthwise", "global_avg_pool")}


def add_arguments(parser):
    add_network_arguments(parser, "v1,v2")
    parser.add_argument("--boards", default=DEFAULT_BOARDS,
                        help=f"board presets, comma-separated (default {DEFAULT_BOARDS})")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="reduced runs, scaled (see above)")
    mode.add_argument("--full", action="store_true", help="full layers even on the Python core")
    parser.add_argument("--pixels", type=count, default=QUICK_PIXELS,
                        help=f"reduced runs: pointwise pixels at most (0: all; default "
                        f"{QUICK_PIXELS})")
    parser.add_argument("--rows", type=count, default=QUICK_ROWS,
                        help="reduced runs: spatial output rows at most (default: all; few rows "
                        "weigh each tile's halo and ramp-up more)")
    parser.add_argument("--plans", choices=("tuned", "default"), default="tuned",
                        help="tuned: the layer API's choice (tuned cache, else default)")
    parser.add_argument("--storage", choices=("fp32", "fp16"), default="fp32",
                        help="fp16: activations and weights stored as halves where the layer's "
                        "kernel can (arithmetic stays fp32); the records say which ran so")
    parser.add_argument("--fp32-weights", action="store_true",
                        help="with --storage fp16: pointwise layers' weights stay float32 (the "
                        "runtime's precision='auto' tries this too: input and result as halves, "
                        "weights float32); their records' storage says fp16/fp32")
    parser.add_argument("--no-handoff", action="store_true",
                        help="run every depthwise result NHWC (by default a depthwise layer "
                        "whose pointwise reader would transpose it hands it over channel-major, "
                        "as the runtime does: the pair is then 2 launches, not 3)")
    parser.add_argument("--only", default="", help="comma-separated layer names")
    parser.add_argument("--kind", default="", help="comma-separated layer kinds or groups "
                        f"({', '.join(KIND_GROUPS)}); see above")
    parser.add_argument("--stalls", action="store_true",
                        help="text table: stall shares per cause, bus occupancy and the "
                        "tiling that ran")
    parser.add_argument("--json", action="store_true", help="JSON on stdout")
    parser.add_argument("--markdown", action="store_true", help="a Markdown table on stdout")
    parser.add_argument("--png", type=output_file, metavar="FILE",
                        help="per-layer bar chart (needs matplotlib)")
    parser.add_argument("--save", type=output_file, metavar="FILE",
                        help="append each layer's record to FILE (JSON lines) as it finishes")
    parser.add_argument("--from-json", nargs="+", metavar="FILE",
                        help="render the records of earlier --json / --save runs instead of "
                        "running")


def network_layers(args):
    from .nn import mobilenet_shapes
    builders = {"v1": mobilenet_shapes.mobilenet_v1, "v2": mobilenet_shapes.mobilenet_v2}
    nets = [n for n in args.net.split(",") if n]
    unknown = [n for n in nets if n not in builders]
    if unknown or not nets:
        named = f"unknown network(s) {', '.join(unknown)}" if unknown else "no network named"
        raise Vc4nnError(f"--net {args.net!r}: {named}; use {', '.join(NETWORKS)}")
    only = set(filter(None, args.only.split(",")))
    kind = getattr(args, "kind", "")                # vc4nn tune has no --kind
    kinds = layer_kinds(kind)
    out = []
    for net in nets:
        label = f"{net} {args.alpha:g}/{args.size}"
        build = builders[net]
        layers = build(args.alpha, args.size, unfused_adds=True) if "add" in kinds and \
            net == "v2" else build(args.alpha, args.size)
        out += [(label, layer) for layer in layers
                if (not only or layer.name in only) and (not kinds or layer.kind in kinds)]
    if not out:
        raise Vc4nnError(f"--only {args.only or '(all)'} --kind {kind or '(all)'}: no such "
                         f"layer in {args.net}")
    return out


def handoff_layers(args, device):
    """{(network label, layer name)} of the layers that hand over channel-major
    (vc4nn/nn/handoff.py), decided on each whole network whatever --only and --kind pick."""
    from .nn.handoff import network_handoffs
    whole = dict(vars(args), only="", kind="")
    networks = {}
    for network, layer in network_layers(type(args)(**whole)):
        networks.setdefault(network, []).append(layer)
    return {(network, name) for network, layers in networks.items()
            for name in network_handoffs(layers, args.qpus, device,
                                         getattr(args, "storage", "fp32"))}


def layer_kinds(text):
    """The set of kinds ``--kind`` names (empty: every kind)."""
    from .nn.layer_figures import KINDS
    kinds = set()
    for name in filter(None, text.split(",")):
        if name in KIND_GROUPS:
            kinds.update(KIND_GROUPS[name])
        elif name in KINDS:
            kinds.add(name)
        else:
            raise Vc4nnError(f"--kind {text}: {name!r} is not one of "
                             f"{', '.join(KINDS + tuple(KIND_GROUPS))}")
    return kinds


def run_records(args, progress=print, save=None):
    """Measure every layer on every board: records (dicts) and the run's metadata."""
    from .emulator import EmulatorDevice
    from .nn.layer_figures import FULL, Reduction, measure_layer
    records, core = [], None
    boards = [b for b in args.boards.split(",") if b]
    if not boards:
        raise Vc4nnError(f"--boards {args.boards!r} names no board preset")
    for board in boards:
        device = EmulatorDevice(board=board)
        core = getattr(device, "core", "python")
        reduce = not args.full and (args.quick or core != "c")
        reduction = Reduction(args.pixels, args.rows) if reduce else FULL
        seen = {}
        weights = "fp32" if getattr(args, "fp32_weights", False) else None
        handoffs = set() if getattr(args, "no_handoff", False) else \
            handoff_layers(args, device)
        for index, (network, layer) in enumerate(network_layers(args)):
            layout = "chw" if (network, layer.name) in handoffs else "hwc"
            key = (layer.kind, layer.height, layer.width, layer.cin, layer.cout, layer.stride,
                   layer.activation, layer.residual, args.storage, layout, weights)
            started = time.time()
            if key not in seen:
                seen[key] = measure_layer(layer, device, args.qpus, reduction,
                                          {} if args.plans == "default" else None,
                                          storage=args.storage, layout=layout,
                                          weights=weights)
            record = dict(seen[key].as_dict(), name=layer.name, network=network, core=core,
                          index=index)
            records.append(record)
            if save:
                with open(save, "a") as f:
                    f.write(json.dumps(record) + "\n")
            progress(f"[{board}] {network} {layer.name:12} {record['ms']:9.3f} ms "
                     f"({time.time() - started:.0f} s host)")
        device.close()
    return records, {"qpus": args.qpus, "core": core, "whole": not (args.only or args.kind),
                     "storage": args.storage}


def read_records(path):
    """The records of a --json report or a --save file (one record per line)."""
    try:
        with open(path) as f:
            text = f.read()
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict) and "layers" in data:
            return data["layers"]
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise Vc4nnError(f"--from-json {path}: not a bench-layers --json or --save file "
                         f"({error})") from error


def bench_main(args):
    from .nn import bench_report
    if args.from_json:
        records = []
        for path in args.from_json:
            records += read_records(path)
        records.sort(key=lambda r: (r["network"], r.get("index", 0)))
        meta = {"qpus": records[0]["num_qpus"], "core": records[0].get("core", "python"),
                "command": f"rendered from {' '.join(args.from_json)}"}
    else:
        records, meta = run_records(args, lambda line: print(line, file=sys.stderr,
                                                             flush=True), args.save)
        meta = dict(meta, command=getattr(args, "command_line", None))
    if args.json:
        print(bench_report.json_report(records, meta))
    elif args.markdown:
        print(bench_report.markdown_table(records, meta))
    else:
        print(bench_report.text_table(records, meta, args.stalls))
    if args.png:
        bench_report.bar_chart(records, args.png)
    return 0
