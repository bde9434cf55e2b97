#!/usr/bin/env python3
"""Compare the cycle model with every published measurement of facts §4.

    python tools/calibrate.py                # every published figure at its shape and board (slow)
    python tools/calibrate.py --reduced      # smaller SGEMM shapes (what the test runs)
    python tools/calibrate.py --case sgemm12 --set l2_cache_bytes=0     # sensitivity
    python tools/calibrate.py --markdown     # the table of docs/cycle-model.md

The SGEMM kernel here is a FIXED copy of the design py-videocore measured (facts §4): each QPU
keeps a 16x64 tile of C in its 64 register-file registers, gathers a column of A through TMU0
(tmu_noswap set) one k ahead, points the uniform stream at the row of B (64 floats, 4 lines) for
every k, and per k does 64 multiply-accumulates and 3 other instructions; C = A @ B + C goes
through the VPM under the mutex. The 12 QPUs split C 2 x 6 (rows x columns), so each pair of
QPUs with the same columns reads the same B rows at about the same time; a QPU walks its row
tiles in the outer loop and its column tiles in the inner one. It is written from that
description for this tool, independent of vc4nn/kernels/sgemm.py (it shares only the record
loop of vc4nn/kernels/common.py), so the calibration does not move when the library kernel
changes.

Published (facts §4): 96x363 x 363x3072, 0.80 GFLOPS on 1 QPU; on 12 QPUs ~8 (py-videocore
README), 6.7 (Pi 3, issue 5), 9.6 (qmkl, a different kernel); VPM DMA ~700 / 200 MB/s read and
~1000 / 300 MB/s write for 16-word rows / single words; GPU_FFT 2.0's per-transform times
(gpu_fft.txt, Pi 1, batches of 1 and 10) for tools/fft_design.py, a GPU_FFT-design FFT, with
the launch overhead of the path GPU_FFT takes. GFLOPS count 2*M*K*N + 3*M*N flops as
py-videocore does, over the modelled run time without the launch overhead. Every modelled
figure is an ESTIMATE (docs/cycle-model.md).
"""

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from asm.vpm import MAX_EXTENDED_PITCH  # noqa: E402
from asm import (element_number, kernel, null, r0, r1, r2, r3, r4, r5, r5rep, ra, rb,  # noqa: E402
                 tmu0_s, tmu_noswap, unif_addr, uniform, vdr_setup, vdw_setup, vdw_stride, vpm,
                 vr_setup, vw_setup)
from vc4nn.emulator import EmulatorDevice  # noqa: E402
from vc4nn.kernels.common import each_record  # noqa: E402
from vc4nn.emulator.timing import BOARDS, PARAMETERS, Timing  # noqa: E402

import fft_design  # noqa: E402  (tools/, next to this file)

M, K = 96, 363                       # the published shape; N is a command-line choice
TILE_ROWS, TILE_COLS = 16, 64
WORD = 4
ACC = [reg for i in range(32) for reg in (ra[i], rb[i])]      # ra0, rb0, ra1, ... rb31
SPLITS = {1: (1, 1), 12: (2, 6)}     # QPUs -> (row groups, column groups), as published
DMA_PUBLISHED = {("load", 16): 700, ("load", 1): 200, ("store", 16): 1000, ("store", 1): 300}


# -- the py-videocore-design SGEMM ---------------------------------------------------------------
# Uniform stream per QPU: per tile [1, A tile address, B panel address, address of part 2]
# part 2: [C block address] x 4 for the loads, again x 4 for the stores; a 0 ends the tiles.
#
# k loop registers: r0 product, r1 A column addresses (one per lane), r2 = [B row address,
# k left x 15], r3 = [B row stride, -1 x 15] (one add steps both; the flags of the k counts end
# the loop), r4 the A column, r5 the address of part 2.

def mac(a, g):
    """Multiply-accumulate g of a k step: acc[g-1] += r0 (the previous product); r0 = r4 * B."""
    if g == 0:
        return a.add(r1, r1, 4).fmul(r0, r4, uniform)     # step the A column addresses
    return a.fadd(ACC[g - 1], ACC[g - 1], r0).fmul(r0, r4, uniform)


def k_head(a):
    """Finish the previous k, point the uniforms at B row k and pop A column k; ask for A column
    k+1 and step r2 (the flags say whether k+1 was the last)."""
    a.fadd(ACC[-1], ACC[-1], r0, sig="ldtmu0").mov(unif_addr, r2)
    a.add(r2, r2, r3, sf=True).mov(tmu0_s, r1)


@kernel
def sgemm_design(a, n, k):
    a.ldi(tmu_noswap, 1)
    each_record(a, lambda: tile(a, n, k))
    a.exit()


def tile(a, n, k):
    """One 16 x 64 tile of C: the k loop, then the store."""
    a.ldi(r3, k * WORD)                             # A row stride
    a.mul24(r3, element_number, r3)
    a.add(r1, r3, uniform)                          # lane e: A[row e, 0]
    a.ldi(r2, k)
    a.mov(null, element_number, sf=True)            # Z in element 0 only
    a.mov(r2, uniform, cond="zs")                   # B panel row 0
    a.ldi(r3, -1)
    a.ldi(r3, n * WORD, cond="zs")                  # B row stride
    a.mov(r5rep, uniform)                           # part 2
    for i in range(0, len(ACC), 2):
        a.ldi((ACC[i], ACC[i + 1]), 0)
    a.ldi(r0, 0)
    a.add(r1, r1, 4).mov(tmu0_s, r1)                # ask for A column 0
    k_head(a)                                       # k = 0
    a.nop()                                         # uniform address latency (facts §2)
    for g in range(3):
        mac(a, g)
    a.label("k_loop")                               # one pass: the tail of k, the head of k+1
    for g in range(3, len(ACC)):
        mac(a, g)
    k_head(a)
    a.branch("k_loop", cond="all_zc")
    for g in range(3):                              # delay slots
        mac(a, g)
    for g in range(3, len(ACC)):                    # the tail of the last k
        mac(a, g)
    # The last head asked for column K (A is padded): pop it with the last add.
    a.fadd(ACC[-1], ACC[-1], r0, sig="ldtmu0").mov(unif_addr, r5)
    a.nop()
    a.nop()
    store_tile(a, n)


def store_tile(a, n):
    """C tile += accumulators, through VPM rows 0..63 (C block b = columns 16b.. = rows 16b..)."""
    blocks = TILE_COLS // 16
    a.mutex_acquire()
    for b in range(blocks):
        a.setup_dma_load(rows=TILE_ROWS, rowlen=16, y=16 * b, pitch=n * WORD)
        a.start_dma_load(uniform)
    a.wait_dma_load()
    a.setup_vpm_write(y=0, horizontal=False)
    for b in range(blocks):
        a.setup_vpm_read(num=16, y=16 * b, horizontal=False)
        for x in range(16):
            a.fadd(vpm, ACC[16 * b + x], vpm)
    for b in range(blocks):
        a.setup_dma_store(units=TILE_ROWS, depth=16, y=16 * b, stride=(n - 16) * WORD)
        a.start_dma_store(uniform)
    a.wait_dma_store()
    a.mutex_release()


def sgemm_streams(device, num_qpus, n, a_buf, b_buf, c_buf):
    """Per QPU, a device buffer with its uniform stream (records point into it)."""
    row_groups, col_groups = SPLITS[num_qpus]
    rows, cols = M // TILE_ROWS // row_groups, n // TILE_COLS // col_groups
    streams = []
    for i in range(row_groups):
        for j in range(col_groups):
            tiles = [(TILE_ROWS * (i * rows + ti), TILE_COLS * (j * cols + tj))
                     for ti in range(rows) for tj in range(cols)]
            record = 4 + 2 * (TILE_COLS // 16)
            buf = device.alloc(record * len(tiles) + 1, np.uint32)
            words = []
            for row, col in tiles:
                part2 = buf.address + (len(words) + 4) * WORD
                blocks = [c_buf.address + (row * n + col + 16 * b) * WORD
                          for b in range(TILE_COLS // 16)]
                words += [1, a_buf.address + row * K * WORD, b_buf.address + col * WORD, part2]
                words += blocks + blocks
            buf[:] = words + [0]
            streams.append(buf)
    return streams


def run_sgemm(timing_overrides, board, num_qpus, n, rng):
    col_groups = SPLITS[num_qpus][1]
    if n % (TILE_COLS * col_groups) or n * WORD > MAX_EXTENDED_PITCH:
        # The C load's row pitch goes in the 14-bit extended pitch (facts §5.18).
        raise SystemExit(f"N={n}: must be a multiple of {TILE_COLS * col_groups} and at most "
                         f"{MAX_EXTENDED_PITCH // WORD} (the C tile's DMA pitch, N*4 bytes, has 14 bits)")
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, n)).astype(np.float32)
    c = rng.standard_normal((M, n)).astype(np.float32)
    with EmulatorDevice(board=board) as device:
        apply_overrides(device, timing_overrides)
        a_buf = device.array(np.vstack([a, np.zeros((1, K), np.float32)]))   # column K is read
        b_buf, c_buf = device.array(b), device.array(c)
        program = sgemm_design.assemble(n, K)
        start = time.perf_counter()
        run = device.execute(program, num_qpus, sgemm_streams(device, num_qpus, n, a_buf, b_buf,
                                                              c_buf))
        host = time.perf_counter() - start
        assert np.allclose(np.asarray(c_buf), a @ b + c, rtol=1e-3, atol=1e-3), "wrong C"
        bus = device.machine.bus
        stats = (bus.busy_clocks, bus.l2_hits, bus.l2_misses)
    flops = 2 * M * K * n + 3 * M * n
    return flops / (run.cycles / run.clock_hz) / 1e9, run, stats, host


# -- DMA streaming -------------------------------------------------------------------------------

@kernel
def dma_stream(a, direction, blocks):
    """``blocks`` DMAs one after the other between the QPU's own memory (uniform 0) and its own
    4 VPM rows (setup words: the next uniforms); each waits for the one before (facts §3)."""
    a.mov(ra[0], uniform)
    if direction == "load":
        a.mov(vr_setup, uniform)
    else:
        a.mov(vw_setup, uniform)
        a.mov(vw_setup, uniform)
    for _ in range(blocks):
        if direction == "load":
            a.start_dma_load(ra[0])
        else:
            a.start_dma_store(ra[0])
    if direction == "load":
        a.wait_dma_load()
    else:
        a.wait_dma_store()
    a.exit()


def run_dma(overrides, board, direction, rowlen, blocks=64, num_qpus=12):
    """MB/s of 12 QPUs streaming DMAs of 4 memory rows of ``rowlen`` words (16 or 1)."""
    rows = 4
    with EmulatorDevice(board=board) as device:
        apply_overrides(device, overrides)
        bufs = [device.alloc(rows * 16, np.uint32) for _ in range(num_qpus)]
        if direction == "load":
            setups = [[vdr_setup(rows, rowlen, y=rows * q, pitch=64)] for q in range(num_qpus)]
        else:
            setups = [[vdw_setup(rows, rowlen, y=rows * q), vdw_stride(64 - 4 * rowlen)]
                      for q in range(num_qpus)]
        run = device.execute(dma_stream.assemble(direction, blocks), num_qpus,
                             [[buf.address] + setup for buf, setup in zip(bufs, setups)])
    moved = num_qpus * blocks * rows * rowlen * WORD
    return moved / (run.cycles / run.clock_hz) / 1e6


# -- common --------------------------------------------------------------------------------------

def apply_overrides(device, overrides):
    """--set name=value: the machine's timing with these parameters changed (for sensitivity)."""
    if overrides:
        device.machine.timing = Timing.for_board(device.machine.timing.name, **overrides)


def parse_overrides(pairs):
    out = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        if name not in PARAMETERS:
            raise SystemExit(f"unknown parameter {name!r}; see vc4nn/emulator/timing.py")
        out[name] = type(PARAMETERS[name][0])(float(value))
    return out


# -- the table -----------------------------------------------------------------------------------
# Each published figure: (case, board, QPUs, published value, source). The model runs the case
# at the published shape (SGEMM N = 3072) on the published board; --reduced runs smaller shapes
# for the test (1 QPU: latency bound, about the same per-k cost at any N; 12 QPUs: N = 384).
SGEMM_PUBLISHED = (
    ("sgemm1", "pi1", 1, 0.80, "py-videocore (facts §4); board not named, 250 MHz read"),
    ("sgemm12", "pi1", 12, 8.0, "py-videocore README: 'Achieved 8GFlops with sgemm'"),
    ("sgemm12", "pi3", 12, 6.7, "py-videocore issue 5 (Pi 3) (facts §4)"),
)
DMA_SOURCE = "facts §4 (VC4CL wiki, Performance)"
# GPU_FFT release 2.0 (gpu_fft.txt, "Throughput"; Pi 1, 700 MHz ARM): per-transform times in
# microseconds for batches of 1 and 10 (launch included: direct register writes when jobs x N
# <= 20480 points, else the mailbox). 2^18..2^21 points are not built (fft_design.RADICES).
FFT_PUBLISHED = {(8, 1): 36, (9, 1): 51, (10, 1): 70, (11, 1): 110, (12, 1): 240, (13, 1): 580,
                 (14, 1): 1200, (15, 1): 3300, (16, 1): 6800, (17, 1): 16000,
                 (8, 10): 16, (9, 10): 27, (10, 10): 45, (11, 10): 95, (12, 10): 250,
                 (13, 10): 610, (14, 10): 1200, (15, 10): 3200}
FFT_REDUCED = ((8, 1), (10, 1), (8, 10), (12, 1), (13, 1))
FFT_SOURCE = "GPU_FFT 2.0 gpu_fft.txt (raspberrypi/firmware hello_fft), Pi 1"
TOLERANCE = 0.25
FULL_N, REDUCED_N = {1: 3072, 12: 3072}, {1: 64, 12: 384}


def calibration_rows(overrides=None, reduced=False, cases=("sgemm1", "sgemm12", "dma", "fft"),
                     progress=None, boards=None):
    """The model against every published figure: a list of dicts (case, board, published,
    model, unit, ratio, within, source, detail)."""
    rows, rng = [], np.random.default_rng(0)
    sizes = REDUCED_N if reduced else FULL_N
    for case, board, qpus, published, source in SGEMM_PUBLISHED:
        if case not in cases or (boards and board not in boards):
            continue
        n = sizes[qpus]
        gflops, run, (busy, hits, misses), host = run_sgemm(overrides, board, qpus, n, rng)
        detail = (f"{run.cycles:,} clocks; bus busy {busy / run.cycles:.0%}; L2 {hits:,} hits "
                  f"/ {misses:,} misses; {stall_shares(run)}; {host:.0f} s host time")
        rows.append(_row(f"SGEMM {M}x{K} x {K}x{n}, {qpus} QPU{'s' if qpus > 1 else ''}",
                         board, published, gflops, "GFLOPS", source, detail))
        if progress:
            progress(rows[-1])
    if "dma" in cases:
        blocks = 16 if reduced else 64
        for (direction, rowlen), published in DMA_PUBLISHED.items():
            what = "16-word rows" if rowlen == 16 else "single words"
            rate = run_dma(overrides, "pi1", direction, rowlen, blocks)
            rows.append(_row(f"DMA {direction}, {what}, 12 QPUs", "pi1", published, rate, "MB/s",
                             DMA_SOURCE, f"{blocks} DMAs of 4 rows per QPU"))
            if progress:
                progress(rows[-1])
    if "fft" in cases:
        for log2n, jobs in (FFT_REDUCED if reduced else FFT_PUBLISHED):
            rows.append(fft_row(overrides, log2n, jobs, rng))
            if progress:
                progress(rows[-1])
    return rows


def fft_row(overrides, log2n, jobs, rng):
    n = 1 << log2n
    x = fft_design.random_signal(jobs, n, rng)
    start = time.perf_counter()
    out, run, seconds = fft_design.run_fft(x, "pi1", overrides)
    host = time.perf_counter() - start
    # GPU_FFT's own error grows to 70 ppm rms at 2^17 points (gpu_fft.txt); ours is 0.4-30 ppm.
    assert fft_design.relative_rms_error(out, x) < 1e-4, "wrong FFT"
    path = fft_design.launch_path(n, jobs)
    detail = (f"{run.cycles:,} clocks + {path} launch; {stall_shares(run)}; "
              f"{host:.0f} s host time")
    return _row(f"FFT {n} points, batch {jobs}, 8 QPUs", "pi1", FFT_PUBLISHED[log2n, jobs],
                seconds * 1e6, "us", FFT_SOURCE, detail)


def _row(case, board, published, model, unit, source, detail):
    ratio = model / published
    return {"case": case, "board": board, "published": published, "model": round(model, 3),
            "unit": unit, "ratio": round(ratio, 3), "within": abs(ratio - 1) <= TOLERANCE,
            "source": source, "detail": detail}


def table_text(rows):
    lines = [f"{'case':44} {'board':6} {'published':>13} {'model':>8} {'model/pub':>10}  "
             f"within +/-{TOLERANCE:.0%}"]
    for r in rows:
        lines.append(f"{r['case']:44} {r['board']:6} {r['published']:>6g} {r['unit']:<6} "
                     f"{r['model']:>8.2f} {r['ratio']:>10.2f}  {'yes' if r['within'] else 'NO'}")
    return "\n".join(lines)


def table_markdown(rows):
    """The table as docs/cycle-model.md renders it."""
    lines = ["| case | board | published | model (estimate) | model / published | source |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['board']} | {r['published']:g} {r['unit']} | "
                     f"{r['model']:.2f} {r['unit']} | {r['ratio']:.2f} | {r['source']} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=("sgemm1", "sgemm12", "dma", "fft", "all"),
                        default="all")
    parser.add_argument("--reduced", action="store_true",
                        help="smaller SGEMM shapes (1 QPU N=64, 12 QPUs N=384), fewer DMAs and "
                             "five of the FFT rows")
    parser.add_argument("--board", action="append", choices=sorted(BOARDS),
                        help="only the SGEMM rows of this board (repeatable)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="override a cycle-model parameter")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    overrides = parse_overrides(args.set)
    cases = ("sgemm1", "sgemm12", "dma", "fft") if args.case == "all" else (args.case,)
    quiet = args.json or args.markdown

    def progress(row):
        if not quiet:
            print(f"  {row['case']} ({row['board']}): {row['model']:.2f} {row['unit']}; "
                  f"{row['detail']}", flush=True)

    rows = calibration_rows(overrides, args.reduced, cases, progress, args.board)
    if args.json:
        print(json.dumps({"overrides": overrides, "reduced": args.reduced, "rows": rows},
                         indent=1))
    elif args.markdown:
        print(table_markdown(rows))
    else:
        print("Cycle model (ESTIMATES) against the published hardware figures"
              + (f", with {overrides}" if overrides else "") + ":")
        print(table_text(rows))


def stall_shares(run):
    total = {}
    for q in run.qpus:
        for cause, clocks in q.stalls.items():
            total[cause] = total.get(cause, 0) + clocks
    return ", ".join(f"{cause} {clocks / (run.cycles * run.num_qpus):.0%}"
                     for cause, clocks in sorted(total.items(), key=lambda kv: -kv[1]) if clocks)


if __name__ == "__main__":
    main()
