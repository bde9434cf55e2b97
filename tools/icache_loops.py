#!/usr/bin/env python3
"""Which loops of the layer kernels do not fit the QPUs' instruction cache.

    python tools/icache_loops.py --net v1 --only dw7,pw7      # the layers bench-layers runs
    python tools/icache_loops.py --net v2 --json
    python tools/icache_loops.py --net v1 --kind depthwise --storage fp16

Runs each layer whole on the emulator (as ``vc4nn bench-layers --full``, same layouts and
default plans), and prints per launch: the program's size, the share of QPU time its QPUs
stalled on instruction-cache misses (stall cause ``icache``, a cycle-model ESTIMATE), the
slices' line look-ups that hit and missed, and every loop (a backward branch: from its target
to the branch's last delay slot) that cannot stay in a slice's cache: longer than the cache
(``icache_bytes``), or with more of its lines in one set than the set has ways. Such a loop
fetches lines again on every pass (docs/cycle-model.md "Instruction cache").
"""

import argparse
import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from asm import isa  # noqa: E402
from asm.encoding import branch_target, decode  # noqa: E402
from vc4nn.cli_bench import handoff_layers, network_layers  # noqa: E402
from vc4nn.device import BUS_ADDRESS_MASK  # noqa: E402
from vc4nn.emulator import EmulatorDevice  # noqa: E402
from vc4nn.nn.layer_figures import FULL, measure_layer  # noqa: E402


def loops(words, base):
    """(first, last) instruction indices of every backward branch's loop, sorted, distinct."""
    found = set()
    for i, word in enumerate(words):
        ins = decode(int(word))
        if ins.sig != isa.SIG_BRANCH or not ins.rel or ins.reg:
            continue
        target = (branch_target(ins, base + isa.INSTRUCTION_BYTES * i) - base) \
            // isa.INSTRUCTION_BYTES
        if 0 <= target <= i:
            found.add((target, i + isa.BRANCH_DELAY_SLOTS))
    return sorted(found)


def loop_record(first, last, base, icache):
    """A loop's size and what ``icache`` (a machine's InstructionCaches) makes of it (None when
    it stays in the cache)."""
    lines = range(icache.line_number(base + isa.INSTRUCTION_BYTES * first),
                  icache.line_number(base + isa.INSTRUCTION_BYTES * last) + 1)
    per_set = max(collections.Counter(icache.set_of(n) for n in lines).values())
    if per_set <= icache.timing.icache_ways:
        return None
    return {"first": first, "last": last, "instructions": last - first + 1,
            "lines": len(lines), "most_lines_in_a_set": per_set}


class Recorder:
    """Wraps a machine's run: per launch, the code it started and the instruction caches'
    counts."""

    def __init__(self, machine):
        self.machine, self.run, self.launches = machine, machine.run, []
        machine.run = self

    def __call__(self, num_qpus, control, timeout):
        m = self.machine
        entry = int(m.memory.read_words(control, 2, "control_list")[1]) & BUS_ADDRESS_MASK
        code, offset = m.memory.locate(entry, isa.INSTRUCTION_BYTES, "icache_loops")
        words = code[:code.size // isa.INSTRUCTION_BYTES * isa.INSTRUCTION_BYTES].view("<u8").copy()
        result = self.run(num_qpus, control, timeout)
        stalled = sum(q.stalls.get("icache", 0) for q in result.qpus)
        base = entry - offset               # bus address of the code (the cache's view)
        self.launches.append({
            "qpus": num_qpus, "instructions": len(words),
            "icache_share": stalled / max(1, result.cycles * num_qpus),
            "hits": m.icache.hits, "misses": m.icache.misses,
            "loops": [r for r in (loop_record(a, b, base, m.icache)
                                  for a, b in loops(words, base)) if r]})
        return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--net", default="v1", help="v1, v2 or v1,v2")
    parser.add_argument("--only", default="", help="layer names, comma-separated")
    parser.add_argument("--board", default="pi_zero")
    parser.add_argument("--qpus", type=int, default=12)
    parser.add_argument("--kind", default="", help="layer kinds (as bench-layers --kind)")
    parser.add_argument("--storage", default="fp32", choices=("fp32", "fp16"),
                        help="activations and weights as halves where the kernel can")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    spec = argparse.Namespace(net=args.net, only=args.only, alpha=1.0, size=224,
                              kind=args.kind, qpus=args.qpus, storage=args.storage)
    device = EmulatorDevice(board=args.board)
    recorder = Recorder(device.machine)
    handoffs = handoff_layers(spec, device)
    report = []
    for network, layer in network_layers(spec):
        layout = "chw" if (network, layer.name) in handoffs else "hwc"
        recorder.launches = []
        measure_layer(layer, device, args.qpus, FULL, {}, storage=args.storage, layout=layout)
        report.append({"network": network, "layer": layer.name, "layout": layout,
                       "launches": recorder.launches})
    if args.json:
        print(json.dumps({"board": args.board, "estimate": "cycle model", "layers": report},
                         indent=1))
        return 0
    print(f"Instruction cache per launch (cycle-model ESTIMATES, {args.board}, "
          f"{args.storage} storage): loops that do not "
          f"stay in a slice's {device.timing.icache_bytes} bytes")
    for r in report:
        for launch in r["launches"]:
            print(f"{r['network']} {r['layer']} ({r['layout']}): {launch['qpus']} QPUs, program "
                  f"{launch['instructions']} instructions, icache stalls "
                  f"{launch['icache_share']:.0%} of QPU time, {launch['hits']} hits / "
                  f"{launch['misses']} misses")
            for loop in launch["loops"]:
                print(f"    loop at {loop['first']}..{loop['last']}: {loop['instructions']} "
                      f"instructions, {loop['lines']} lines, {loop['most_lines_in_a_set']} in "
                      f"one set")
    return 0


if __name__ == "__main__":
    sys.exit(main())
