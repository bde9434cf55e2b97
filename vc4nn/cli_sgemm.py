"""``vc4nn sgemm``: multiply random matrices on a device and check the product against numpy."""

import numpy as np

from .cli_common import open_for, positive_int, print_run, qpus, seed
from .emulator.machine import DEFAULT_MAX_INSTRUCTIONS
from .errors import Vc4nnError
from .kernels import sgemm_panel
from .progress import InstructionProgress

DESCRIPTION = ("Multiply a random MxK matrix by a random KxN matrix (float32, seeded) on the "
               "QPUs and compare with numpy in float64. Prints the error, the per-QPU summary "
               "and the speed.")
# A bound that keeps each matrix (and numpy's float64 reference) well inside a Pi's memory:
# 2^26 elements of float32 is 256 MiB.
MAX_ELEMENTS = 1 << 26
# Instructions per (row of C computed by one QPU) x (16-lane vector of a row) x (k), measured:
# 1.31..1.35 at 96^3, 192x96x96, 96x192x96, 96x96x192 and 256^3 (12 QPUs), up to 1.6 for
# small or ragged shapes (64^3, 200x130x70). An estimate for the progress bar, not a figure.
INSTRUCTIONS_PER_MAC_VECTOR = 1.4


def add_arguments(sg):
    for dim, what in (("m", "rows of A and C"), ("n", "columns of B and C"),
                      ("k", "columns of A, rows of B")):
        sg.add_argument(f"--{dim}", type=positive_int, default=96, help=f"{what} (default 96)")
    sg.add_argument("--qpus", type=qpus, default=12, help="QPUs sharing the work (default 12)")
    sg.add_argument("--seed", type=seed, default=0, help="random seed of the matrices (an int "
                    ">= 0)")


def estimated_instructions(m, n, k, num_qpus):
    """About how many instructions ``sgemm`` executes for C = A @ B (the panel kernel): every
    participating QPU computes rows x ceil(N / 16) vectors for each k, in ``passes`` passes."""
    plan = sgemm_panel.PanelPlan(m, n, k, False, num_qpus, True, True)
    vectors = -(-n // 16)
    return int(INSTRUCTIONS_PER_MAC_VECTOR * plan.passes * plan.qpus * plan.rows * vectors * k)


def sgemm_main(args):
    from . import sgemm
    m, n, k = args.m, args.n, args.k
    for name, rows, cols in (("A", m, k), ("B", k, n), ("C", m, n)):
        if rows * cols > MAX_ELEMENTS:
            raise Vc4nnError(f"{name} would be {rows}x{cols} = {rows * cols} elements; the "
                             f"limit is {MAX_ELEMENTS} (choose smaller --m/--n/--k)")
    rng = np.random.default_rng(args.seed)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    estimate = estimated_instructions(m, n, k, args.qpus)
    with open_for(args, max(DEFAULT_MAX_INSTRUCTIONS, 2 * estimate)) as device:
        with InstructionProgress(device, total=estimate, quiet=args.quiet, what="sgemm"):
            c, result = sgemm(a, b, device=device, num_qpus=args.qpus, return_run=True)
    reference = a.astype(np.float64) @ b.astype(np.float64)
    error = float(np.max(np.abs(c - reference)) / max(1.0, float(np.max(np.abs(reference)))))
    flops = 2.0 * m * n * k
    print(f"sgemm {m}x{k} @ {k}x{n} on {args.qpus} QPUs ({device.name}): "
          f"max relative error vs numpy {error:.2e}")
    print_run(result)
    if result.cycles:
        print(f"{flops / (result.cycles / result.clock_hz) / 1e9:.2f} GFLOPS on the QPUs, "
              f"{flops / result.seconds / 1e9:.2f} GFLOPS with the launch overhead "
              f"(cycle-model estimate)")
    elif result.seconds:
        print(f"{flops / result.seconds / 1e9:.2f} GFLOPS (measured, launch included)")
    return 0 if error < 1e-4 else 1

