"""Global average pooling on the QPUs: (H, W, C) -> (C,), the mean over the pixels.

A QPU owns blocks of 16 channels (taken round-robin; lanes past C repeat channel C - 1, so no
gather leaves the tensor) and streams the block's pixels through the TMU, one gather per pixel
(C*4 bytes apart), GATHER_DEPTH requests in flight, summing in r2. The pixel loop is unrolled
UNROLL times and its count and remainder are constants of the program (it is generated for the
layer's shape). The sum is scaled by 1/(H*W) and stored through the QPU's VPM staging row by one
DMA of up to 16 channels. Memory-bound: each element crosses the bus once (64-byte lines are
shared by the 16 lanes of a gather when C >= 16).

fp16 storage (input and result separately; the sum is float32): a lane's gather of a half
reads the word holding it and keeps the half that its address's bit 1 names
(vc4nn/kernels/halves.py); that bit is the same for every pixel when C is even and alternates
when C is odd, so the generator (which knows each pop's pixel) flags from the lane's address
at pixel 0 or 1. The pop's free ADD slot then holds that flag op, so the loop counter takes an
instruction of its own. A half result is packed by the scaling multiply and stored by a 16-bit
VPM write and a 16-bit DMA.

Uniform stream of one QPU: [VPM write setup of its staging row, 1/(H*W)], then per block
[1, address of channel c0 at pixel 0, channels valid - 1, y address of c0, VDW setup], then 0.
"""

import dataclasses
import functools

from asm import kernel, r1, r2, r3, r4, ra, rb, tmu0_s, uniform, vdw_setup, vpm, \
    vpm_write_setup, vw_addr, vw_setup, vw_wait

from . import dma
from . import chain
from .common import GATHER_DEPTH, LANES, each_record, lane_addresses, ops_then_branch
from .halves import HALF_LOW, flag_half, gathered_half
from .spatial import STORAGE_BITS, check_storage

UNROLL = 4
STEP, SCALE, STAGE_W, ONE = rb[0], rb[1], rb[2], rb[3]   # ONE: a counter step that rides
# with the pop's signal (a small immediate would take the signal field)
Y_ADDR, VDW = ra[0], ra[1]
PIXEL_ADDRESS = (ra[2], ra[3])  # fp16: the lanes' addresses at pixel 0 and 1 (bit 1 picks)
PACKED, TWO = ra[4], rb[4]


def ceil_div(a, b):
    return -(-a // b)


@dataclasses.dataclass(frozen=True)
class GlobalPoolPlan:
    pixels: int
    channels: int
    num_qpus: int
    in_storage: str = "fp32"    # "fp32" or "fp16"
    out_storage: str = "fp32"

    def __post_init__(self):
        check_storage("global_avg_pool: in_storage", self.in_storage)
        check_storage("global_avg_pool: out_storage", self.out_storage)

    @property
    def in_bytes(self):
        return STORAGE_BITS[self.in_storage] // 8

    @property
    def out_bits(self):
        return STORAGE_BITS[self.out_storage]

    @property
    def halves_in(self):
        return self.in_storage == "fp16"

    @property
    def blocks(self):
        return ceil_div(self.channels, LANES)

    @property
    def qpus(self):
        return min(self.num_qpus, self.blocks)

    @property
    def ahead(self):
        return min(GATHER_DEPTH, self.pixels)

    def uniform_streams(self, x, y):
        streams = []
        for q in range(self.qpus):
            bits = self.out_bits
            words = [vpm_write_setup(q, size=bits, stride=dma.row_stride(bits)),
                     1.0 / self.pixels]
            for block in range(q, self.blocks, self.qpus):
                c0 = block * LANES
                valid = min(LANES, self.channels - c0)
                words += [1, x + c0 * self.in_bytes, valid - 1, y + c0 * bits // 8,
                          vdw_setup(1, valid, q, size=bits)]
            streams.append(words + [0])
        return chain.with_tail(streams)


@functools.lru_cache(maxsize=64)
def program_for(plan):
    return global_pool_kernel.assemble(plan)


def pixel_ops(a, first=None):
    """One pixel: pop its gather, add it, ask for the gather GATHER_DEPTH pixels ahead (r1 is
    its address; the MUL reads r1 before the ADD steps it). ``first``: an op for the free ADD
    slot of the pop (the loop counter)."""
    return [lambda: (first or a.nop)(sig="ldtmu0"),
            lambda: a.fadd(r2, r2, r4).mov(tmu0_s, r1),
            lambda: a.add(r1, r1, STEP)]


def drain_ops(a):
    return [lambda: a.nop(sig="ldtmu0"), lambda: a.fadd(r2, r2, r4)]


def half_pixel_ops(a, pixel, ask=True):
    """pixel_ops for fp16 input: the pop flags the lanes' halves (from the address at a pixel
    of the same parity), two conditional adds; ``ask``: also ask for the gather ahead."""
    ops = [lambda: flag_half(a, PIXEL_ADDRESS[pixel % 2], TWO, sig="ldtmu0"),
           lambda: gathered_half(a, "fadd", r2, r2)]
    if ask:
        ops.append(lambda: a.add(r1, r1, STEP).mov(tmu0_s, r1))
    return ops


def block(a, plan):
    lane_addresses(a, r1, plan.in_bytes, r3)
    a.mov(Y_ADDR, uniform)
    a.mov(VDW, uniform)
    a.ldi(r2, 0.0)
    if plan.halves_in:
        a.mov(PIXEL_ADDRESS[0], r1)
        a.add(PIXEL_ADDRESS[1], r1, STEP)
    for _ in range(plan.ahead):
        a.add(r1, r1, STEP).mov(tmu0_s, r1)
    loops, rest = divmod(plan.pixels - plan.ahead, UNROLL)
    if loops:
        a.ldi(r3, loops)
        with a.scope():
            a.label("pixels")
            ops = []
            if plan.halves_in:      # the pops' flags would clobber the counter's: count last
                for u in range(UNROLL):
                    ops += half_pixel_ops(a, u)
                for op in ops:
                    op()
                a.sub(r3, r3, ONE, sf=True)
                ops = []
            else:
                for u in range(UNROLL):
                    count = (lambda sig: a.sub(r3, r3, ONE, sf=True, sig=sig)) if u == 0 \
                        else None
                    ops += pixel_ops(a, count)
            ops_then_branch(a, ops, "pixels", cond="all_zc")
    for p in range(loops * UNROLL, plan.pixels):
        asks = p < plan.pixels - plan.ahead
        ops = half_pixel_ops(a, p, asks) if plan.halves_in else \
            pixel_ops(a) if asks else drain_ops(a)
        for op in ops:
            op()
    if plan.out_storage == "fp16":
        a.fmul(PACKED, r2, SCALE, pack=HALF_LOW)
        a.read(vw_wait)             # my previous block's store has left the staging row
        a.mov(vw_setup, STAGE_W)
        a.mov(vpm, PACKED)
    else:
        a.fmul(r2, r2, SCALE)
        a.read(vw_wait)
        a.mov(vw_setup, STAGE_W)
        a.mov(vpm, r2)
    a.mov(vw_setup, VDW)
    a.mov(vw_addr, Y_ADDR)


@kernel
def global_pool_kernel(a, plan):
    a.mov(STAGE_W, uniform)
    a.mov(SCALE, uniform)
    a.ldi(STEP, plan.channels * plan.in_bytes)
    a.ldi(ONE, 1)
    a.ldi(TWO, 2)
    each_record(a, lambda: block(a, plan))
    a.read(vw_wait)
    chain.end(a)
