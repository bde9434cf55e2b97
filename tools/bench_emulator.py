#!/usr/bin/env python3
"""How fast the emulator runs (QPU instructions per host second), and what the cycle model says.

    python tools/bench_emulator.py                 # SGEMM calibration shape, 12 and 1 QPUs
    python tools/bench_emulator.py --board pi3 --n 768
    python tools/bench_emulator.py --kernel dma    # VPM/DMA streaming on 12 QPUs

The SGEMM case runs the library kernel (vc4nn.sgemm) on the published shape 96x363 times
363xN (published N = 3072; a smaller N gives about the same GFLOPS sooner). The comparison with
the published measurements uses a fixed kernel of the published design instead, so that it does
not move when the library kernel changes: tools/calibrate.py (docs/cycle-model.md). Cycle
figures are ESTIMATES of the model in vc4nn/emulator/timing.py.
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from asm import kernel, r0, ra, uniform, vpm  # noqa: E402
from vc4nn import sgemm  # noqa: E402
from vc4nn.emulator import EmulatorDevice  # noqa: E402
from vc4nn.emulator.timing import BOARDS  # noqa: E402

@kernel
def stream(a, blocks):
    """Each QPU: load 16 rows, add 1 to every word through the VPM, store; ``blocks`` times.
    The QPUs share VPM rows 0..15, so each block runs under the mutex."""
    a.mov(ra[0], uniform)                   # input address
    a.mov(ra[1], uniform)                   # output address
    for _ in range(blocks):
        a.mutex_acquire()
        a.setup_dma_load(rows=16, rowlen=16, y=0)
        a.start_dma_load(ra[0])
        a.wait_dma_load()
        a.setup_vpm_read(num=16, y=0)
        a.setup_vpm_write(y=0)
        for _ in range(16):
            a.mov(r0, vpm)
            a.add(vpm, r0, 1)
        a.setup_dma_store(units=16, depth=16, y=0)
        a.start_dma_store(ra[1])
        a.wait_dma_store()
        a.mutex_release()
    a.exit()


def report(name, run, host_seconds, flops=None):
    print(f"{name}: {run.instructions} QPU instructions in {host_seconds:.1f} s host time = "
          f"{run.instructions / host_seconds:,.0f} instructions/s")
    line = (f"  model ({run.board}, {run.clock_hz / 1e6:g} MHz): {run.cycles:,} clocks, "
            f"{run.seconds * 1e3:.2f} ms with launch overhead")
    if flops:
        line += f", {flops / (run.cycles / run.clock_hz) / 1e9:.2f} GFLOPS (estimate)"
    print(line)
    total = {}
    for q in run.qpus:
        for cause, clocks in q.stalls.items():
            total[cause] = total.get(cause, 0) + clocks
    shares = ", ".join(f"{cause} {clocks / (run.cycles * run.num_qpus):.0%}"
                       for cause, clocks in sorted(total.items(), key=lambda kv: -kv[1]) if clocks)
    print(f"  QPU time: {shares}")


def bench_sgemm(board, n, qpu_counts, rng):
    for num_qpus in qpu_counts:
        a = rng.standard_normal((96, 363)).astype(np.float32)
        b = rng.standard_normal((363, n)).astype(np.float32)
        with EmulatorDevice(board=board) as device:
            start = time.perf_counter()
            c, run = sgemm(a, b, device=device, num_qpus=num_qpus, return_run=True)
            host = time.perf_counter() - start
        assert np.allclose(c, a @ b, rtol=1e-3, atol=1e-3)
        report(f"SGEMM 96x363 x 363x{n}, {num_qpus} QPU(s)", run, host, 2 * 96 * 363 * n)


def bench_dma(board, blocks):
    with EmulatorDevice(board=board) as device:
        data = device.array(np.arange(16 * 16, dtype=np.uint32).reshape(16, 16))
        outs = [device.alloc((16, 16), np.uint32) for _ in range(12)]
        program = stream.assemble(blocks=blocks)
        start = time.perf_counter()
        run = device.execute(program, 12, [[data.address, out.address] for out in outs])
        host = time.perf_counter() - start
        assert all(np.array_equal(out, data + 1) for out in outs)
    moved = 12 * blocks * 2 * 16 * 64
    report(f"VPM/DMA stream, 12 QPUs x {blocks} blocks", run, host)
    print(f"  DMA traffic {moved / (run.cycles / run.clock_hz) / 1e6:.0f} MB/s (estimate)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel", choices=("sgemm", "dma"), default="sgemm")
    parser.add_argument("--board", choices=sorted(BOARDS), default="pi1")
    parser.add_argument("--n", type=int, default=384, help="SGEMM N (published: 3072)")
    parser.add_argument("--qpus", type=int, nargs="+", default=[12, 1], choices=range(1, 13),
                        metavar="N")
    parser.add_argument("--blocks", type=int, default=8, help="DMA blocks per QPU")
    args = parser.parse_args()
    if args.kernel == "sgemm":
        bench_sgemm(args.board, args.n, args.qpus, np.random.default_rng(0))
    else:
        bench_dma(args.board, args.blocks)


if __name__ == "__main__":
    main()
