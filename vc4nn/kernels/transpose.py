"""Transpose on the QPUs: W (K x rows) = X^T for a row-major X (rows x K), float32.

The SGEMM routes use it to put an operand into the layout the panel kernel reads fast
(vc4nn/linalg.py, docs/sgemm.md "Which kernel runs"); the general SGEMM kernel runs the same
blocks as the first phase of its NT case.

A block is 16 rows x 16 k of X: 16 TMU gathers of 16 consecutive k of one row (lanes = k, one
64-byte line when aligned) into ra0..ra15; then, holding the mutex, the 16 registers are written
into VPM rows 0-15 *vertically* (register r becomes VPM column r, so VPM row l holds k0 + l of
every row: the transpose) and the VDW stores those rows as rows of W. The mutex serializes the
VPM staging; the gathers of the other QPUs run meanwhile.
"""

import dataclasses
import functools

from asm import kernel, r1, r3, r4, ra, tmu0_s, uniform, vdw_setup, vdw_stride, vpm, \
    vpm_write_setup, vw_addr, vw_setup, vw_wait

from ..errors import DeviceError
from .common import GATHER_DEPTH, LANES, MAX_VDW_STRIDE, WORD, each_record, lane_addresses

ROWS = [ra[i] for i in range(LANES)]          # the 16 gathered rows of a block


def check_rows(rows, what):
    """W's rows are ``rows`` floats long: the VDW stride between them must fit its field."""
    if (rows - 1) * WORD > MAX_VDW_STRIDE:
        raise DeviceError(f"{what} has {rows} columns, more than one VDW stride reaches "
                          f"({MAX_VDW_STRIDE // WORD + 1})")


def blocks(rows, k):
    """(first row, first k) of every block of X."""
    return [(x0, k0) for x0 in range(0, rows, LANES) for k0 in range(0, k, LANES)]


def records(rows, k, src, dst, some_blocks):
    """The uniform records of ``some_blocks`` of X at ``src`` into W at ``dst`` (bus
    addresses), then the 0 that ends them. A record: [1, address of the block, k valid - 1,
    16 row offsets, VDW setup, VDW stride, address in W]. Rows past X repeat its last row
    (offsets clamped here), so no gather leaves X; the store writes only the valid part."""
    out = []
    for x0, k0 in some_blocks:
        xs, ks = min(LANES, rows - x0), min(LANES, k - k0)
        offsets = [min(r, xs - 1) * k * WORD for r in range(LANES)]
        out += [1, src + (x0 * k + k0) * WORD, ks - 1, *offsets,
                vdw_setup(units=ks, depth=xs, y=0), vdw_stride((rows - xs) * WORD),
                dst + (k0 * rows + x0) * WORD]
    return out + [0]


def block(a):
    """One record: gather the block (GATHER_DEPTH requests in flight), stage it, store it."""
    lane_addresses(a, r1, WORD, r3)
    for _ in range(GATHER_DEPTH):
        a.add(tmu0_s, r1, uniform)
    for r, reg in enumerate(ROWS):
        a.nop(sig="ldtmu0")
        if r + GATHER_DEPTH < LANES:
            a.add(tmu0_s, r1, uniform).mov(reg, r4)
        else:
            a.mov(reg, r4)
    a.mutex_acquire()
    a.ldi(vw_setup, vpm_write_setup(y=0, horizontal=False))
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

    @property
    def qpus(self):
        """QPUs that get blocks (the rest would only exit)."""
        return min(self.num_qpus, len(blocks(self.rows, self.k)))

    def uniform_streams(self, src, dst):
        every = blocks(self.rows, self.k)
        return [records(self.rows, self.k, src, dst, every[q::self.qpus]) for q in range(self.qpus)]


@functools.lru_cache(maxsize=8)
def program_for(plan):
    check_rows(plan.rows, "the transposed matrix")
    return transpose_kernel.assemble()


@kernel
def transpose_kernel(a):
    """Every QPU transposes the blocks its uniform stream lists."""
    each_record(a, lambda: block(a))
    a.exit()
