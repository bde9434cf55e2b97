#!/usr/bin/env python3
"""How fast the emulator core runs, and where its host time goes.

    python tools/profile_emulator.py                   # SGEMM 96x363 x 363x192 on 12 QPUs + ALU loop
    python tools/profile_emulator.py --n 3072          # the published SGEMM shape (~7M instructions)
    python tools/profile_emulator.py --workload alu --profile 25   # cProfile, top 25 functions

Prints QPU instructions per host second for each workload and a fingerprint (a hash of the
result bits, the modelled clocks and every QPU's stalls), so that two versions of the emulator
can be compared for speed AND for identical behaviour: the fingerprints must match.
"""

import argparse
import cProfile
import hashlib
import os
import pstats
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from asm import kernel, r0, r1, r2, r3, ra, rb, uniform  # noqa: E402
from vc4nn import sgemm  # noqa: E402
from vc4nn.emulator import EmulatorDevice  # noqa: E402


@kernel
def alu_loop(a, iterations):
    """A float and integer ALU loop on one QPU: fadd/fmul/add/sub, flags, a branch."""
    a.mov(ra[1], uniform)                   # output address (unused but read)
    a.ldi(r3, iterations)
    a.ldi(r1, 1.5)
    a.ldi(r2, 0.25)
    a.mov(rb[2], 3)
    a.label("loop")
    a.fadd(r0, r1, r2).fmul(r1, r1, r2)
    a.add(ra[0], r3, rb[2]).fmul(r2, r0, r0)
    a.fsub(r1, r0, r1).mul24(r0, r3, r3)
    a.sub(r3, r3, 1, sf=True)
    a.branch("loop", cond="any_zc")
    a.fadd(r2, r2, r1)
    a.nop()
    a.nop()
    a.exit()


def fingerprint(run, *arrays):
    digest = hashlib.sha256()
    for array in arrays:
        digest.update(np.ascontiguousarray(array).tobytes())
    digest.update(repr((run.cycles, [(q.instructions, q.cycles, sorted(q.stalls.items()))
                                     for q in run.qpus])).encode())
    return digest.hexdigest()[:16]


def run_sgemm(n, num_qpus, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((96, 363)).astype(np.float32)
    b = rng.standard_normal((363, n)).astype(np.float32)
    with EmulatorDevice() as device:
        sgemm(a, b, device=device, num_qpus=num_qpus)       # assemble and warm the caches
        start = time.perf_counter()
        c, run = sgemm(a, b, device=device, num_qpus=num_qpus, return_run=True)
        host = time.perf_counter() - start
    assert np.allclose(c, a @ b, rtol=1e-3, atol=1e-3)
    return f"SGEMM 96x363 x 363x{n}, {num_qpus} QPU(s)", run, host, (c,)


def run_alu(iterations):
    with EmulatorDevice() as device:
        out = device.alloc(16, np.uint32)
        program = alu_loop.assemble(iterations=iterations)
        start = time.perf_counter()
        run = device.execute(program, 1, [[out.address]])
        host = time.perf_counter() - start
    return f"ALU loop, {iterations} iterations, 1 QPU", run, host, ()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=("sgemm", "alu", "all"), default="all")
    parser.add_argument("--n", type=int, default=192, help="SGEMM N")
    parser.add_argument("--qpus", type=int, default=12, help="SGEMM QPUs")
    parser.add_argument("--iterations", type=int, default=20000, help="ALU loop iterations")
    parser.add_argument("--profile", type=int, metavar="TOP", default=0,
                        help="run under cProfile and print the TOP functions by own time")
    args = parser.parse_args()
    jobs = []
    if args.workload in ("sgemm", "all"):
        jobs.append(lambda: run_sgemm(args.n, args.qpus))
    if args.workload in ("alu", "all"):
        jobs.append(lambda: run_alu(args.iterations))
    for job in jobs:
        profiler = cProfile.Profile() if args.profile else None
        if profiler:
            profiler.enable()
        name, run, host, arrays = job()
        if profiler:
            profiler.disable()
        print(f"{name}: {run.instructions:,} instructions in {host:.2f} s = "
              f"{run.instructions / host:,.0f} instructions/s; fingerprint "
              f"{fingerprint(run, *arrays)}")
        if profiler:
            pstats.Stats(profiler).sort_stats("tottime").print_stats(args.profile)


if __name__ == "__main__":
    main()
