#!/usr/bin/env python3
"""A GPU_FFT-design FFT in the DSL: the calibration workload for GPU_FFT's published timings.

    python tools/fft_design.py --log2n 10 --jobs 1      # run one size, check it against numpy

GPU_FFT (Andrew Holme, release 2.0, 2014; raspberrypi/firmware opt/vc/src/hello_pi/hello_fft,
gpu_fft.txt) published per-transform times on a Pi 1. This module is written for the calibration
from the facts of that design (its gpu_fft.txt, its host code's launch and allocation choices,
the structure of its shaders: passes, codelets, reads, writes, handshakes); none of its code is
copied, and the decomposition, register use and loop control here are this module's own:

- 8 QPUs, one launch per batch of transforms (the jobs loop inside the program);
- passes of radix 16, 32 or 64 (one, two or four vectors; radix 64 fills the 64 VPM rows, so
  it has no double buffer), as many passes as GPU_FFT uses for the size (2 for 256..2048
  points, 3 for 4096..65536); a radix-16 DFT is done ACROSS the 16 lanes of
  a vector: 4 radix-2 stages, each a per-lane twiddle multiply and a butterfly whose partner comes
  from a vector rotation by 2^t lanes;
- the first pass reads its input through the TMU in bit-reversed order (16 single-lane gathers
  per vector, re and im as two requests); later passes read 16 consecutive points per vector;
- the twiddles between passes step by a complex multiply (a recurrence), not a table per group;
- the output of the 8 QPUs is gathered in the VPM (each QPU writes its re/im vectors vertically
  into its two columns) and one QPU, the master, stores it with one VDW of 16-word rows strided
  N/R points apart; the others wait on semaphores, so the 8 QPUs move in lock step;
- one program for all 8 QPUs, the master's and the slaves' parts of a step branched to (GPU_FFT
  calls per-QPU sync and save procedures), so the QPUs of a slice run the same code and share
  its instruction cache;
- memory is allocated with the board's mailbox flags (0xC, L2-cached, on the Pi 1 as GPU_FFT);
- the launch is by direct V3D register writes when jobs x N <= 20480 points (GPU_FFT's busy-wait
  limit), through the mailbox otherwise.

The decomposition (Stockham, decimation in time; verified against numpy.fft by the tests): after
pass p of radix R (M = product of the radices so far, S = N / M), group G (0 <= G < N / R) with
k1 = G // S reads the R points at R*G.. (pass 1: at bitrev(R*G + i)), multiplies point n2 by
w_M^(n2*k1), takes their R-point DFT and writes output k2 to G + k2 * N / R.

Sizes 2^8..2^17 are built; GPU_FFT's batch-1 table goes on to 2^21, whose passes would store
rows further apart than the VDW's 16-bit stride allows in this design (RADICES).
It is a calibration workload, not a library FFT: forward transforms of the sizes above only.
"""

import argparse
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fft_program import ADVANCE, MORE, QPUS, RADICES, SINGLE, SIZES, fft_design  # noqa: E402
from vc4nn.emulator import EmulatorDevice  # noqa: E402
from vc4nn.emulator.timing import Timing  # noqa: E402
from vc4nn.kernels.common import LANES  # noqa: E402

BUSY_WAIT_LIMIT = 5 << 12           # GPU_FFT: direct launch when jobs * N is at most this


def bitrev(value, bits):
    return int(format(value, f"0{bits}b")[::-1], 2) if bits else 0


def log2(n):
    return int(math.log2(n))


# -- the host side: tables and uniform streams ---------------------------------------------------

def _w(exponent, m):
    return np.exp(-2j * np.pi * exponent / m)


def constants_table():
    """Rows: stage twiddle re (t = 0..3), im (t = 0..3); re, im of w_32^l, w_64^l, w_64^(l+16)."""
    lanes = np.arange(LANES)
    stage = [_w(lanes % (1 << t), 2 << t) for t in range(4)]
    rows = [s.real for s in stage] + [s.imag for s in stage]
    for combine in (_w(lanes, 32), _w(lanes, 64), _w(lanes + LANES, 64)):
        rows += [combine.real, combine.imag]
    return np.array(rows, np.float32)


def pass_plan(n, radices):
    """Per pass: (radix, M, S, lane positions n2 per vector)."""
    plan, m = [], 1
    for radix in radices:
        m *= radix
        bits = log2(radix)
        n2 = np.array([[bitrev(LANES * v + lane, bits) for lane in range(LANES)]
                       for v in range(radix // LANES)])
        plan.append((radix, m, n // m, n2))
    return plan


def pass_table(n, p, radix, m, s, n2, q):
    """This QPU's table for pass p: lane byte offsets per vector, then (pass > 0) per vector the
    twiddles of its first group and their step (re, im, step re, step im)."""
    log2n, bits = log2(n), log2(radix)
    vectors = radix // LANES
    pos = np.arange(radix).reshape(vectors, LANES)
    if p == 0:
        points = 8 * np.array([[bitrev(int(i), bits) << (log2n - bits) for i in row]
                               for row in pos])
    else:
        points = 8 * pos
    lane = np.arange(LANES)
    odd = 4 * (lane & 1)
    rows = [np.array([points[v][lane & ~1] + odd, points[v][lane | 1] + odd], np.uint32)
            for v in range(vectors)]
    if p:
        k1, delta = q // s, ((q + QPUS) // s) - q // s if s < QPUS else 1
        for v in range(vectors):
            tw, stepw = _w(n2[v] * k1, m), _w(n2[v] * delta, m)
            rows.append(np.array([tw.real, tw.imag, stepw.real, stepw.imag],
                                 np.float32).view(np.uint32))
    return np.vstack(rows)


def uniform_streams(n, radices, jobs, consts_addr, tables, buffers):
    """Per QPU, its uniform stream (see step() for the per-step words)."""
    plan, log2n = pass_plan(n, radices), log2(n)
    streams = []
    for q in range(QPUS):
        words = [q, consts_addr]
        for job in range(jobs):
            words.append(1)
            for p, (radix, m, s, _n2) in enumerate(plan):
                src, dst = buffers[job][p % 2], buffers[job][(p + 1) % 2]
                words += [tables[p][q], dst]
                steps = n // radix // QPUS
                bits = log2(radix)
                for t in range(steps):
                    g = QPUS * t + q
                    base = (src + 8 * bitrev(g, log2n - bits) if p == 0 else src + 8 * radix * g)
                    flags = ((ADVANCE if g // s != (g + QPUS) // s else 0)
                             | (MORE if t < steps - 1 else 0) | (SINGLE if radix == 64 else 0))
                    words += [base, flags]
        words.append(0)
        streams.append(words)
    return streams


def launch_path(n, jobs):
    """GPU_FFT's choice: direct register writes for short batches, the mailbox otherwise."""
    return "direct" if jobs * n <= BUSY_WAIT_LIMIT else "mailbox"


def run_fft(x, board="pi1", overrides=None, checks=None):
    """Forward FFT of each row of ``x`` (jobs x N complex) on the emulated 8 QPUs in one launch.
    Returns (result, run, seconds per transform including the launch path's overhead)."""
    x = np.atleast_2d(np.asarray(x, np.complex64))
    jobs, n = x.shape
    log2n = log2(n)
    if n != 1 << log2n or log2n not in RADICES:
        raise SystemExit(f"N={n}: this workload builds N = 2^k for k in {SIZES}")
    radices = RADICES[log2n]
    path = launch_path(n, jobs)
    with EmulatorDevice(board=board, checks=checks) as device:
        device.machine.timing = Timing(board, launch_path=path, **(overrides or {}))
        consts = device.array(constants_table())
        plan = pass_plan(n, radices)
        tables = [[device.array(pass_table(n, p, *plan[p], q)).address for q in range(QPUS)]
                  for p in range(len(plan))]
        data = [(device.array(row.view(np.float32)), device.alloc(2 * n, np.float32))
                for row in x]
        buffers = [(a.address, b.address) for a, b in data]
        streams = uniform_streams(n, radices, jobs, consts.address, tables, buffers)
        run = device.execute(fft_design.assemble(log2n), QPUS, streams)
        out = np.array([np.asarray(pair[len(radices) % 2]).view(np.complex64) for pair in data])
    return out, run, (run.cycles / run.clock_hz + device.machine.timing.launch_overhead) / jobs


def random_signal(jobs, n, rng):
    shape = (jobs, n)
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


def relative_rms_error(out, x):
    """Of ``out`` against numpy's double-precision FFT of ``x`` (GPU_FFT's accuracy measure)."""
    ref = np.fft.fft(x.astype(np.complex128), axis=1)
    return float(np.sqrt(np.mean(np.abs(out - ref) ** 2) / np.mean(np.abs(ref) ** 2)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log2n", type=int, choices=SIZES, default=8)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--board", default="pi1")
    args = parser.parse_args()
    n = 1 << args.log2n
    x = random_signal(args.jobs, n, np.random.default_rng(0))
    out, run, seconds = run_fft(x, args.board)
    print(f"N={n} jobs={args.jobs} ({launch_path(n, args.jobs)} launch): rel rms error "
          f"{relative_rms_error(out, x):.2g}; {run.cycles:,} clocks; {seconds * 1e6:.1f} us per "
          f"transform (estimate, {args.board})")


if __name__ == "__main__":
    main()
