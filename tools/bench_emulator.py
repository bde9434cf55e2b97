#!/usr/bin/env python3
"""How fast the emulator runs: QPU instructions per host second, C core and Python core side by
side (the ratio is what counts on a shared machine), and what the cycle model says.

    python tools/bench_emulator.py                   # the three workloads on both cores
    python tools/bench_emulator.py --workload sgemm --cores c
    python tools/bench_emulator.py --json            # one JSON object per workload and core

Workloads (12 QPUs each):
  sgemm  the library SGEMM (the panel kernel, vc4nn.kernels.sgemm_panel): 96x363 x 363xN
  dma    depthwise-like: DMA-load 16 rows into the VPM, a 3-tap multiply-add down the rows with
         weights from uniforms, write back through the VPM, DMA-store; under the mutex
  alu    a register-only loop of float and integer ops and a branch

Each workload runs once untimed (assembly, caches), then timed in CPU seconds of this process
(process_time: on a shared machine wall time counts other processes' work): "in launches" counts
the time inside device.execute (the emulator: upload of the uniforms and control list, the run,
its checks), "end to end" the whole call, with the host-side work of the library around the
launch (SGEMM's uniform streams, operand checks and copies). Cycle figures are ESTIMATES of the
cycle model (vc4nn/emulator/timing.py) for the board given.
"""

import argparse
import json
import os
import sys
import time

# One BLAS thread: the result checks' matrix products would otherwise leave OpenBLAS worker
# threads spinning, and their CPU time would count in this process's.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from asm import kernel, r0, r1, r2, r3, ra, rb, uniform, vpm  # noqa: E402
from vc4nn import sgemm  # noqa: E402
from vc4nn.emulator import EmulatorDevice, ccore  # noqa: E402
from vc4nn.emulator.timing import BOARDS  # noqa: E402


@kernel
def depthwise(a):
    """Per block: 16 rows in, out[i] = w0 * in[i] + w1 * in[i+1] + w2 * in[i+2], 16 rows out."""
    a.mov(ra[0], uniform)                   # input address
    a.mov(ra[1], uniform)                   # output address
    a.mov(rb[0], uniform)                   # weights w0, w1, w2
    a.mov(rb[1], uniform)
    a.mov(rb[2], uniform)
    a.mov(ra[2], uniform)                   # blocks
    a.label("block")
    a.mutex_acquire()
    a.setup_dma_load(rows=16, rowlen=16, y=0)
    a.start_dma_load(ra[0])
    a.wait_dma_load()
    a.setup_vpm_read(num=16, y=0)
    a.setup_vpm_write(y=16)
    a.mov(r1, vpm)
    a.mov(r2, vpm)
    for _ in range(14):
        a.mov(r3, vpm)
        a.fmul(r0, r1, rb[0])
        a.fmul(r1, r2, rb[1])
        a.fadd(r0, r0, r1)
        a.fmul(r1, r3, rb[2])
        a.fadd(vpm, r0, r1)
        a.mov(r1, r2)
        a.mov(r2, r3)
    a.mov(vpm, r1)
    a.mov(vpm, r2)
    a.setup_dma_store(units=16, depth=16, y=16)
    a.start_dma_store(ra[1])
    a.wait_dma_store()
    a.mutex_release()
    a.sub(ra[2], ra[2], 1, sf=True)
    a.branch("block", cond="any_zc")
    a.nop()
    a.nop()
    a.nop()
    a.exit()


@kernel
def alu_loop(a, iterations):
    a.mov(r0, uniform)                      # iterations
    a.ldi(r1, 1.5)
    a.mov(r2, 0)
    a.label("loop")
    a.sub(r0, r0, 1, sf=True)
    a.fmul(r3, r1, r1)
    a.fadd(r1, r3, 0.25)
    a.add(r2, r2, 3)
    a.branch("loop", cond="any_zc")
    a.shl(r2, r2, 1)
    a.xor(r3, r2, r0)
    a.fmin(r1, r1, 1.0)
    a.exit()


def run_sgemm(device, n):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((96, 363)).astype(np.float32)
    b = rng.standard_normal((363, n)).astype(np.float32)
    c, run = sgemm(a, b, device=device, num_qpus=12, return_run=True)
    if not np.allclose(c, a @ b, rtol=1e-3, atol=1e-3):
        raise SystemExit("SGEMM gave a wrong result")
    return run


def run_depthwise(device, blocks):
    data = np.arange(256, dtype=np.float32).reshape(16, 16) / 256
    weights = np.array([0.25, 0.5, 0.125], dtype=np.float32)
    source = device.array(data)
    outs = [device.alloc((16, 16), np.float32) for _ in range(12)]
    run = device.execute(depthwise.assemble(), 12, [[source.address, out.address]
                                                    + list(weights.view(np.uint32)) + [blocks]
                                                    for out in outs])
    expected = data.copy()
    expected[:14] = (weights[0] * data[:14] + weights[1] * data[1:15]) + weights[2] * data[2:]
    if not all(np.allclose(out, expected) for out in outs):
        raise SystemExit("the depthwise-like workload gave a wrong result")
    return run


def run_alu(device, iterations):
    return device.execute(alu_loop.assemble(iterations=iterations), 12, [[iterations]] * 12)


WORKLOADS = {"sgemm": run_sgemm, "dma": run_depthwise, "alu": run_alu}


def _timed_launches(device):
    """Wrap ``device.execute`` so that the CPU seconds spent in launches add up in the returned
    list's only element."""
    spent = [0.0]
    execute = device.execute

    def timed(*args, **kwargs):
        start = time.process_time()
        try:
            return execute(*args, **kwargs)
        finally:
            spent[0] += time.process_time() - start
    device.execute = timed
    return spent


def measure(workload, core, board, size):
    with EmulatorDevice(board=board, core=core) as device:
        WORKLOADS[workload](device, size)              # untimed: assembly and caches
        in_launches = _timed_launches(device)
        start = time.process_time()       # CPU time: the machine may be shared
        run = WORKLOADS[workload](device, size)
        host = time.process_time() - start
    emulator = in_launches[0]
    return {"workload": workload, "core": core, "size": size, "instructions": run.instructions,
            "launch_cpu_seconds": round(emulator, 4),
            "instructions_per_second": round(run.instructions / emulator),
            "host_cpu_seconds": round(host, 4),
            "end_to_end_instructions_per_second": round(run.instructions / host),
            "board": run.board, "clock_hz": run.clock_hz, "cycles_estimate": run.cycles}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), nargs="+",
                        default=["sgemm", "dma", "alu"])
    parser.add_argument("--cores", nargs="+", choices=ccore.CORES, default=list(ccore.CORES))
    parser.add_argument("--board", choices=sorted(BOARDS), default="pi1")
    parser.add_argument("--n", type=int, default=64, help="SGEMM N")
    parser.add_argument("--blocks", type=int, default=32, help="depthwise blocks per QPU")
    parser.add_argument("--iterations", type=int, default=2000, help="ALU loop iterations")
    parser.add_argument("--json", action="store_true", help="print JSON lines")
    args = parser.parse_args()
    sizes = {"sgemm": args.n, "dma": args.blocks, "alu": args.iterations}
    cores = [c for c in args.cores if c == "python" or ccore.available()]
    if len(cores) < len(args.cores):
        print(f"the C core is not built: {ccore.BUILD_HINT}", file=sys.stderr)
    for workload in args.workload:
        results = [measure(workload, core, args.board, sizes[workload]) for core in cores]
        if args.json:
            for r in results:
                print(json.dumps(r))
            continue
        for key, what in (("instructions_per_second", "in launches"),
                          ("end_to_end_instructions_per_second", "end to end ")):
            line = f"{workload:6} {what} ({results[0]['instructions']:,} instructions): " + \
                ", ".join(f"{r['core']} {r[key]:,.0f}/s" for r in results)
            if len(results) == 2:
                line += f"; C/Python = {results[0][key] / results[1][key]:.1f}x"
            print(line)
        print(f"       model ({results[0]['board']}, {results[0]['clock_hz'] / 1e6:g} MHz): "
              f"{results[0]['cycles_estimate']:,} clocks (estimate)")


if __name__ == "__main__":
    main()
