"""The stem with lanes = output channels (docs/kernels.md "Convolution (the stem)", "Channel
lanes"): for Cout = 32 and a window of at most 27 taps (MobileNet's 3x3x3 stem).

Why: with lanes = pixels (conv2d.py) every multiply-add takes its weight as a uniform, and
every 16 uniforms wait for a line from the L2 (a third of the QPUs' time). Here the weights
stay put, one vector of 16 channels per tap and half: the lower half (``LOWER``) in regfile A,
the upper half in VPM rows every QPU reads (``UPPER_ROWS``, loaded once by QPU 0), and each
window element comes as a TMU lookup of one address by all 16 lanes, a broadcast that feeds
both halves. A tap is 3 instructions (the TMU request and the copy of the broadcast into r5,
then each half's multiply with the previous tap's add): no uniforms, no gather of taps.

Halves: channels 2i and 2i + 1 for an fp16 result (lane i of the halves packs them into one
word: a pixel is one VPM row of 32 halves), channels i and 16 + i for fp32 (two rows). The
kernel gathers the weights in that order from the prepared stream of conv2d.py (a per-lane
table of where each channel's bias and taps start), so one prepared layout serves both kernels.

Pixels go in records of up to 16 of one output row (as conv2d.py's groups): the row bases of
the first pixel, the count of whole pixels, whether a right-edge pixel follows (its window's
last kernel columns are padding: the taps run kernel column by column, so it stops early), and
the output address. Rows of padding read the zero row; left padding is not taken
(``fits``).
"""

from asm import element_number, kernel, null, r0, r1, r2, r3, r4, r5, r5rep, ra, rb, tmu0_s, tmu1_s, \
    uniform, vdw_setup, vpm, vpm_read_setup, vpm_write_setup, vr_setup, vw_addr, vw_setup, vw_wait

from . import chain
from .common import LANES, WORD, each_record, ops_then_branch
from .spatial import PlanError

CHANNELS = 2 * LANES                    # the output depth this kernel computes
MAX_TAPS = 27
MAX_ROWS = 3                            # kernel rows: a row base register each
MAX_OFFSETS = 9                         # kernel columns x input channels: an offset each
DEPTH = 4                               # TMU lookups in flight (facts §5.13)
READ_ROWS = 16                          # rows a VPM read setup reads at most

LOWER = [ra[i] for i in range(MAX_TAPS)]          # lower half's weights, one vector per tap
ROWS = [ra[27 + i] for i in range(MAX_ROWS)]      # the pixel's input row addresses
PACKED = ra[30]                                   # fp16: the pixel's 32 halves
OUT = ra[31]                                      # the pixel's output address
OFFSETS = [rb[i] for i in range(MAX_OFFSETS)]     # per (kernel column, channel): byte offset
BIAS = (rb[9], rb[10])
SIX, STEP, OUT_STEP, STAGE, STORE, PREFETCH_LAST, EDGE, LANE_AT, READ_FIRST = \
    (rb[i] for i in range(11, 20))
READY_SEMAPHORE = 0                     # QPU 0 has put the upper half's weights in the VPM
UPPER_ROWS = 0                          # VPM rows of the upper half's weights, from here


def taps(plan):
    """(kh, kw, ci) in the order the kernel runs them: kernel column by column, so that a
    pixel whose last columns are padding runs a prefix."""
    return sorted(plan.taps, key=lambda t: (t[1], t[0], t[2]))


def edge_taps(plan):
    """The taps of the last output column: those whose input column is in the image."""
    last = (plan.out_w - 1) * plan.stride_w - plan.pads[2]
    return [t for t in taps(plan) if last + t[1] < plan.in_w]


def fits(plan):
    """Why this kernel cannot run ``plan``, or None."""
    if plan.cout != CHANNELS:
        return f"Cout {plan.cout} is not {CHANNELS}"
    if len(plan.taps) > MAX_TAPS or plan.kernel_h > MAX_ROWS \
            or plan.kernel_w * plan.cin > MAX_OFFSETS:
        return "the window is larger than the registers hold"
    if len(plan.passes) > 1:
        return "the prepared weights come in several passes"
    if plan.pads[2]:
        return "left padding"
    if plan.out_w > 1 and (plan.out_w - 2) * plan.stride_w + plan.kernel_w > plan.in_w:
        return "right padding beyond the last output column"
    if plan.activation not in (None, "relu", "relu6"):
        return f"activation {plan.activation!r}"
    return None


def check(plan):
    reason = fits(plan)
    if reason:
        raise PlanError(f"conv2d with channel lanes: {reason}")
    return plan


def rows_per_pixel(plan):
    return 1 if plan.out_bits == 16 else 2


def staging_row(plan, q):
    return UPPER_ROWS + len(plan.taps) + q * rows_per_pixel(plan)


def half_channels(plan, half):
    """Output channel of each lane of ``half`` (0 lower, 1 upper)."""
    if plan.out_bits == 16:
        return [2 * i + half for i in range(LANES)]
    return [half * LANES + i for i in range(LANES)]


def lane_table(plan):
    """Words: per half, each lane's byte offset of its channel's bias in the prepared stream
    (conv2d.Conv2dPlan.weight_stream: per channel its bias, then its taps)."""
    start, at = {}, 0
    for c0, n in plan.blocks:
        for co in plan.channel_order(c0, n):
            start[co] = at
            at += 1 + len(plan.taps)
    return [start[co] * WORD for half in (0, 1) for co in half_channels(plan, half)]


def tap_word(plan, tap):
    """Word offset of ``tap``'s weight after its channel's bias in the prepared stream."""
    return 1 + plan.taps.index(tap)


def offset_of(plan, kw, ci):
    return kw * plan.pixel_bytes + ci * plan.channel_bytes


def offset_register(plan, tap):
    _, kw, ci = tap
    return OFFSETS[kw * plan.cin + ci]


def streams(plan, x_addr, y_addr, weights_addr, table_addr, zero_addr):
    """Per QPU: [weights, lane table, 1 on QPU 0, staging write setup, store setup, records...,
    0]; a record: [1, row addresses (kh), output address, the output address of the last
    pixel that prefetches (the last whole pixel but one), 1 if a right-edge pixel follows,
    whole pixels]."""
    groups, qpus = plan.groups, plan.qpus
    edge = len(edge_taps(plan)) < len(plan.taps)
    pixel_out = CHANNELS * plan.out_bytes
    out = []
    for q in range(qpus):
        y = staging_row(plan, q)
        words = [weights_addr, table_addr, int(q == 0),
                 vpm_write_setup(y=y), vdw_setup(rows_per_pixel(plan), LANES, y)]
        for i, j0 in groups[q::qpus]:
            n = min(LANES, plan.out_w - j0)
            ends_at_edge = edge and j0 + n == plan.out_w
            words.append(1)
            for kh in range(plan.kernel_h):
                r = i * plan.stride_h + kh - plan.pads[0]
                row = x_addr + r * plan.in_w * plan.pixel_bytes if 0 <= r < plan.in_h \
                    else zero_addr
                words.append(row + j0 * plan.stride_w * plan.pixel_bytes)
            out_at = y_addr + (i * plan.out_w + j0) * pixel_out
            whole = n - ends_at_edge
            words += [out_at, out_at + (whole - 2) * pixel_out, int(ends_at_edge), whole]
        out.append(words + [0])
    return chain.with_tail(out)


def load_vectors(a, base, words, store):
    """``store(k)`` with r4 = vector k: per lane, the word at base + words[k] * 4 (DEPTH TMU
    lookups in flight; r0 holds the offsets)."""
    def request(k):
        a.ldi(r0, words[k] * WORD)
        a.add(tmu0_s, base, r0)

    for k in range(min(DEPTH, len(words))):
        request(k)
    for k in range(len(words)):
        a.nop(sig="ldtmu0")
        store(k)
        if k + DEPTH < len(words):
            request(k + DEPTH)


def prologue(a, plan):
    """The weights into LOWER, BIAS and (QPU 0) the VPM; the constants."""
    order = taps(plan)
    a.mov(r1, uniform)                               # the prepared weights
    a.mov(r2, uniform)                               # the lane table
    a.shl(r3, element_number, 2)
    a.add(tmu0_s, r2, r3)
    a.ldi(r0, LANES * WORD)
    a.add(r0, r0, r3)
    a.add(tmu0_s, r2, r0)
    a.nop(sig="ldtmu0")
    a.add(LANE_AT, r1, r4)                           # lower half: each lane's channel
    a.nop(sig="ldtmu0")
    a.add(r1, r1, r4)                                # upper half
    a.mov(r5rep, uniform)                            # 1 on QPU 0
    a.mov(STAGE, uniform)
    a.mov(STORE, uniform)
    words = [tap_word(plan, t) for t in order]
    load_vectors(a, LANE_AT, [0], lambda k: a.mov(BIAS[0], r4))
    load_vectors(a, LANE_AT, words, lambda k: a.mov(LOWER[k], r4))
    load_vectors(a, r1, [0], lambda k: a.mov(BIAS[1], r4))
    a.mov(null, r5, sf=True)
    a.branch("wait", cond="all_zs")
    a.nop()
    a.nop()
    a.nop()
    a.ldi(vw_setup, vpm_write_setup(y=UPPER_ROWS))
    load_vectors(a, r1, words, lambda k: a.mov(vpm, r4))
    for _ in range(plan.qpus - 1):
        a.sema_release(READY_SEMAPHORE)
    a.branch("ready")
    a.nop()
    a.nop()
    a.nop()
    a.label("wait")
    a.sema_acquire(READY_SEMAPHORE)
    a.label("ready")
    for kw in range(plan.kernel_w):
        for ci in range(plan.cin):
            a.ldi(OFFSETS[kw * plan.cin + ci], offset_of(plan, kw, ci))
    a.ldi(SIX, 6.0)
    a.ldi(STEP, plan.stride_w * plan.pixel_bytes)
    a.ldi(OUT_STEP, CHANNELS * plan.out_bytes)
    a.ldi(READ_FIRST, vpm_read_setup(min(READ_ROWS, len(plan.taps)), UPPER_ROWS))


def tmu_unit(plan, tap):
    """TMU 0 or 1 for ``tap``'s lookup. Planes: odd channels through TMU 1, so that the nine
    row streams of a window (three planes of three rows) share two direct-mapped TMU caches
    instead of one (225 x 225 planes: a plane's row 0 and the previous plane's row 2 fall on
    the same cache line, 1796 and 1800 bytes modulo 4 KB). NHWC: one cache, as a window row's
    channels share its lines."""
    return tap[2] % 2 if plan.in_layout == "chw" else 0


def request(a, plan, tap):
    """The TMU lookup of ``tap`` for the pixel whose row bases are in ROWS."""
    return a.add((tmu0_s, tmu1_s)[tmu_unit(plan, tap)], ROWS[tap[0]], offset_register(plan, tap))


def pop(plan, tap):
    return f"ldtmu{tmu_unit(plan, tap)}"


def first_requests(a, plan, run):
    """The lookups of ``run``'s first DEPTH taps (the pixel's row bases in ROWS) and the VPM
    read setup of its first upper-half rows; tap 0 is (0, 0, 0), at offset 0, so its request
    reads no offset register and the setup rides with it."""
    rows = min(READ_ROWS, len(run))
    assert offset_of(plan, run[0][1], run[0][2]) == 0
    if rows == min(READ_ROWS, len(plan.taps)):
        a.mov((tmu0_s, tmu1_s)[tmu_unit(plan, run[0])], ROWS[0]).mov(vr_setup, READ_FIRST)
    else:
        a.ldi(vr_setup, vpm_read_setup(rows, UPPER_ROWS))
        request(a, plan, run[0])
    for tap in run[1:DEPTH]:
        request(a, plan, tap)


def pixel(a, plan, run, last_compare=False, prefetch=False):
    """One pixel of ``run`` (a prefix of ``taps``), its first lookups requested
    (``first_requests``) and the first popped into r4: its other lookups, both halves'
    multiply-adds and the activation; returns the store's last ops (emitters), which a caller
    puts in a branch's delay slots. ``last_compare``: the row bases step on to the next pixel
    and the flags say whether this is the record's last prefetching pixel (Z); ``prefetch``: the
    next pixel's first lookups are requested before the store, and the store's last op pops
    the first (the next pixel is a whole one of the same record)."""
    n = len(run)
    steps = []
    if last_compare:
        steps = [lambda kh=kh: a.add(ROWS[kh], ROWS[kh], STEP) for kh in range(plan.kernel_h)]
        steps.append(lambda: a.sub(null, OUT, PREFETCH_LAST, sf=True))
    for t in range(n):
        # X: the next request (or a row base's step once the last request is out), and the
        # broadcast x_t out of r4 (the pop in Y overwrites it).
        if t + DEPTH < n:
            request(a, plan, run[t + DEPTH]).mov(r5rep, r4)
        elif steps:
            steps.pop(0)().mov(r5rep, r4)
        else:
            a.mov(r5rep, r4)
        # Y: lower half; the pop of x_(t+1).
        sig = pop(plan, run[t + 1]) if t + 1 < n else None
        if t == 0:
            a.mov(r0, BIAS[0], sig=sig).fmul(r2, LOWER[t], r5)
        else:
            a.fadd(r0, r0, r2, sig=sig).fmul(r2, LOWER[t], r5)
        # Z: upper half, its weight from the VPM.
        if t == 0:
            a.mov(r1, BIAS[1]).fmul(r3, vpm, r5)
        else:
            a.fadd(r1, r1, r3).fmul(r3, vpm, r5)
        if t == READ_ROWS - 2 and n > READ_ROWS:
            # (one read of the first setup outstanding: facts §3, ADD's reading of the queue)
            a.ldi(vr_setup, vpm_read_setup(min(READ_ROWS, n - READ_ROWS),
                                           UPPER_ROWS + READ_ROWS))
    for step in steps:
        step()
    if prefetch:
        first_requests(a, plan, run)
    a.fadd(r0, r0, r2).mov(null, vw_wait)           # the last store has read the staging row
    a.fadd(r1, r1, r3).mov(vw_setup, STAGE)
    return activate_and_stage(a, plan, pop(plan, run[0]) if prefetch else None)


def activate_and_stage(a, plan, sig=None):
    """The activation of r0, r1 (and for fp16 their packing into PACKED); returns the staging
    write and the store as emitters, the last with ``sig``."""
    relu, six = plan.activation in ("relu", "relu6"), plan.activation == "relu6"
    if plan.out_bits == 16:
        for acc, pack in ((r0, "16a"), (r1, "16b")):
            if six:
                a.fmax(acc, acc, 0.0)
                a.fmin(PACKED, acc, SIX, pack=pack)
            else:
                a.fmax(PACKED, acc, 0.0 if relu else acc, pack=pack)
        staging = [lambda: a.mov(vpm, PACKED)]
    else:
        for acc in (r0, r1):
            if relu:
                a.fmax(acc, acc, 0.0)
        if six:
            a.fmin(r0, r0, SIX)
            a.fmin(r1, r1, SIX)
        staging = [lambda: a.mov(vpm, r0), lambda: a.mov(vpm, r1)]
    return staging + [lambda: a.mov(vw_setup, STORE),
                      lambda: a.add(OUT, OUT, OUT_STEP, sig=sig).mov(vw_addr, OUT)]


def record(a, plan):
    """A record's pixels: its whole pixels (all but the last prefetching the next one's first
    lookups), then its right-edge pixel if it has one."""
    full, edge = taps(plan), edge_taps(plan)
    for kh in range(plan.kernel_h):
        a.mov(ROWS[kh], uniform)
    a.mov(OUT, uniform)
    a.mov(PREFETCH_LAST, uniform)
    a.mov(EDGE, uniform)
    a.mov(r1, uniform, sf=True)                     # whole pixels
    with a.scope("pixels"):
        a.branch("edge", cond="all_zs")
        a.nop()
        a.nop()
        a.nop()
        first_requests(a, plan, full)
        a.sub(null, r1, 1, sf=True)
        a.branch("last", cond="all_zs")
        a.nop(sig=pop(plan, full[0]))
        a.nop()
        a.nop()
        a.label("whole")
        ops_then_branch(a, pixel(a, plan, full, last_compare=True, prefetch=True), "whole",
                        cond="all_zc")
        a.label("last")
        tail = pixel(a, plan, full)
        for kh in range(plan.kernel_h):
            tail.insert(0, lambda kh=kh: a.add(ROWS[kh], ROWS[kh], STEP))
        ops_then_branch(a, [lambda: a.mov(null, EDGE, sf=True)] + tail, "done", cond="all_zs")
        a.label("edge")
        first_requests(a, plan, edge)
        a.nop(sig=pop(plan, edge[0]))
        tail = pixel(a, plan, edge)
        a.nop()                                     # (PACKED was written just now)
        for op in tail:
            op()
        a.label("done")


@kernel
def conv2d_channels_kernel(a, plan):
    prologue(a, plan)
    each_record(a, lambda: record(a, plan))
    a.read(vw_wait)
    chain.end(a)
