#!/usr/bin/env python3
"""The QPU program of tools/fft_design.py's GPU_FFT-design FFT (the design, its passes, steps and
synchronisation are described there): the register table, the cross-lane DFT, the passes' steps
and the per-QPU role procedures, one program for all QPUs.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from asm import (element_number, isa, kernel, null, r0, r1, r2, r3, r4, ra, rb,  # noqa: E402
                 tmu0_s, uniform, vdw_setup, vdw_stride, vpm, vpm_write_setup, vw_setup)
from vc4nn.kernels.common import GATHER_DEPTH, LANES, WORD, each_record  # noqa: E402

QPUS = 8                            # GPU_FFT_QPUS
VECTOR_BYTES = WORD * LANES         # a 16-float table row; 16 words of VPM
# log2(N) -> radices of the passes, with GPU_FFT's pass counts (gpu_fft.txt: "log2_N=12...16 use
# an odd number of passes"; 8..11 two passes, 17 four). From 2^18 points on, a pass of radix R
# would store rows N/R points apart, beyond the VDW's 16-bit stride (facts §5.14): not built.
RADICES = {8: (16, 16), 9: (32, 16), 10: (32, 32), 11: (64, 32),
           12: (16, 16, 16), 13: (32, 16, 16), 14: (32, 32, 16), 15: (32, 32, 32),
           16: (64, 32, 32), 17: (32, 16, 16, 16)}
SIZES = tuple(sorted(RADICES))
DONE, GO = 0, (1, 2)                # semaphores: slaves -> master; master -> slaves per step parity

# Registers (ra / rb pairs hold re / im of the same thing, except H1: im in ra, re in rb, so
# that H0 + H1 reads one register of each file).
Q, STEP_LINK = ra[0], ra[1]         # QPU index; return address of the role procedures
VPM_Y = rb[9]                       # VPM write setup of this QPU's columns in the step's buffer
VDW_SETUP, VDW_STRIDE = (rb[10], rb[11]), rb[12]     # the master's stores of the pass
SYNC, SYNC_TOGGLE = ra[31], rb[13]  # this QPU's role procedures for the step's parity (odd:
#                                     a call through it sets the flags, facts §5.4; the
#                                     procedures and callers set them before use); SYNC ^ this
#                                     gives the other parity's
STAGE_TW = 2                        # ra/rb 2..5: lane twiddles of the 4 cross-lane stages
W32, W64, W64_HI = 6, 7, 8          # w_32^l, w_64^l, w_64^(l+16): the radix-32/64 combines
OFFSET = 9                          # ra 9..16: lane byte offsets of the 2 requests per vector
TW, STEP = 17, 21                   # ra/rb 17..20: group twiddles per vector; 21..24: their step
HELD = 25                           # ra/rb 25..28: transformed vectors waiting for the combine
OUT, BASE, FLAGS = rb[16], rb[29], ra[29]  # store address (master), the group's first point,
#                                     step flags
LINK = ra[30]                       # return address of dft16 (even: a branch reading an odd ra
#                                     sets the flags, facts §5.4)
ADVANCE, MORE, SINGLE = 1, 4, 8    # step flags: next k1 (twiddles step), more steps follow
#                                     in this pass, radix 64 (one VPM buffer: the master waits
#                                     for each store)


def jump(a, label, cond="always", link=None):
    """Branch, with its delay slots empty."""
    a.branch(label, cond=cond, link=link)
    for _ in range(isa.BRANCH_DELAY_SLOTS):
        a.nop()


def load_rows(a, dsts):
    """TMU-load consecutive 16-float rows of the table whose address is in r3 (r2 =
    VECTOR_BYTES) into ``dsts``, at most GATHER_DEPTH requests in flight."""
    for start in range(0, len(dsts), GATHER_DEPTH):
        batch = dsts[start:start + GATHER_DEPTH]
        for _ in batch:
            a.mov(tmu0_s, r3)
            a.add(r3, r3, r2)
        for dst in batch:
            a.nop(sig="ldtmu0")
            a.mov(dst, r4)


def table_address(a):
    """r3 = this QPU's lane of the table row 0 whose address is the next uniform;
    r2 = VECTOR_BYTES."""
    a.shl(r2, element_number, 2)
    a.add(r3, r2, uniform)
    a.ldi(r2, VECTOR_BYTES)


def deinterleave(a, after_pops=lambda: None, before_last3=lambda: None):
    """Pop a vector's two TMU requests into (r0, r1) = (re, im). Each request reads whole points:
    request A gives even lanes the re of their point and odd lanes the im of the point before,
    B the re of the point after (even lanes) and the im of their own (odd lanes), so the two
    touch each point's line once, not twice (GPU_FFT's shaders read in the same way).
    ``after_pops`` and ``before_last3`` emit code at those points (new requests; a branch whose
    delay slots take the last three instructions)."""
    a.nop(sig="ldtmu0")
    a.mov(r2, r4, sig="ldtmu0")
    a.mov(r3, r4)
    after_pops()
    a.and_(null, element_number, 1, sf=True)              # Z: even lanes
    before_last3()
    a.v8min(r0, r3, r3, rotate=1)                         # lane l: B[l - 1], the re of point l
    a.mov(r0, r2, cond="zs").v8min(r1, r2, r2, rotate=LANES - 1)   # A[l + 1]: im of point l
    a.mov(r1, r3, cond="zc")


def complex_multiply(a, re, im, cond="always", before_last3=lambda: None):
    """(r0, r1) *= (re, im) in the lanes ``cond`` selects; r2, r3 are scratch."""
    a.fmul(r2, r0, re, cond=cond)
    a.fmul(r3, r1, im, cond=cond)
    before_last3()
    a.fsub(r2, r2, r3, cond=cond).fmul(r3, r0, im, cond=cond)
    a.mov(r0, r2, cond=cond).fmul(r1, r1, re, cond=cond)
    a.fadd(r1, r1, r3, cond=cond)


def dft16_across_lanes(a):
    """The subroutine ``dft16`` (called by ``dft16_call``): (r0, r1), 16 points in bit-reversed
    lane order -> their DFT in natural order. Stage t pairs lane l (bit t clear, 'top') with
    l + 2^t ('bottom'): bottom *= w_{2^(t+1)}^(l mod 2^t), then top, bottom = top + bottom,
    top - bottom, the partner read through a vector rotation. One copy serves every vector of
    every step and pass, as GPU_FFT's shaders call their fft_16 (the code stays small enough
    for the slices' instruction caches); the return's delay slots finish the last stage."""
    a.label("dft16")
    for t in range(4):
        d = 1 << t
        a.and_(null, element_number, d, sf=True)            # Z: top lanes
        if t:
            complex_multiply(a, ra[STAGE_TW + t], rb[STAGE_TW + t], cond="zc")
        a.v8min(r2, r0, r0, rotate=LANES - d)                 # lane l: r0[l + d]
        a.v8min(r3, r0, r0, rotate=d)                         # lane l: r0[l - d]
        a.fadd(r0, r0, r2, cond="zs").v8min(r2, r1, r1, rotate=LANES - d)
        if t == 3:
            a.branch(0, reg=LINK, absolute=True)              # return
        a.fsub(r0, r3, r0, cond="zc").v8min(r3, r1, r1, rotate=d)
        a.fadd(r1, r1, r2, cond="zs")
        a.fsub(r1, r3, r1, cond="zc")


def dft16_call(a):
    """Call dft16; the caller puts the 3 instructions that finish its input in the delay slots."""
    a.branch("dft16", link=LINK)


def vpm_rows(a, h):
    """Point the VPM writes at this QPU's two columns of rows y + 16h.. (re, then im), y the
    step's buffer (VPM_Y)."""
    if h:
        a.ldi(r2, LANES * h)
        a.add(vw_setup, VPM_Y, r2)
    else:
        a.mov(vw_setup, VPM_Y)


def held(v):
    """(re, im) registers of held vector v (H1 swapped, see the register table)."""
    return (rb[HELD + v], ra[HELD + v]) if v == 1 else (ra[HELD + v], rb[HELD + v])


def load_and_transform(a, first_pass, vectors):
    """TMU-gather the group's vectors (at most GATHER_DEPTH requests in flight), twiddle each
    (after pass 1) and take its 16-point DFT; all but the last are left in the held registers."""
    a.mov(r2, uniform)                                   # the group's first point
    requests = 2 * vectors
    for request in range(min(requests, GATHER_DEPTH)):
        a.add(tmu0_s, r2, ra[OFFSET + request])
    if requests > GATHER_DEPTH:
        a.mov(BASE, r2)
    a.mov(FLAGS, uniform)
    for v in range(vectors):
        def more_requests():
            for request in range(2 * v + GATHER_DEPTH, min(2 * v + 2 + GATHER_DEPTH, requests)):
                a.add(tmu0_s, BASE, ra[OFFSET + request])
        if first_pass:
            deinterleave(a, more_requests, lambda: dft16_call(a))
        else:
            deinterleave(a, more_requests)
            complex_multiply(a, ra[TW + v], rb[TW + v], before_last3=lambda: dft16_call(a))
        if vectors == 4 and v % 2:                       # E2, E3 *= w_32^l (radix-64 stage 1)
            complex_multiply(a, ra[W32], rb[W32])
        if v + 1 < vectors:
            re, im = held(v)
            a.mov(re, r0)
            a.mov(im, r1)


def write_outputs(a, vectors):
    """The group's outputs k = l + 16h into VPM rows y + 16h (h = 0..vectors-1)."""
    if vectors == 1:
        vpm_rows(a, 0)
        a.mov(vpm, r0)
        a.mov(vpm, r1)
    elif vectors == 2:                                   # radix 32: the last radix-2 stage
        complex_multiply(a, ra[W32], rb[W32])
        for h, combine in enumerate((a.fadd, a.fsub)):
            vpm_rows(a, h)
            combine(vpm, ra[HELD], r0)
            combine(vpm, rb[HELD], r1)
    else:
        # Radix 64. Held: E0, w E2, E1 (the vectors hold n2 = 0, 2, 1, 3 mod 4); (r0, r1) = w E3.
        # G1 = E1 +- w E3, G0 = E0 +- w E2 (lo, hi); X[h] = G0 +- w_64 G1 (h = 0, 2; 1, 3).
        a.fsub(ra[HELD + 3], ra[HELD + 2], r0)           # G1 hi
        a.fsub(rb[HELD + 3], rb[HELD + 2], r1)
        a.fadd(r0, ra[HELD + 2], r0)                     # G1 lo
        a.fadd(r1, rb[HELD + 2], r1)
        w_e2_re, w_e2_im = held(1)
        a.fadd(ra[HELD + 2], ra[HELD], w_e2_re)          # G0 lo
        a.fadd(rb[HELD + 2], rb[HELD], w_e2_im)
        a.fsub(ra[HELD], ra[HELD], w_e2_re)              # G0 hi
        a.fsub(rb[HELD], rb[HELD], w_e2_im)
        for half, w, g0 in ((0, W64, HELD + 2), (1, W64_HI, HELD)):
            if half:
                a.mov(r0, ra[HELD + 3])
                a.mov(r1, rb[HELD + 3])
            complex_multiply(a, ra[w], rb[w])
            for h, combine in ((half, a.fadd), (half + 2, a.fsub)):
                vpm_rows(a, h)
                combine(vpm, ra[g0], r0)
                combine(vpm, rb[g0], r1)


def unless_slave(a, skip):
    """Branch to ``skip`` on a slave (not QPU 0): what follows up to it is the master's part."""
    a.mov(null, Q, sf=True)
    jump(a, skip, "all_zc")


def transform(a, first_pass, vectors):
    """A step's group: load, twiddle, DFT, write the VPM rows of the step's buffer."""
    load_and_transform(a, first_pass, vectors)
    write_outputs(a, vectors)


def advance(a, vectors):
    """Next k1: the twiddles *= their step, where the step's flags say so. The first vector's
    twiddle is already in (r0, r1) (sync's delay slots)."""
    a.and_(null, FLAGS, ADVANCE, sf=True)
    for v in range(vectors):
        if v:
            a.mov(r0, ra[TW + v])
            a.mov(r1, rb[TW + v])
        complex_multiply(a, ra[STEP + v], rb[STEP + v])
        a.mov(ra[TW + v], r0, cond="zc")
        a.mov(rb[TW + v], r1, cond="zc")


def step(a, first_pass, vectors):
    """One group per QPU: load, twiddle, DFT, write the VPM; the master stores all 8 groups.
    Steps alternate between two VPM buffers and two GO semaphores (radix 64 fills all 64 VPM
    rows: one buffer, so the master waits for each store); as GPU_FFT's, one copy of the step
    serves both, the buffers swapped in registers and the synchronisation in per-QPU
    procedures (role_tables), so the code stays small enough for the instruction caches."""
    transform(a, first_pass, vectors)
    sync(a, first_pass)
    if not first_pass:
        advance(a, vectors)


def toggle_buffers(a, vectors):
    """The next step's procedures and VPM buffer (radix 64 has one): 3 instructions."""
    a.xor(SYNC, SYNC, SYNC_TOGGLE)
    if vectors < 4:
        a.ldi(r2, LANES * vectors)
        a.xor(VPM_Y, VPM_Y, r2)
    else:
        a.nop()
        a.nop()


# The role procedures (GPU_FFT's per-QPU sync procedures): per role a table of an entry per step
# parity (a branch and its delay slots), the master's table first; SYNC holds this QPU's entry
# for the step's parity.
ENTRY_BYTES = (1 + isa.BRANCH_DELAY_SLOTS) * isa.INSTRUCTION_BYTES
TABLE_BYTES = len(GO) * ENTRY_BYTES
SLAVES = QPUS - 1
# the master acquires DONE and releases GO once per slave, the last ones in a branch's delay slots
SLAVES_BEFORE_SLOTS = SLAVES - isa.BRANCH_DELAY_SLOTS


def sync(a, first_pass):
    """Call this QPU's role procedure for leaving the step: a slave releases DONE and waits for
    the next step's GO, the master stores the step and hands the next one over. The delay
    slots load the first twiddle for advance (the procedures leave r0, r1 alone)."""
    a.branch(0, reg=SYNC, absolute=True, link=STEP_LINK)
    if first_pass:
        a.nop()
        a.nop()
    else:
        a.mov(r0, ra[TW])
        a.mov(r1, rb[TW])
    a.nop()


def role_tables(a):
    """SYNC = this QPU's table: the master's entries, then the slaves'. An entry returns at once
    with its work in the delay slots, or branches to the master's procedure."""
    jump(a, "tables_end", link=SYNC)                     # SYNC = the master's table
    for parity in (0, 1):
        a.branch(f"master_leave{parity}")
        for _ in range(isa.BRANCH_DELAY_SLOTS):
            a.sema_acquire(DONE)                         # master_leave waits for the rest
    for parity in (0, 1):
        a.branch(0, reg=STEP_LINK, absolute=True)        # return, with the work in the slots
        a.sema_release(DONE)
        a.sema_acquire(GO[1 - parity])
        a.nop()
    a.label("tables_end")
    a.mov(null, Q, sf=True)
    a.ldi(r2, TABLE_BYTES)
    a.add(SYNC, SYNC, r2, cond="zc")                     # a slave: the second table
    a.ldi(r2, ENTRY_BYTES)
    a.add(r3, SYNC, r2)
    a.xor(SYNC_TOGGLE, SYNC, r3)                         # SYNC ^ this: the other parity


def master_leave(a, parity):
    """When the 7 slaves have written their columns: store the 8 groups' outputs, one VDW of
    16-word rows VDW_STRIDE apart (the previous store must have read the VPM); then hand the
    next step over (hand_over)."""
    a.label(f"master_leave{parity}")
    for _ in range(SLAVES_BEFORE_SLOTS):                 # the rest in the table entry's slots
        a.sema_acquire(DONE)
    a.wait_dma_store()
    a.mov(vw_setup, VDW_SETUP[parity])
    a.mov(vw_setup, VDW_STRIDE)
    a.start_dma_store(OUT)
    with a.scope():
        a.and_(null, FLAGS, SINGLE, sf=True)             # radix 64: one buffer
        a.branch("double", cond="all_zs")
        a.ldi(r2, VECTOR_BYTES)
        a.add(OUT, OUT, r2)                              # the next 8 groups' outputs
        a.nop()
        a.wait_dma_store()                               # the VPM is free for the next group
        a.label("double")
    hand_over(a, parity, lambda: a.branch(0, reg=STEP_LINK, absolute=True))


def hand_over(a, parity, before_last3):
    """The master lets the slaves start the next step; after a pass's last step only once its
    store is in memory (the next pass reads it). After the very last step too: the slaves,
    which acquire the next step's GO as they leave a step, end with the semaphores at 0."""
    if parity:
        with a.scope():
            a.and_(null, FLAGS, MORE, sf=True)
            jump(a, "more", "all_zc")
            a.wait_dma_store()
            a.label("more")
    for i in range(SLAVES):
        if i == SLAVES_BEFORE_SLOTS:
            before_last3()                               # the return, these in its slots
        a.sema_release(GO[1 - parity])


def jobs(a, radices, n):
    """Every QPU's program: jobs x passes x steps (the master releases the first step, the
    slaves wait for it; each later step's GO they take as they leave the one before)."""
    with a.scope():
        unless_slave(a, "slave")
        for _ in range(SLAVES):
            a.sema_release(GO[0])
        jump(a, "go")
        a.label("slave")
        a.sema_acquire(GO[0])
        a.label("go")
    each_record(a, lambda: job(a, radices, n))      # a record per job


def job(a, radices, n):
    for p, radix in enumerate(radices):
        vectors = radix // LANES
        table_address(a)
        rows = [ra[OFFSET + request] for request in range(2 * vectors)]
        if p:
            for v in range(vectors):
                rows += [ra[TW + v], rb[TW + v], ra[STEP + v], rb[STEP + v]]
        load_rows(a, rows)
        a.mov(OUT, uniform)                               # the pass's output buffer
        row_stride = n // radix * 8
        for parity in (0, 1):
            y = 0 if vectors == 4 else parity * LANES * vectors
            a.ldi(VDW_SETUP[parity], vdw_setup(LANES * vectors, LANES, y))
        a.ldi(VDW_STRIDE, vdw_stride(row_stride - VECTOR_BYTES))
        a.label(f"pass{p}")
        step(a, p == 0, vectors)
        a.and_(null, FLAGS, MORE, sf=True)
        a.branch(f"pass{p}", cond="all_zc")
        toggle_buffers(a, vectors)                       # in the delay slots


@kernel
def fft_design(a, log2n):
    radices, n = RADICES[log2n], 1 << log2n
    a.mov(Q, uniform)
    table_address(a)
    load_rows(a, [ra[STAGE_TW + t] for t in range(4)] + [rb[STAGE_TW + t] for t in range(4)]
              + [reg for w in (W32, W64, W64_HI) for reg in (ra[w], rb[w])])
    a.shl(r2, Q, 1)                                     # this QPU's VPM columns
    a.ldi(r3, vpm_write_setup(0, horizontal=False))
    a.add(VPM_Y, r2, r3)
    role_tables(a)
    jobs(a, radices, n)
    a.exit()
    dft16_across_lanes(a)
    for parity in (0, 1):
        master_leave(a, parity)
