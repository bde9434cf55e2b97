"""Transpose on the QPUs: W (K x rows) = X^T for a row-major X (rows x K), float32 or halves.

The SGEMM routes use it to put an operand into the layout the panel kernel reads fast
(vc4nn/linalg.py, docs/sgemm.md "Which kernel runs"); the general SGEMM kernel runs the same
blocks as the first phase of its NT case.

A block is 16 rows x 16 k of X: 16 TMU gathers of 16 consecutive k of one row (lanes = k, one
64-byte line when aligned) into ra0..ra15; then, holding the mutex, the 16 registers are written
into VPM rows 0-15 *vertically* (register r becomes VPM column r, so VPM row l holds k0 + l of
every row: the transpose) and the VDW stores those rows as rows of W. The mutex serializes the
VPM staging; the gathers of the other QPUs run meanwhile.

Halves (``TransposePlan.storage`` "fp16", in and out; the pointwise layer's fp16 activations):
the bits are moved, not converted. A lane's gather returns the word holding its half; a shift
by 16 x bit 1 of its address puts the half in bits 15:0 (bit 1 alternates along the lanes, and
the record gives each row's phase: ``SHIFTS`` xor it), and 16-bit *laned* vertical writes put
lane l of register r into half r of VPM row l, which a 16-bit VDW stores.
"""

import dataclasses
import functools

from asm import element_number, kernel, r0, r1, r3, r4, ra, rb, tmu0_s, uniform, vdw_setup, \
    vdw_stride, vpm, vpm_write_setup, vw_addr, vw_setup, vw_wait

from ..errors import DeviceError
from . import chain
from .common import GATHER_DEPTH, LANES, MAX_VDW_STRIDE, WORD, each_record, lane_addresses
from .spatial import STORAGE_BITS, check_storage

ROWS = [ra[i] for i in range(LANES)]          # the 16 gathered rows of a block
SHIFTS = rb[0]                                # halves: 16 in odd lanes, 0 in even ones
HALF_BITS = 16


def check_rows(rows, what, size=WORD):
    """W's rows are ``rows`` elements of ``size`` bytes: the VDW stride between them must fit
    its field."""
    if (rows - 1) * size > MAX_VDW_STRIDE:
        raise DeviceError(f"{what} has {rows} columns, more than one VDW stride reaches "
                          f"({MAX_VDW_STRIDE // size + 1})")


def blocks(rows, k):
    """(first row, first k) of every block of X."""
    return [(x0, k0) for x0 in range(0, rows, LANES) for k0 in range(0, k, LANES)]


def records(rows, k, src, dst, some_blocks, size=WORD):
    """The uniform records of ``some_blocks`` of X at ``src`` into W at ``dst`` (bus
    addresses; ``size`` bytes per element), then the 0 that ends them. A record: [1, address
    of the block, k valid - 1, 16 row offsets, VDW setup, VDW stride, address in W]; halves:
    each row's phase (16 x bit 1 of its first element's address) follows the offset of the row
    GATHER_DEPTH on, in the order the kernel reads them. Rows past X repeat its last row
    (offsets clamped here), so no gather leaves X; the store writes only the valid part."""
    out = []
    for x0, k0 in some_blocks:
        xs, ks = min(LANES, rows - x0), min(LANES, k - k0)
        first = src + (x0 * k + k0) * size
        offsets = [min(r, xs - 1) * k * size for r in range(LANES)]
        if size == WORD:
            row_words = offsets
        else:
            phases = [(first + offset) & 2 and HALF_BITS for offset in offsets]
            row_words = offsets[:GATHER_DEPTH] + [word for r in range(LANES) for word in
                                                  [phases[r]] + offsets[r + GATHER_DEPTH:][:1]]
        out += [1, first, ks - 1, *row_words,
                vdw_setup(units=ks, depth=xs, y=0, size=size * 8),
                vdw_stride((rows - xs) * size), dst + (k0 * rows + x0) * size]
    return out + [0]


def block(a, size=WORD):
    """One record: gather the block (GATHER_DEPTH requests in flight), stage it, store it."""
    lane_addresses(a, r1, size, r3)
    for _ in range(GATHER_DEPTH):
        a.add(tmu0_s, r1, uniform)
    for r, reg in enumerate(ROWS):
        ask = r + GATHER_DEPTH < LANES
        if size != WORD:            # the half to bits 15:0
            a.xor(r0, SHIFTS, uniform, sig="ldtmu0")
            if ask:
                a.add(tmu0_s, r1, uniform)
            a.shr(reg, r4, r0)
        else:
            a.nop(sig="ldtmu0")
            if ask:
                a.add(tmu0_s, r1, uniform).mov(reg, r4)
            else:
                a.mov(reg, r4)
    a.mutex_acquire()
    halves = size != WORD
    a.ldi(vw_setup, vpm_write_setup(y=0, horizontal=False, size=size * 8, laned=halves))
    for reg in ROWS:
        a.mov(vpm, reg)
    a.mov(vw_setup, uniform)
    a.mov(vw_setup, uniform)
    a.mov(vw_addr, uniform)
    a.read(vw_wait)
    a.mutex_release()


@dataclasses.dataclass(frozen=True)
class TransposePlan:
    rows: int
    k: int
    num_qpus: int
    storage: str = "fp32"       # of X and W

    def __post_init__(self):
        check_storage("transpose: storage", self.storage)

    @property
    def element_bytes(self):
        return STORAGE_BITS[self.storage] // 8

    @property
    def qpus(self):
        """QPUs that get blocks (the rest would only exit)."""
        return min(self.num_qpus, len(blocks(self.rows, self.k)))

    def uniform_streams(self, src, dst):
        every = blocks(self.rows, self.k)
        return chain.with_tail(records(self.rows, self.k, src, dst, every[q::self.qpus],
                                       self.element_bytes) for q in range(self.qpus))


@functools.lru_cache(maxsize=8)
def program_for(plan):
    check_rows(plan.rows, "the transposed matrix", plan.element_bytes)
    return transpose_kernel.assemble(plan.element_bytes)


@kernel
def transpose_kernel(a, size=WORD):
    """Every QPU transposes the blocks its uniform stream lists (``size`` bytes per element)."""
    if size != WORD:
        a.and_(r0, element_number, 1)
        a.shl(SHIFTS, r0, 4)
    each_record(a, lambda: block(a, size))
    chain.end(a)
