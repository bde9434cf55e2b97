"""The multiply-adds of the sliding-window kernel (vc4nn/kernels/window.py): which accumulator,
weight and bias registers a tap uses (window_registers.py), the order of a chunk's taps, and
the pipeline that issues the add of one product with the multiply of the next.

fp16 input: the vector read lands in ra31 and its unpack makes it float32 in r1 (docs/kernels.md
"fp16 storage in the window kernels"). Split accumulators (docs/kernels.md "Split
accumulators"): the newest row's accumulators and the bias on regfile B, the top row's weights
on regfile A, so a column's taps form two blocks that must not follow each other directly (one
read port per regfile).
"""

from asm import r0, r1, r2, r3, vpm
from asm.builder import reads_fit

from .halves import HALF_HIGH, HALF_LOW
from .window_registers import ACC, BIAS, HALF_INPUT, SPLIT_ACC_A, SPLIT_ACC_B, SPLIT_BIAS, \
    SPLIT_TOP_WEIGHTS, SPLIT_WEIGHTS_B, WEIGHTS

HALF = HALF_LOW                # a 16-bit VPM read zero-extends into bits 15:0

class MacPipe:
    """Emits multiply-adds so that the add of one issues with the multiply of the next.

    ``pending`` is an ADD-ALU op waiting for an instruction to ride in; ``last_write`` the
    regfile register the previous instruction wrote (read right after, it would be a hazard).
    """

    def __init__(self, a, halves=False):
        self.a = a
        self.halves = halves
        self.fresh = None           # fp16: the half of ra31 (the vector read) not yet in r1
        self.pending = None
        self.last_write = None
        self.product = r2
        self.ahead = None           # fp16: "asked" / "read", the next vector's early read

    def _emit(self, mul=None):
        """One instruction: the pending add (if any) and ``mul`` (method name, dst, srcs); two
        if they read two registers of one regfile (split accumulators: where a row of taps on
        one file follows one on the other)."""
        a, pending = self.a, self.pending
        if pending and mul and not reads_fit(pending[2:] + mul[2:]):
            self._emit()
            pending = None
        if pending and pending[2] is self.last_write:
            a.nop()
        self.last_write = None
        handle = None
        if pending:
            op, dst, *srcs = pending
            handle = getattr(a, op)(dst, *srcs)
            self.last_write = dst if dst.name.startswith(("ra", "rb")) else None
        if mul and handle is None and self.ahead == "asked" and reads_fit([vpm, *mul[2:]]):
            handle = a.mov(HALF_INPUT, vpm)
            self.last_write, self.ahead = HALF_INPUT, "read"
        if mul:
            op, dst, *srcs = mul
            getattr(handle if handle is not None else a, op)(dst, *srcs)
        self.pending = None

    def flush(self):
        if self.pending:
            self._emit()
        self.fresh = None           # no tap used the vector: r1 is not needed

    def settle(self):
        """Flush, and keep the next instruction from reading what the last one wrote."""
        self.flush()
        if self.last_write is not None:
            self.a.nop()
        self.last_write = None

    def read_input(self, vector=r1):
        """``vector`` = the next vector of the VPM read queue (fp16: r1, through ra31 and its
        unpack; the pending add fills the slot before ra31 is readable, but cannot share an
        instruction with the move: both write regfile A)."""
        if not self.halves:
            self._emit(("mov", vector, vpm))
            return
        a, held = self.a, HALF_INPUT
        if self.ahead != "read":
            a.mov(held, vpm)
        self.ahead = None
        self.last_write = None
        if self.pending:
            self._emit()
        else:
            a.nop()
        self.last_write = None
        self.fresh = held.unpack(HALF)

    def read_ahead(self):
        """fp16: read the next vector into ra31 in the first instruction from here whose ADD
        ALU is free (split accumulators: the multiply of a top-row weight on regfile A that the
        pending add, reading regfile A too, had to leave alone), instead of an instruction of
        its own; ``read_input`` then only waits until ra31 is readable. The vector in r1 is
        still the one the taps use (only the next ``read_input`` makes the new one fresh)."""
        self.ahead = "asked"

    def odd_channels(self):
        """Channel pairs: r1 = the odd channels of the vector read (16b), from the next tap on
        (the pending add goes alone: the conversion needs the ADD ALU)."""
        if self.pending:
            self._emit()
        self.fresh = HALF_INPUT.unpack(HALF_HIGH)

    def _convert(self, mul=None):
        """r1 = the fresh vector as float32 (ADD ALU), with ``mul`` reading it unpacked from
        ra31 in the same instruction (the MUL ALU: no add is pending, so regfile A is free)."""
        half, self.fresh = self.fresh, None
        handle = self.a.fmax(r1, half, half)
        if mul:
            op, dst, src, weight = mul
            getattr(handle, op)(dst, half if src is r1 else src, weight)

    def multiply_add(self, acc, weight, first, start, vector=r1):
        """acc = (start if first else acc) + vector * weight; ``start`` None: the product alone
        (a copy: ``or``, reading no regfile). fp16 input: the vector is r1."""
        product = self.product
        self.product = r3 if product is r2 else r2
        if self.fresh and not reads_fit([HALF_INPUT, weight]):
            self._convert()             # (the unpack reads ra31: not beside a weight on A)
        if self.fresh:
            self._convert(("fmul", product, r1, weight))
        else:
            self._emit(("fmul", product, vector, weight))
        if first and start is None:
            self.pending = ("mov", acc, product)
        else:
            self.pending = ("fadd", acc, start if first else acc, product)

    def add(self, acc, first):
        """acc = r1 if first else acc + r1."""
        if self.fresh:
            self._convert()
        self.flush()
        self.pending = ("fadd", acc, r1, 0) if first else ("fadd", acc, acc, r1)


def multiply_chunk(pipe, plan, variant, r, cols, shifts):
    """Read the chunk's input vectors (columns ``cols`` of body row ``r``) and multiply each
    into every output it touches. Split accumulators with float32 input: a column's taps on
    regfile B's weights and its top-row taps (on regfile A's) are two blocks, and the next
    column's vector is read between them (into the other of r1 and r0); the blocks alternate
    their order column by column (B, read, A; A, read, B; ...), so a block follows one on the
    same regfile or a read, never a clash (``reads_fit``)."""
    if plan.split_accumulators == 1 and plan.in_storage == "fp16":
        for i, col in enumerate(cols):
            pipe.read_input()
            taps = pixel_taps(plan, variant, r, col, 0, shifts)
            multiply_taps(pipe, plan, [tap for tap in taps if tap[1]])
            if i + 1 < len(cols):
                pipe.read_ahead()
            multiply_taps(pipe, plan, [tap for tap in taps if not tap[1]])
        return
    if plan.split_accumulators != 1:
        for col in cols:
            pipe.read_input()
            for odd in range(plan.lane_channels):
                if odd:
                    pipe.odd_channels()
                multiply_taps(pipe, plan, pixel_taps(plan, variant, r, col, odd, shifts),
                              odd=odd)
        return
    vectors = (r1, r0)
    pipe.read_input(vectors[0])
    for i, col in enumerate(cols):
        taps = pixel_taps(plan, variant, r, col, 0, shifts)
        blocks = [[tap for tap in taps if tap[1]], [tap for tap in taps if not tap[1]]]
        first, second = blocks[::-1] if i % 2 else blocks
        multiply_taps(pipe, plan, first, vectors[i % 2])
        if i + 1 < len(cols):
            pipe.read_input(vectors[(i + 1) % 2])
        multiply_taps(pipe, plan, second, vectors[i % 2])


def pixel_taps(plan, variant, r, col, odd, shifts):
    """(accumulator, kh, kw, first) of every output input column ``col`` of body row ``r``
    touches; ``first``: the output's first tap (its top row's first column in the image)."""
    out = []
    for kh, out_row in tap_order(plan, r):
        acc_set = plan.acc_set(out_row, shifts)
        for kw in range(plan.kernel_w):
            j, rest = divmod(col - kw, plan.stride_w)
            if rest or not 0 <= j < variant.cols:
                continue
            out.append((accumulator(plan, variant, odd, acc_set, j), kh, kw,
                        kh == 0 and col == max(j * plan.stride_w, variant.lo)))
    return out


def multiply_taps(pipe, plan, taps, vector=r1, odd=0):
    """The multiply-adds (avg_pool: adds) of ``taps`` (``pixel_taps``) with ``vector``."""
    for acc, kh, kw, first in taps:
        if plan.op == "avg_pool":
            pipe.add(acc, first)
        else:       # (the odd channels' bias comes at the store)
            pipe.multiply_add(acc, weight(plan, kh, kw, odd), first, None if odd else bias(plan),
                              vector)


def accumulator(plan, variant, odd, acc_set, j):
    """The register of column ``j`` of accumulator set ``acc_set`` (channel pairs: of the odd
    channels if ``odd``, whose sets follow the even channels'; split accumulators: the newest
    set on regfile B)."""
    if plan.split_accumulators == 1:
        return SPLIT_ACC_B[j] if acc_set == plan.acc_sets - 1 else \
            SPLIT_ACC_A[acc_set * variant.cols + j]
    return ACC[(odd * plan.acc_sets + acc_set) * variant.cols + j]


def weight(plan, kh, kw, odd=0):
    """The register of tap (kh, kw)'s weight (split accumulators: the top row's on regfile A,
    beside the newest set they feed)."""
    if plan.split_accumulators == 1:
        return SPLIT_TOP_WEIGHTS[kw] if kh == 0 else \
            SPLIT_WEIGHTS_B[(kh - 1) * plan.kernel_w + kw]
    return WEIGHTS[odd * plan.kernel_h * plan.kernel_w + kh * plan.kernel_w + kw]


def bias(plan):
    return SPLIT_BIAS if plan.split_accumulators == 1 else BIAS


def tap_order(plan, row):
    """``plan.taps(row)``; split accumulators: the top row's taps (weights on regfile A) last,
    so that an fp16 vector's unpack (from ra31) first rides with a weight on regfile B."""
    taps = plan.taps(row)
    return taps[1:] + taps[:1] if plan.split_accumulators == 1 else taps
