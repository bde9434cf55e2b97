#!/usr/bin/env python3
"""SGEMM in the emulator's cycle model: time, GFLOPS, share of peak and what the QPUs wait on.

    python tools/bench_sgemm.py            # the shapes of docs/sgemm.md on 1/4/8/12 QPUs (slow)
    python tools/bench_sgemm.py --quick    # smaller shapes, 12 QPUs: a smoke test in seconds

Every figure is a cycle-model ESTIMATE (vc4nn/emulator/timing.py), not a measurement. Each
shape runs once per distinct V3D clock of the boards asked for (memory bandwidths are fixed in
bytes/s, so the clocks a transfer takes depend on the V3D clock). Peak = QPUs x 16 lanes x
2 flops / 4 clocks. The stall columns split the QPUs' total time (QPUs x run clocks): "issue"
is instructions issuing (4 clocks each), "idle" is a QPU that has finished waiting for the last.
Results are checked against numpy on every run.
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vc4nn import sgemm  # noqa: E402
from vc4nn.emulator import EmulatorDevice  # noqa: E402
from vc4nn.emulator.qpu import STALL_CAUSES  # noqa: E402
from vc4nn.emulator.timing import BOARDS  # noqa: E402
from vc4nn.kernels.sgemm import reference  # noqa: E402
from vc4nn.nn.layer_figures import FLOPS_PER_QPU_CLOCK, stall_shares  # noqa: E402

# (M, N, K, what it is)
SHAPES = [
    (96, 3072, 363, "AlexNet conv1 as GEMM"),
    (12544, 64, 32, "MobileNet pw1 112x112 32->64"),
    (49, 1024, 1024, "MobileNet pw13 7x7 1024->1024"),
]
QUICK_SHAPES = [
    (96, 384, 363, "AlexNet conv1, N/8"),
    (784, 64, 32, "MobileNet pw1, M/16"),
    (49, 128, 256, "MobileNet pw13, N/8 K/4"),
]
STALL_ORDER = STALL_CAUSES + ("idle",)


def bench_one(m, n, k, num_qpus, board, rng):
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    with EmulatorDevice(board=board) as device:
        started = time.time()
        c, run = sgemm(a, b, device=device, num_qpus=num_qpus, return_run=True)
        wall = time.time() - started
    expected = reference(a, b, None, 1.0, 0.0, False, False)
    bound = (k + 3) * 2.0 ** -23 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))
    if not np.all(np.abs(c - expected) <= bound):
        raise SystemExit(f"{m}x{n}x{k} on {num_qpus} QPUs: result differs from numpy")
    return run, wall


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller shapes, 12 QPUs only")
    parser.add_argument("--qpus", default=None, help="comma-separated QPU counts (default 1,4,8,12)")
    parser.add_argument("--only", default=None,
                        help="run only the shapes whose 'MxNxK' contains this text")
    parser.add_argument("--boards", default="pi1,pi_zero,pi3",
                        help=f"boards to report ({', '.join(BOARDS)}); default pi1,pi_zero,pi3")
    args = parser.parse_args(argv)
    shapes = QUICK_SHAPES if args.quick else SHAPES
    if args.only:
        shapes = [s for s in shapes if args.only in f"{s[0]}x{s[1]}x{s[2]}"]
    qpu_counts = [int(x) for x in (args.qpus or ("12" if args.quick else "1,4,8,12")).split(",")]
    boards = [BOARDS[name] for name in args.boards.split(",")]
    # One emulation per distinct clock; boards sharing a clock share its figures.
    clocks = {}
    for board in boards:
        clocks.setdefault(board.clock_hz, board.name)
    rng = np.random.default_rng(0)

    print("SGEMM C = A @ B (NN, float32: the shared-B panel kernel), emulator cycle model -- "
          "ESTIMATES, not measurements")
    print("boards: " + ", ".join(f"{b.name} {b.clock_hz / 1e6:g} MHz" for b in boards))
    header = (f"{'M x N x K':>18} {'QPUs':>4} {'MHz':>4} {'clocks':>10} {'time ms':>8} "
              f"{'GFLOPS':>6} {'peak':>5} | " + " ".join(f"{c:>5}" for c in STALL_ORDER))
    print(header)
    print("-" * len(header))
    for m, n, k, what in shapes:
        print(f"{m}x{n}x{k}: {what}")
        for num_qpus in qpu_counts:
            for clock_hz, board in sorted(clocks.items()):
                run, wall = bench_one(m, n, k, num_qpus, board, rng)
                flops = 2.0 * m * n * k
                seconds = run.cycles / clock_hz
                gflops = flops / seconds / 1e9
                share = flops / run.cycles / (num_qpus * FLOPS_PER_QPU_CLOCK)
                stalls = stall_shares(run)
                print(f"{f'{m}x{n}x{k}':>18} {num_qpus:>4} {clock_hz / 1e6:>4.0f} {run.cycles:>10} "
                      f"{seconds * 1e3:>8.3f} {gflops:>6.2f} {share:>5.0%} | "
                      + " ".join(f"{stalls[c]:>5.0%}" for c in STALL_ORDER)
                      + f"   ({wall:.0f} s emulated)")
                sys.stdout.flush()
    print("time excludes the ~100 us launch overhead of execute_qpu; 'peak' = share of "
          "QPUs x 8 flops/clock")
    return 0


if __name__ == "__main__":
    sys.exit(main())
