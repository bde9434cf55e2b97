"""The fully connected layer (GEMV): ``y = act(x @ w + bias)``, x of Cin, y of Cout floats.

A GEMV reads every weight once and uses it for one multiply-add, so it is bound by the memory
bus, not by arithmetic: the kernel's job is to keep the bus busy with weight lines and spend
nothing else on it. The panel kernel (one A row, 8 lanes of every gather wasted, a barrier per
4 k) is poor at M = 1; this one:

- **Layout** (``prepare``: once per weight tensor): w as (Cin rounded up to 16, plus PAD_ROWS, Cout
  rounded up to 16) float32, zero-padded, bias padded to Cout rounded up to 16. A *block* is 16
  output columns; its k-row is one aligned 64-byte line, i.e. one TMU gather, all 16 lanes
  useful. Zero rows past Cin make every k-block whole; PAD_ROWS more let the loop ask for its
  gathers ahead without leaving the buffer.
- **Work**: a QPU owns a *group* of ``group`` blocks (registers hold ``group`` accumulators and
  gather addresses) and runs k over all of Cin for them; groups go round-robin to the QPUs.
  The bias is where the accumulators start.
- **x** arrives 16 k at a time by one gather (lanes past Cin clamped to its last element: they
  meet zero weights); for each k the MUL ALU's rotation broadcasts x[k] into r5 (as the panel
  kernel broadcasts A), then each block's gather of w[k] is multiplied by it and accumulated.
  Gathers are asked for GATHER_DEPTH ahead along the order they are consumed (x, then w of the
  group's blocks for k = 0..15, then the next x, ...).
- **Store**: each block's vector through the QPU's VPM staging row with the activation applied
  on the write (vc4nn/kernels/epilogue.py), one DMA of up to 16 columns. Groups past the last
  block repeat it (same inputs, same order, so the same bits go to the same address).
- **fp16 weights** (``w_storage="fp16"``): a block is 32 output columns and its k-row is still
  one 64-byte line, of channel-pair words: word i = (column i, column i + 16) as halves (16a,
  16b; ``prepare`` permutes once). Each gather feeds two multiply-adds through r4's unpack
  (``fmul r0, r4.unpack("16a"), r5`` and the same with 16b into r3), into two accumulators per
  block: half the weight bytes per output. The second half of a last block past Cout stores to
  a 16-word scratch buffer (not to a real column: a repeated group would race).
- **fp16 x** (``storage="fp16"``): lane i of x's gather asks for the half at x + 2 (16 j + i)
  (clamped to the last one) and keeps it by its address's bit 1 (vc4nn/kernels/halves.py);
  the pop flags from that address, recomputed (XADDR - XSTEP, clamped), so the k-block counter
  is decremented after it. Three instructions per 16 k, beside 16 x ``group`` weight gathers.

Uniform stream of one QPU: [VPM write setup of its staging row, x address, address of x's last
element], then per group [1, (bias) the bias address of each block, the w address of each block,
then for each block (VDW setup, y address)], then 0.
"""

import dataclasses
import functools
import typing

from asm import element_number, kernel, r0, r1, r2, r3, r4, r5, r5rep, ra, rb, tmu0_s, uniform, \
    vdw_setup, vpm, vpm_write_setup, vw_addr, vw_setup, vw_wait

from ..errors import DeviceError
from . import chain
from .common import GATHER_DEPTH, LANES, ceil_div, each_record
from .epilogue import Epilogue, activate, prepare_activation
from .halves import HALF_HIGH, HALF_LOW, channel_pair_words, flag_half, gathered_half
from .spatial import STORAGE_BITS, check_storage

MAX_GROUP = 8
ADDR = [ra[i] for i in range(MAX_GROUP)]     # per-lane address of each block's next k-row
ACC = [rb[i] for i in range(MAX_GROUP)]
XADDR, XBASE, LANE_BYTES = ra[MAX_GROUP], ra[MAX_GROUP + 1], ra[MAX_GROUP + 2]
XLIMIT, ROW, XSTEP, STAGE_W, TWO = (rb[MAX_GROUP + i] for i in range(5))
# Gathers asked ahead past the last k-block: up to GATHER_DEPTH - 1 k-rows of w (one block per
# group) read these zero rows instead of leaving the buffer.
PAD_ROWS = GATHER_DEPTH - 1


@dataclasses.dataclass(frozen=True)
class FullyConnectedPlan:
    """``group``: blocks of 16 outputs per QPU pass (None: spread the blocks evenly over the
    QPUs, at most MAX_GROUP); a tuner's choice."""

    cin: int
    cout: int
    num_qpus: int
    bias: bool = False
    activation: typing.Optional[str] = None
    storage: str = "fp32"       # of x ("fp32" or "fp16"; y is float32)
    group_size: typing.Optional[int] = None
    w_storage: str = "fp32"

    def __post_init__(self):
        check_storage("fully_connected: storage", self.storage)
        check_storage("fully_connected: w_storage", self.w_storage)
        if self.group_size is not None and not 1 <= self.group_size <= self.max_group:
            raise DeviceError(f"fully_connected: group_size must be 1..{self.max_group}")

    @property
    def halves(self):
        """Accumulators (16-column vectors) per block: 2 with fp16 weights."""
        return 4 // self.weight_bytes

    @property
    def weight_bytes(self):
        return STORAGE_BITS[self.w_storage] // 8

    @property
    def block_cols(self):
        return LANES * self.halves

    @property
    def max_group(self):
        return MAX_GROUP // self.halves

    @property
    def epilogue(self):
        return Epilogue(bias=self.bias, activation=self.activation)

    @property
    def element_bytes(self):
        """Of x."""
        return STORAGE_BITS[self.storage] // 8

    @property
    def halves_in(self):
        return self.storage == "fp16"

    @property
    def blocks(self):
        return ceil_div(self.cout, self.block_cols)

    @property
    def k_blocks(self):
        return ceil_div(self.cin, LANES)

    @property
    def group(self):
        return self.group_size or min(self.max_group, ceil_div(self.blocks, self.num_qpus))

    @property
    def groups(self):
        return ceil_div(self.blocks, self.group)

    @property
    def qpus(self):
        return min(self.num_qpus, self.groups)

    @property
    def weight_shape(self):
        """The prepared weights' device layout (rows, columns)."""
        return self.k_blocks * LANES + PAD_ROWS, self.blocks * self.block_cols

    @property
    def bias_shape(self):
        return (self.blocks * self.block_cols,)

    def uniform_streams(self, x, w, y, bias=None, scratch=None):
        """``scratch``: 16 words for the stores of columns past Cout (fp16 weights)."""
        eb, yb = self.element_bytes, 4
        row_bytes = self.block_cols * self.weight_bytes
        streams = []
        for q in range(self.qpus):
            words = [vpm_write_setup(q), x, x + (self.cin - 1) * eb]
            for g in range(q, self.groups, self.qpus):
                blocks = [min(g * self.group + i, self.blocks - 1) for i in range(self.group)]
                columns = [b * self.block_cols + h * LANES for b in blocks
                           for h in range(self.halves)]
                words.append(1)
                if self.bias:
                    words += [bias + c * 4 for c in columns]
                words += [w + b * row_bytes for b in blocks]
                for c in columns:
                    if c < self.cout:
                        words += [vdw_setup(1, min(LANES, self.cout - c), q), y + c * yb]
                    else:
                        words += [vdw_setup(1, LANES, q), scratch]
            streams.append(words + [0])
        return chain.with_tail(streams)


def prepare(plan, w, bias=None):
    """Host arrays of the device layout: (weights, bias or None); see the module docstring."""
    import numpy as np
    weights = np.zeros(plan.weight_shape, np.float16 if plan.halves == 2 else np.float32)
    weights[:plan.cin, :plan.cout] = w
    if plan.halves == 2:
        weights = channel_pair_words(weights)
    padded_bias = None
    if bias is not None:
        padded_bias = np.zeros(plan.bias_shape, np.float32)
        padded_bias[:plan.cout] = bias
    return weights, padded_bias


@functools.lru_cache(maxsize=64)
def program_for(plan):
    return gemv_kernel.assemble(plan)


def k_block(a, plan):
    """16 k of the group: the consumption order is x, then w[k] of each block for k = 0..15.
    Each consumption pops one gather and asks for the one GATHER_DEPTH further on. A block's
    multiply-add is finished (fadd) with the next pop, which rides on it."""
    group, halves = plan.group, plan.halves
    order = ["x"] + [(k, b) for k in range(LANES) for b in range(group)]

    def request(p):
        item = order[p % len(order)]
        if item == "x":
            a.min(tmu0_s, XADDR, XLIMIT)
            a.add(XADDR, XADDR, XSTEP)
        else:
            b = item[1]
            a.add(ADDR[b], ADDR[b], ROW).mov(tmu0_s, ADDR[b])    # the MUL reads the old address

    pending = None
    for i, item in enumerate(order):
        if item != "x" and item[1] == 0:                 # broadcast x[k] (element k -> all)
            k = item[0]
            a.v8min(r5rep, r1, r1, rotate=(LANES - k) % LANES or None)
        if item == "x" and plan.halves_in:  # flag from the address x's gather asked for
            a.sub(r0, XADDR, XSTEP)
            a.min(r0, r0, XLIMIT)
            flag_half(a, r0, TWO, sig="ldtmu0")
        elif pending is not None:
            a.fadd(pending[0], pending[0], pending[1], sig="ldtmu0")
        else:
            a.nop(sig="ldtmu0")
        if item == "x" and plan.halves_in:
            gathered_half(a, "fmax", r1)
            a.sub(r2, r2, 1, sf=True)       # the k-block count (the pop's flags are spent)
            pending = None
        elif item == "x":
            a.mov(r1, r4)
            pending = None
        elif halves == 1:
            a.fmul(r0, r4, r5)
            pending = ACC[item[1]], r0
        else:
            low, high = ACC[2 * item[1]], ACC[2 * item[1] + 1]
            a.fmul(r0, r4.unpack(HALF_LOW), r5)
            a.fadd(low, low, r0).fmul(r3, r4.unpack(HALF_HIGH), r5)
            pending = high, r3
        request(i + GATHER_DEPTH)
    a.fadd(pending[0], pending[0], pending[1])


def group(a, plan):
    """One group of blocks: accumulators from the bias (or 0), k over all of Cin, the stores."""
    g = plan.group
    accumulators = g * plan.halves
    if plan.bias:
        for i in range(accumulators + GATHER_DEPTH):
            if i >= GATHER_DEPTH:
                a.nop(sig="ldtmu0")
                a.mov(ACC[i - GATHER_DEPTH], r4)
            if i < accumulators:
                a.add(tmu0_s, LANE_BYTES, uniform)
    else:
        for b in range(accumulators):
            a.ldi(ACC[b], 0)
    for b in range(g):
        a.add(ADDR[b], LANE_BYTES, uniform)
    a.min(tmu0_s, XBASE, XLIMIT)                # the first gathers of the order: x ...
    a.add(XADDR, XBASE, XSTEP)
    for p in range(1, GATHER_DEPTH):            # ... and w of the first blocks
        b = (p - 1) % g
        if p > 1 and g == 1:
            a.nop()                             # ADDR[0] was written by the last instruction
        a.add(ADDR[b], ADDR[b], ROW).mov(tmu0_s, ADDR[b])
    a.ldi(r2, plan.k_blocks)
    with a.scope():
        a.label("kblock")
        if not plan.halves_in:
            a.sub(r2, r2, 1, sf=True)
        k_block(a, plan)
        a.branch("kblock", cond="all_zc")
        a.nop()
        a.nop()
        a.nop()
    for _ in range(GATHER_DEPTH):               # the gathers asked past the last k-block
        a.nop(sig="ldtmu0")
    prepare_activation(a, plan.epilogue)        # (r5 held x[k] until now)
    for b in range(accumulators):
        a.read(vw_wait)
        a.mov(vw_setup, STAGE_W)
        activate(a, vpm, ACC[b], plan.epilogue.activation, r5)
        a.mov(vw_setup, uniform)
        a.mov(vw_addr, uniform)


@kernel
def gemv_kernel(a, plan):
    a.mov(STAGE_W, uniform)
    a.mov(r0, element_number)
    a.shl(LANE_BYTES, r0, 2)
    a.mov(r0, uniform)
    if plan.halves_in:
        a.shl(r1, element_number, 1)
        a.add(XBASE, r0, r1)
        a.ldi(TWO, 2)
    else:
        a.add(XBASE, r0, LANE_BYTES)
    a.mov(XLIMIT, uniform)
    a.ldi(ROW, plan.weight_shape[1] * plan.weight_bytes)
    a.ldi(XSTEP, LANES * plan.element_bytes)
    each_record(a, lambda: group(a, plan))
    a.read(vw_wait)
    chain.end(a)
