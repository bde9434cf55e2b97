#!/usr/bin/env python3
"""The Pi backend's own host work per launch, without a Pi: what vc4nn.pi's Python costs around
each launch (building and parsing the mailbox message, or writing the V3D registers and polling),
which the cycle model's launch overhead (calibrated on GPU_FFT's C code) does not contain.

    python tools/bench_pi_launch.py                  # 38 launches of 12 QPUs, as MobileNet v1
    python tools/bench_pi_launch.py --launches 29 --json

A real PiDevice runs on an instant OS boundary (vc4nn/pi/host_cost.py): the firmware answers
every mailbox call at once and every program completes at once, GPU memory is anonymous memory.
What is timed is vc4nn's code only; the Pi Zero figure scales it by the runtime bench's assumed
factor (vc4nn/runtime/bench.py, PI_ZERO_HOST_FACTOR): an estimate, not a measurement.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vc4nn.device import LAUNCH_PATHS  # noqa: E402
from vc4nn.pi.host_cost import seconds_per_launch  # noqa: E402
from vc4nn.runtime.bench import PI_ZERO_HOST_FACTOR  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--launches", type=int, default=38, help="launches per sequence")
    p.add_argument("--qpus", type=int, default=12)
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    reports = []
    for launch in LAUNCH_PATHS:
        sequence, single = seconds_per_launch(launch, [args.qpus] * args.launches,
                                              runs=args.runs)
        reports.append({"launch_path": launch, "qpus": args.qpus, "launches": args.launches,
                        "host_seconds_per_launch": sequence,
                        "host_seconds_per_launch_one_call_each": single,
                        "pi_zero_ms_per_sequence_estimate":
                            sequence * args.launches * PI_ZERO_HOST_FACTOR * 1e3})
    if args.json:
        print(json.dumps(reports, indent=1))
        return 0
    for r in reports:
        print(f"{r['launch_path']:>8}: {r['host_seconds_per_launch'] * 1e6:.1f} us of vc4nn's "
              f"Python per launch of {args.qpus} QPUs here in one execute_control_lists call "
              f"({r['host_seconds_per_launch_one_call_each'] * 1e6:.1f} us one call each); "
              f"{args.launches} launches about {r['pi_zero_ms_per_sequence_estimate']:.1f} ms on "
              f"a Pi Zero (assumed {PI_ZERO_HOST_FACTOR:.0f}x slower; an estimate)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
