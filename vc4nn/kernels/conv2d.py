"""Direct convolution for small input depths (the MobileNet stem: 3x3, stride 2, Cin = 3):
im2col on the fly, lanes = 16 output pixels along a row (docs/kernels.md "Convolution").

A *group* is 16 neighbouring output pixels of one output row. For each group the QPU
1. works out, per kernel column kw, each lane's input column (clamped into the image) as a byte
   offset and a 0/1 mask for lanes whose column is padding;
2. gathers the window (every (kh, kw, ci) tap, up to 30 - KH at a time) with TMU lookups, one input
   element per lane, and multiplies each by its mask: padding contributes 0 (rows outside the
   image come from a zero row whose address the uniform stream gives);
3. for each output channel, runs the taps against the weights, which arrive as scalars in the
   uniform stream (the QPU points ``unif_addr`` at the prepared weights, in exactly the order
   it reads them, and back at its record afterwards): ``fadd r0, r0, product; fmul product,
   tap, uniform``, one instruction per multiply-add. With one pass and Cout a multiple of 8
   (the stem) the blocks run in a loop around one shared 8-channel body, so a group's code
   fits the QPUs' instruction cache (``rolled_blocks``); other plans are written out;
4. stages 16 channels x 16 pixels in the VPM (vertical writes: one column per channel, one row
   per pixel, which is NHWC) and stores them with one VDW. An fp16 result is packed into
   PACKED (two regfile-A registers kept free of taps) and written with 16-bit laned vertical
   writes: channel c lands in half c of the pixel's row, which a 16-bit VDW stores as halves.
   The staging *slots* (16 VPM rows each, four of them) are shared: QPU q uses slot q % 4,
   guarded by semaphore q % 4; only the semaphore instructions are written per slot (STAGING
   holds the slot's write setup).
"""

import dataclasses
import functools

from asm import vdw_setup, vdw_stride, element_number, kernel, null, r0, r1, r2, r3, r4, ra, rb, \
    tmu0_s, unif_addr, uniform, vpm, vpm_write_setup, vw_addr, vw_setup, vw_wait

from asm import isa
from . import chain, conv2d_channels

from . import dma
from .common import LANES, WORD, each_record
from .epilogue import activate
from .spatial import PlanError, SpatialShape, check_storage

# Regfile A: the taps gathered at once from ra0 up, the group's input row addresses (one per
# kernel row) at the top.
TAPS = [ra[i] for i in range(30)]
PACKED = (ra[30], ra[31])      # fp16 result: a channel converted to a half
MAX_KERNEL_H = 7
OUT = [rb[i] for i in range(LANES)]            # one register per output channel of a block
BODY_CHANNELS = LANES // 2                     # channels of the rolled loop's body
OFFSETS = [rb[i] for i in range(16, 21)]       # per kw: lane input column x pixel bytes
MASKS = [rb[i] for i in range(21, 26)]         # per kw: 1.0 where the column is in the image
SIX, WEIGHTS, RETURN, SLOT, OWNER, STAGING = (rb[i] for i in range(26, 32))
STORE_WORDS = (r1, r2, r3)      # the block's store setup, stride and address
SLOT_ROWS = 16                  # VPM rows of a staging slot: 16 pixels x 16 channels
DONE_SEMAPHORE = 4              # semaphores 0-3 guard the slots, 4-7 count finished users


@dataclasses.dataclass(frozen=True)
class Conv2dPlan(SpatialShape):
    in_h: int
    in_w: int
    cin: int
    cout: int
    kernel_h: int
    kernel_w: int
    stride_h: int
    stride_w: int
    pads: tuple
    activation: object = None
    num_qpus: int = 12
    in_storage: str = "fp32"
    out_storage: str = "fp32"
    taps_per_pass: int = 0      # taps gathered at once; 0: all that fit (30 - kernel_h)
    in_layout: str = "hwc"      # "chw": planes, as an NCHW model's input comes (no padding)
    lanes: str = "pixels"       # "channels": conv2d_channels.py (Cout 32, at most 27 taps)

    @property
    def taps(self):
        return [(kh, kw, ci) for kh in range(self.kernel_h) for kw in range(self.kernel_w)
                for ci in range(self.cin)]

    @property
    def rows(self):
        """Registers of the group's input row addresses."""
        return TAPS[len(TAPS) - self.kernel_h:]

    @property
    def pass_taps(self):
        return self.taps_per_pass or len(TAPS) - self.kernel_h

    @property
    def passes(self):
        """Tap ranges gathered at once."""
        taps, step = len(self.taps), self.pass_taps
        return [(t, min(t + step, taps)) for t in range(0, taps, step)]

    @property
    def rolled(self):
        """One pass and whole halves of 8 channels: the blocks run in a loop
        (``rolled_blocks``)."""
        return len(self.passes) == 1 and self.cout % BODY_CHANNELS == 0

    @property
    def blocks(self):
        """(first channel, channels) in the order the kernel runs them. Rolled, a block of 8
        (Cout = 16k + 8) runs first: the loop stores after every even count of halves left."""
        blocks = [(c, min(LANES, self.cout - c)) for c in range(0, self.cout, LANES)]
        if self.rolled and blocks[-1][1] == BODY_CHANNELS:
            blocks = blocks[-1:] + blocks[:-1]
        return blocks

    def channel_order(self, c0, n):
        """A block's channels in the order the kernel computes them: rolled, a full block's
        upper half first (the loop moves it to OUT[8..16) while computing the lower half)."""
        if self.rolled and n == LANES:
            return list(range(c0 + BODY_CHANNELS, c0 + LANES)) + list(range(c0, c0 + BODY_CHANNELS))
        return list(range(c0, c0 + n))

    @property
    def groups(self):
        return [(i, j) for i in range(self.out_h) for j in range(0, self.out_w, LANES)]

    @property
    def qpus(self):
        return min(self.num_qpus, len(self.groups))

    @property
    def slots(self):
        """Staging slots of 16 VPM rows: QPU q stages in slot q % slots."""
        return min(self.qpus, isa.VPM_ROWS // SLOT_ROWS)

    def slot_users(self, slot):
        return len(range(slot, self.qpus, self.slots))

    @property
    def pixel_bytes(self):
        """Bytes from one input column to the next."""
        return self.in_bytes * (self.cin if self.in_layout == "hwc" else 1)

    @property
    def channel_bytes(self):
        """Bytes from one input channel to the next."""
        return self.in_bytes * (1 if self.in_layout == "hwc" else self.in_h * self.in_w)

    def check(self):
        check_storage("in_storage", self.in_storage, ("fp32",))
        check_storage("in_layout", self.in_layout, ("hwc", "chw"))
        if self.in_layout == "chw" and any(self.pads):
            # A padding row reads the zero row, which cannot stand for every plane's row.
            raise PlanError(f"in_layout='chw' reads no padding (pads {tuple(self.pads)}): pad "
                            f"the planes in memory and give pads (0, 0, 0, 0)")
        check_storage("out_storage", self.out_storage)
        check_storage("lanes", self.lanes, ("pixels", "channels"))
        if self.lanes == "channels":
            conv2d_channels.check(self)
        if self.kernel_h > MAX_KERNEL_H or self.kernel_w > len(OFFSETS):
            raise PlanError(f"conv2d: a {self.kernel_h}x{self.kernel_w} kernel needs more row "
                            f"and column registers than the kernel has (at most "
                            f"{MAX_KERNEL_H}x{len(OFFSETS)})")
        if not 0 <= self.taps_per_pass <= len(TAPS) - self.kernel_h:
            raise PlanError(f"taps_per_pass={self.taps_per_pass}: 1..{len(TAPS) - self.kernel_h}"
                            f" (0: all that fit)")
        return self

    # -- the weights, in the order the kernel reads them ---------------------------------------
    def weight_stream(self, w, bias):
        """float32 words: per block, per pass, per output channel: (the bias on the first pass)
        then the pass's taps."""
        out = []
        taps = self.taps
        for c0, n in self.blocks:
            for t0, t1 in self.passes:
                for co in self.channel_order(c0, n):
                    if t0 == 0:
                        out.append(bias[co])
                    out.extend(w[kh, kw, ci, co] for kh, kw, ci in taps[t0:t1])
        return out

    # -- uniform streams -----------------------------------------------------------------------
    def streams(self, stream_addresses, x_addr, y_addr, weights_addr, zero_addr):
        """Per QPU: [weights address, 1 if it owns its staging slot, the slot, records..., 0]; a
        record: [1, row addresses (kh), first
        output column, return address, then per block: store setup, store stride, address].
        ``stream_addresses[q]`` is where QPU q's stream will live (the return addresses point
        into it)."""
        groups, qpus = self.groups, self.qpus
        bounds = [len(groups) * q // qpus for q in range(qpus + 1)]
        out = []
        for q in range(qpus):
            slot = q % self.slots
            words = [weights_addr, int(q < self.slots), slot]
            for i, j0 in groups[bounds[q]:bounds[q + 1]]:
                words.append(1)
                for kh in range(self.kernel_h):
                    r = i * self.stride_h + kh - self.pads[0]
                    words.append(x_addr + r * self.in_w * self.pixel_bytes
                                 if 0 <= r < self.in_h else zero_addr)
                words.append(j0)
                words.append(stream_addresses[q] + (len(words) + 1) * 4)
                units = min(LANES, self.out_w - j0)
                for c0, n in self.blocks:
                    words += [vdw_setup(units, n, SLOT_ROWS * slot,
                                        size=self.out_bits),
                              vdw_stride((self.cout - n) * self.out_bytes),
                              y_addr + ((i * self.out_w + j0) * self.cout + c0) * self.out_bytes]
            out.append(words + [0])
        return chain.with_tail(out)

    @property
    def zero_words(self):
        """Words of the zero row padding rows read (none without row padding)."""
        return self.in_w * self.cin + LANES if self.pads[0] or self.pads[1] else 0


def column_offsets(a, plan):
    """OFFSETS[kw], MASKS[kw] for the group whose first output column is the next uniform."""
    a.add(r1, element_number, uniform)
    a.ldi(r3, plan.stride_w)
    a.mul24(r1, r1, r3)                         # lane's output column x stride
    a.ldi(r3, plan.in_w - 1)
    for kw in range(plan.kernel_w):
        dma.add_constant(a, r2, r1, kw - plan.pads[2])
        a.min(r0, r2, r3)
        a.max(r0, r0, 0)                         # the column clamped into the image
        a.sub(null, r2, r0, sf=True)             # Z where the column was in the image
        a.ldi(MASKS[kw], 0.0)
        a.mov(MASKS[kw], 1.0, cond="zs")
        a.ldi(r2, plan.pixel_bytes)
        a.mul24(OFFSETS[kw], r0, r2)


def gather(a, plan, t0, t1, depth=4):
    """TAPS[0 .. t1-t0] = the group's window taps t0..t1, zero where they are padding. A tap's
    pop (ldtmu0) rides on the instruction that starts the address of the request after it.
    Planes (chw) are far apart: channels 1 and 2 are offset from r2 and r3, loaded first (free
    here; ``channel`` uses them after the gather), the others by an ldi into r0."""
    taps = plan.taps[t0:t1]
    channel_regs = {}
    if plan.channel_bytes > 15:
        channel_regs = {ci: reg for ci, reg in ((1, r2), (2, r3)) if ci < plan.cin}
        for ci, reg in channel_regs.items():
            a.ldi(reg, ci * plan.channel_bytes)

    def address(t, sig=None):
        kh, kw, _ = taps[t]
        a.add(r1, plan.rows[kh], OFFSETS[kw], sig=sig)

    def request(t):
        ci = taps[t][2]
        if ci in channel_regs:
            a.add(tmu0_s, r1, channel_regs[ci])
        else:
            dma.add_constant(a, tmu0_s, r1, ci * plan.channel_bytes, scratch=r0)

    for t in range(min(depth, len(taps))):
        address(t)
        request(t)
    for t, (kh, kw, ci) in enumerate(taps):
        if t + depth < len(taps):
            address(t + depth, sig="ldtmu0")
        else:
            a.nop(sig="ldtmu0")
        a.fmul(TAPS[t], r4, MASKS[kw])
        if t + depth < len(taps):
            request(t + depth)


def channel(a, plan, co, t0, t1, last_pass):
    """OUT[co] (+)= the taps t0..t1 times the weights from the uniform stream."""
    if t0 == 0:
        a.mov(r0, uniform)                       # the bias
    else:
        a.mov(r0, OUT[co])
    products = (r2, r3)
    a.fmul(r2, TAPS[0], uniform)
    for t in range(1, t1 - t0):
        a.fadd(r0, r0, products[(t - 1) % 2]).fmul(products[t % 2], TAPS[t], uniform)
    a.fadd(r0, r0, products[(t1 - t0 - 1) % 2])
    if last_pass:
        activate(a, OUT[co], r0, plan.activation, SIX, scratch=r1)
    else:
        a.mov(OUT[co], r0)


def group(a, plan):
    for kh in range(plan.kernel_h):
        a.mov(plan.rows[kh], uniform)
    column_offsets(a, plan)
    a.mov(RETURN, uniform)
    if plan.rolled:
        rolled_blocks(a, plan)
    else:
        unrolled_blocks(a, plan)


def unrolled_blocks(a, plan):
    """Each block's code written out: several passes (partial sums stay in OUT between them),
    or output depths that are not whole halves."""
    passes = plan.passes
    offset = 0
    for b, (c0, n) in enumerate(plan.blocks):
        pending_gather = b == 0 or len(passes) > 1     # one pass: the taps stay in registers
        dma.add_constant(a, unif_addr, WEIGHTS, offset * WORD, scratch=r0)
        for p, (t0, t1) in enumerate(passes):
            if pending_gather:
                gather(a, plan, t0, t1)
            elif p == 0:
                a.nop()
                a.nop()
            for co in range(n):
                channel(a, plan, co, t0, t1, p == len(passes) - 1)
        offset += n * (1 + len(plan.taps))
        next_block(a, plan)
        stage_and_store(a, plan, n)


def next_block(a, plan):
    """Point the uniforms back at the record (its block store words), stepping RETURN on to the
    next block's words, and read the store words."""
    a.mov(unif_addr, RETURN)
    a.ldi(r0, WORD * len(STORE_WORDS))
    a.add(RETURN, RETURN, r0)                    # (also the uniform address's 2-slot latency)
    for reg in STORE_WORDS:
        a.mov(reg, uniform)


def rolled_blocks(a, plan):
    """One pass: the taps are gathered once, then every block runs one shared 8-channel body
    (so the group's code fits the instruction cache, docs/kernels.md "Convolution (the
    stem)"): a full block twice, a block of 8 once. The body moves OUT[0..8) to OUT[8..16) (the
    block's upper half, computed first: ``channel_order``; on a block's first half it moves
    values nobody stores), then computes its 8 channels into OUT[0..8). The rows' registers
    are free once the taps are in: they hold ``halves``, the halves left (a block is done when
    an even count is left), and ``weight_at``, the next half's weights (with one pass the
    stream is every channel's bias and taps, in the order the kernel runs them), where the
    uniforms resume after a block's store."""
    halves, weight_at = plan.rows[0], plan.rows[1]
    gather(a, plan, 0, len(plan.taps))
    a.mov(weight_at, WEIGHTS)
    a.ldi(halves, plan.cout // BODY_CHANNELS)
    with a.scope("rolled"):
        a.label("block")
        a.mov(unif_addr, weight_at)              # (a block's second half reads on: no new line)
        a.label("half")
        a.ldi(r0, BODY_CHANNELS * (1 + len(plan.taps)) * WORD)
        a.add(weight_at, weight_at, r0)          # (also the uniform address's 2-slot latency)
        for co in range(BODY_CHANNELS):
            a.mov(OUT[BODY_CHANNELS + co], OUT[co])
        for co in range(BODY_CHANNELS):
            channel(a, plan, co, 0, len(plan.taps), True)
        a.sub(r1, halves, 1)
        a.mov(halves, r1)
        a.and_(null, r1, 1, sf=True)
        a.branch("half", cond="all_zc")          # odd: the block's lower half is next
        a.nop()
        a.nop()
        a.nop()
        next_block(a, plan)
        stage_and_store(a, plan, LANES)
        a.mov(null, halves, sf=True)
        a.branch("block", cond="all_zc")
        a.nop()
        a.nop()
        a.nop()


def on_slot(a, plan, body):
    """Run ``body(slot)`` for this QPU's staging slot (SLOT holds it): one copy per slot."""
    if plan.slots > 1:
        a.mov(r0, SLOT)
    for slot in range(plan.slots - 1):
        a.sub(null, r0, slot, sf=True)
        a.branch(f"slot{slot}", cond="all_zs")
        a.nop()
        a.nop()
        a.nop()
    for slot in reversed(range(plan.slots)):    # the last slot is where the tests fall through
        a.label(f"slot{slot}")
        body(slot)
        if slot:
            a.branch("slot_done")
            a.nop()
            a.nop()
            a.nop()
    a.label("slot_done")


def staging_setup(a, plan):
    """STAGING = the vw_setup word of this QPU's slot (SLOT): the setup's address is linear in
    the slot's first row, so it is the slot-0 word plus SLOT steps."""
    words = [stage_setup(plan, slot) for slot in range(plan.slots)]
    step = words[1] - words[0] if plan.slots > 1 else 0
    assert all(word == words[0] + slot * step for slot, word in enumerate(words))
    a.ldi(r0, words[0])
    a.ldi(r1, step)
    a.mul24(r1, SLOT, r1)
    a.add(STAGING, r0, r1)


def stage_setup(plan, slot):
    # 16-bit: laned, so lane (pixel) i writes half H of row i; ADDR steps {X, H}, so channel c
    # lands in half c of the pixel's row.
    return vpm_write_setup(y=SLOT_ROWS * slot, horizontal=False, size=plan.out_bits,
                           laned=plan.out_bits == 16)


def stage_and_store(a, plan, channels):
    """Write the block (OUT[0..channels)) into the slot's 16 VPM rows, one column per channel,
    and store it, holding the slot's semaphore. Only the semaphore instructions name the slot,
    so only they are written once per slot: the rest is shared (it sits in every group's loop,
    which must fit the instruction cache)."""
    with a.scope("take"):
        on_slot(a, plan, a.sema_acquire)
    a.mov(vw_setup, STAGING)
    if plan.out_bits == 32:
        for co in range(channels):
            a.mov(vpm, OUT[co])
    else:
        for co in range(channels):
            a.fmax(PACKED[co % 2], OUT[co], OUT[co], pack="16a")
            if co:
                a.mov(vpm, PACKED[(co - 1) % 2])
        a.nop()
        a.mov(vpm, PACKED[(channels - 1) % 2])
    setup, stride, address = STORE_WORDS
    a.mov(vw_setup, setup)
    a.mov(vw_setup, stride)
    a.mov(vw_addr, address)
    a.read(vw_wait)
    with a.scope("give"):
        on_slot(a, plan, a.sema_release)


def open_slot(a, plan, slot):
    """The slot's owner (its first QPU) makes the slot free: semaphore 0 -> 1."""
    a.sema_release(slot)


def close_slot(a, plan, slot):
    """The owner waits until the slot's other users are done, then takes the slot's token back
    (every semaphore ends the launch at 0, as it started)."""
    for _ in range(plan.slot_users(slot) - 1):
        a.sema_acquire(DONE_SEMAPHORE + slot)
    a.sema_acquire(slot)


def leave_slot(a, plan, slot):
    a.sema_release(DONE_SEMAPHORE + slot)


@kernel
def conv2d_kernel(a, plan):
    a.mov(WEIGHTS, uniform)
    a.mov(OWNER, uniform)
    a.mov(SLOT, uniform)
    if plan.activation == "relu6":
        a.ldi(SIX, 6.0)
    staging_setup(a, plan)
    with a.scope("open"):
        owner_or_not(a, plan, open_slot, None)
    each_record(a, lambda: group(a, plan))
    with a.scope("close"):
        owner_or_not(a, plan, close_slot, leave_slot)
    chain.end(a)


def owner_or_not(a, plan, owner, other):
    """``owner(a, plan, slot)`` on a slot's first QPU, ``other(...)`` on the rest."""
    a.mov(null, OWNER, sf=True)
    a.branch("other", cond="all_zs")
    a.nop()
    a.nop()
    a.nop()
    with a.scope("owner"):
        on_slot(a, plan, lambda slot: owner(a, plan, slot))
    a.branch("end")
    a.nop()
    a.nop()
    a.nop()
    a.label("other")
    if other is not None:
        with a.scope("other"):
            on_slot(a, plan, lambda slot: other(a, plan, slot))
    a.label("end")


LANE_CHOICES = ("auto", "pixels", "channels")


def with_lanes(plan, lanes="auto"):
    """``plan`` with ``lanes`` ("auto": channels where conv2d_channels fits, else pixels)."""
    if lanes == "auto":
        lanes = "channels" if conv2d_channels.fits(plan) is None else "pixels"
    return dataclasses.replace(plan, lanes=lanes)


@functools.lru_cache(maxsize=32)
def program_for(plan):
    plan.check()
    if plan.lanes == "channels":
        return conv2d_channels.conv2d_channels_kernel.assemble(plan)
    return conv2d_kernel.assemble(plan)
