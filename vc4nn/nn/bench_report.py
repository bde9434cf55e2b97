"""Writers of the per-layer benchmark: the text table, the Markdown table of docs/kernels.md,
per-network totals with the issue's targets, JSON and a bar chart (matplotlib, optional).

Input: a list of records (``LayerFigures.as_dict()`` plus "network"), one per layer and board.
Every figure is labelled a cycle-model estimate with its board and clock.
"""

import collections
import json

from ..errors import Vc4nnError
from .stall_groups import STALL_COLUMNS

POINTWISE_PEAK_TARGET = 0.60        # pointwise layers with Cin >= 128: share of arithmetic peak
POINTWISE_TARGET_CIN = 128
DEPTHWISE_ROOF_TARGET = 0.70        # depthwise layers: share of the memory roofline
V1_TOTAL_TARGET_MS = 100.0          # all MobileNet v1 1.0/224 layers, Pi Zero preset
TARGET_BOARD = "pi_zero"


BOARD_ORDER = ("pi_zero", "pi1", "pi2", "pi3")
V1_TARGET_NETWORK = f"v1 {1.0:g}/224"       # the label cli_bench gives MobileNet v1 1.0/224


def boards_of(records):
    """The boards of the records, the target board (Pi Zero) first."""
    boards = dict.fromkeys(r["board"] for r in records)
    return sorted(boards, key=lambda b: BOARD_ORDER.index(b) if b in BOARD_ORDER else 99)


def by_layer(records):
    """{(network, layer name): {board: record}} in the order the layers came."""
    rows = collections.OrderedDict()
    for r in records:
        rows.setdefault((r["network"], r["name"]), {})[r["board"]] = r
    return rows


def clock_label(records, board):
    mhz = next(r["clock_hz"] for r in records if r["board"] == board) / 1e6
    return f"{board} {mhz:.0f} MHz"


def ran_as(r):
    """How the layer ran: full or reduced, and "chw out" / "chw in" for a pair handed over
    channel-major (vc4nn/nn/handoff.py)."""
    size = "full" if not r["reduced"] else f"{r['run_shape']} x{r['scale']:.3g}"
    if r.get("layout") == "chw":
        size += ", chw " + ("in" if r["kind"] == "pointwise" else "out")
    return size


def totals(records):
    """{(network, board): dict of the network's sums}."""
    out = collections.OrderedDict()
    for r in records:
        t = out.setdefault((r["network"], r["board"]), collections.Counter())
        t["ms"] += r["ms"]
        t["flops"] += r["flops"]
        t["bytes"] += r["bytes_moved"]
        t["launches"] += r["launches"]
        t["launch_ms"] += 1e3 * r["launches"] * r["launch_overhead_s"]
        t["reduced"] += r["reduced"]
        t["layers"] += 1
    for t in out.values():
        t["gflops"] = t["flops"] / t["ms"] / 1e6
    order = {b: i for i, b in enumerate(boards_of(records))}
    return collections.OrderedDict(sorted(out.items(), key=lambda kv: (kv[0][0],
                                                                         order[kv[0][1]])))


def target_misses(records, whole=True):
    """Lines naming each layer that misses the issue's per-layer targets (on TARGET_BOARD, or the
    first board) and the v1 total (only when ``whole``: every layer of the network ran)."""
    board = TARGET_BOARD if TARGET_BOARD in boards_of(records) else boards_of(records)[0]
    lines = []
    for r in records:
        if r["board"] != board:
            continue
        cin = int(r["shape"].split("x")[2].split("-")[0])
        if r["kind"] == "pointwise" and cin >= POINTWISE_TARGET_CIN and \
                r["peak_share"] < POINTWISE_PEAK_TARGET:
            lines.append(f"{r['network']} {r['name']} (pointwise {r['shape']}): "
                         f"{r['peak_share']:.0%} of peak < {POINTWISE_PEAK_TARGET:.0%}; "
                         f"bound: {r['bound']}")
        if r["kind"] == "depthwise" and r["roofline_share"] < DEPTHWISE_ROOF_TARGET:
            lines.append(f"{r['network']} {r['name']} (depthwise {r['shape']}): "
                         f"{r['roofline_share']:.0%} of the memory roofline < "
                         f"{DEPTHWISE_ROOF_TARGET:.0%}; bound: {r['bound']}")
    for (network, b), t in totals(records).items():
        if whole and network == V1_TARGET_NETWORK and b == TARGET_BOARD:
            verdict = "meets" if t["ms"] <= V1_TOTAL_TARGET_MS else "MISSES"
            lines.append(f"{network} total {t['ms']:.1f} ms on {b}: {verdict} the "
                         f"{V1_TOTAL_TARGET_MS:.0f} ms target")
    return lines


def header_lines(records, meta):
    boards = boards_of(records)
    reduced = any(r["reduced"] for r in records)
    stored = sorted({r.get("storage", "fp32") for r in records})
    lines = [f"Cycle-model ESTIMATES (not measurements), {meta['qpus']} QPUs, storage "
             f"{'/'.join(stored)} (arithmetic fp32), boards: "
             + ", ".join(clock_label(records, b) for b in boards) + f"; emulator core: "
             f"{meta['core']}."]
    if reduced:
        lines.append("Rows marked 'x N' ran reduced (pointwise: fewer pixels as a 1 x P input; "
                     "spatial: fewer output rows) and their time is that run's scaled by N "
                     "(full work / reduced work): an extrapolation, not a full-layer run.")
    lines.append("Kernel times exclude the launch overhead, given per network below.")
    return lines


def text_table(records, meta, stalls=False):
    """The table; ``stalls`` adds each stall cause's share of QPU time (STALL_COLUMNS) and the
    tiling that ran, on the first board."""
    boards = boards_of(records)
    first = boards[0]
    out = header_lines(records, meta)
    head = (f"{'net':9} {'layer':12} {'kind':15} {'shape':20} {'ran as':22} {'plan':8} {'store':5} "
            + " ".join(f"{b + ' ms':>10}" for b in boards)
            + f" {'GFLOPS':>6} {'MB':>6} {'peak':>5} {'roof':>5} bound   ({first})")
    if stalls:
        head += "      " + " ".join(f"{c[:5]:>5}" for c in STALL_COLUMNS) + "   bus  tiling"
    out.append(head)
    for (network, name), per_board in by_layer(records).items():
        r = per_board[first]
        out.append(f"{network:9} {name:12} {r['kind']:15} {r['shape']:20} {ran_as(r):22} "
                   f"{r['plan']:8} {r.get('storage', 'fp32'):5} "
                   + " ".join(f"{per_board[b]['ms']:>10.3f}" if b in per_board else f"{'-':>10}"
                              for b in boards)
                   + f" {r['gflops']:>6.2f} {r['bytes_moved'] / 1e6:>6.2f} "
                   f"{r['peak_share']:>5.0%} {r['roofline_share']:>5.0%} {r['bound']}"
                   + (f"{'':{16 - len(r['bound'])}}" + stall_cells(r) if stalls else ""))
    out.append("")
    out += total_lines(records)
    misses = target_misses(records, meta.get("whole", True))
    if misses:
        out.append("Targets (issue 12) missed or checked:")
        out += ["  " + line for line in misses]
    return "\n".join(out)


def stall_cells(r):
    """A record's stall shares (STALL_COLUMNS), the share of the run the memory bus was busy
    ("-" where unknown) and its tiling, as the text table prints them."""
    shares = r["shares"]
    tiling = ",".join(f"{k}={v}" for k, v in sorted(r.get("tiling", {}).items()))
    bus = r.get("bus_share")
    return (" ".join(f"{shares.get(c, 0.0):>5.0%}" for c in STALL_COLUMNS)
            + (f" {bus:>5.0%}" if bus is not None else f" {'-':>5}") + f"  {tiling}")


def total_lines(records):
    out = []
    for (network, board), t in totals(records).items():
        note = f", {t['reduced']} of {t['layers']} layers extrapolated" if t["reduced"] else ""
        out.append(f"{network} on {clock_label(records, board)}: {t['ms']:.2f} ms of kernels "
                   f"({t['gflops']:.2f} GFLOPS, {t['bytes'] / 1e6:.1f} MB moved{note}); plus "
                   f"{t['launches']} launches x launch overhead = {t['launch_ms']:.1f} ms if "
                   f"each is a separate launch")
    return out


def markdown_table(records, meta):
    boards = boards_of(records)
    first = boards[0]
    out = [" ".join(header_lines(records, meta)), ""]
    out.append("| net | layer | kind | shape | ran as | "
               + " | ".join(f"{clock_label(records, b)} ms" for b in boards)
               + f" | GFLOPS ({first}) | MB moved | % peak ({first}) | % roofline ({first}) | "
               f"bound ({first}) |")
    out.append("|" + "---|" * (10 + len(boards)))
    for (network, name), per_board in by_layer(records).items():
        r = per_board[first]
        out.append(f"| {network} | {name} | {r['kind']} | {r['shape']} | {ran_as(r)} | "
                   + " | ".join(f"{per_board[b]['ms']:.3f}" if b in per_board else "-"
                                for b in boards)
                   + f" | {r['gflops']:.2f} | {r['bytes_moved'] / 1e6:.2f} | "
                   f"{r['peak_share']:.0%} | {r['roofline_share']:.0%} | {r['bound']} |")
    out += [""] + ["- " + line for line in total_lines(records)]
    return "\n".join(out)


def json_report(records, meta):
    return json.dumps({"meta": dict(meta, estimate="cycle model, not measured"),
                       "layers": records,
                       "totals": [dict(network=n, board=b, **t)
                                  for (n, b), t in totals(records).items()],
                       "target_lines": target_misses(records, meta.get("whole", True))},
                      indent=1)


def bar_chart(records, path):
    """Per-layer kernel time, one bar per board, one panel per network."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise Vc4nnError(f"--png needs matplotlib (pip install matplotlib): {error}") from error
    networks = list(dict.fromkeys(r["network"] for r in records))
    boards = boards_of(records)
    fig, axes = plt.subplots(len(networks), 1, figsize=(14, 4.5 * len(networks)), squeeze=False)
    width = 0.8 / len(boards)
    for ax, network in zip(axes[:, 0], networks):
        rows = [(name, per) for (n, name), per in by_layer(records).items() if n == network]
        for i, board in enumerate(boards):
            xs = [j + i * width for j in range(len(rows))]
            ax.bar(xs, [per[board]["ms"] if board in per else 0 for _, per in rows], width,
                   label=clock_label(records, board))
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(rows))])
        ax.set_xticklabels([name for name, _ in rows], rotation=90, fontsize=7)
        ax.set_ylabel("kernel ms (cycle-model estimate)")
        ax.set_title(f"MobileNet {network}, per layer")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
