"""Elementwise add on the QPUs: ``y = act(a + b)`` over any number of float32 elements.

A *block* is up to BLOCK_VECTORS vectors (64 elements) of the flattened tensors. For each block
a QPU gathers its vectors of a and b through the TMU (every vector is one 64-byte line when the
tensors are aligned; GATHER_DEPTH requests in flight), adds them, applies the activation on the
VPM write (vc4nn/kernels/epilogue.py) into its own BLOCK_VECTORS staging rows, and stores the
block with one DMA of contiguous rows. The QPUs take blocks round-robin and never meet. The last
block may be shorter: its code is generated for its exact length (lanes past the end repeat the
last element, so no gather leaves the tensors, and the partial vector is stored by a second DMA
of fewer columns). Memory-bound: 12 bytes move per add.

Uniform stream of one QPU: [VPM write setup of its staging rows], then per block
[1, a address, b address, y address, VDW setup], then 0; then the tail flag (1: this QPU stores
the short last block) and, if 1, [a address, b address, y address, VDW setups of its full
vectors and of its partial vector].
"""

import dataclasses
import functools
import typing

from asm import element_number, kernel, null, r0, r1, r3, r4, r5, ra, rb, tmu0_s, uniform, \
    vdw_setup, vdw_stride, vpm, vpm_write_setup, vw_addr, vw_setup, vw_wait

from ..errors import DeviceError
from .common import GATHER_DEPTH, LANES, STORAGE_BYTES, each_record
from .epilogue import Epilogue, activate, prepare_activation

BLOCK_VECTORS = 4               # 12 QPUs x 4 staging rows = 48 of the 64 reachable VPM rows
A_BASE, B_BASE, Y_ADDR = ra[0], ra[1], ra[2]
OFFSETS = [rb[i] for i in range(BLOCK_VECTORS)]     # per-lane byte offsets of a block's vectors
STAGE_W = rb[BLOCK_VECTORS]


def ceil_div(a, b):
    return -(-a // b)


@dataclasses.dataclass(frozen=True)
class AddPlan:
    size: int                   # elements
    num_qpus: int
    activation: typing.Optional[str] = None
    storage: str = "f32"

    def __post_init__(self):
        if STORAGE_BYTES.get(self.storage) != 4:
            raise DeviceError(f"add: {self.storage!r} storage is not implemented (f32 only)")

    @property
    def epilogue(self):
        return Epilogue(activation=self.activation)

    @property
    def element_bytes(self):
        return STORAGE_BYTES[self.storage]

    @property
    def block_elements(self):
        return BLOCK_VECTORS * LANES

    @property
    def full_blocks(self):
        return self.size // self.block_elements

    @property
    def tail(self):
        """Elements of the short last block (0: none)."""
        return self.size % self.block_elements

    @property
    def qpus(self):
        return max(1, min(self.num_qpus, self.full_blocks + (1 if self.tail else 0)))

    def uniform_streams(self, a, b, y):
        step = self.block_elements * self.element_bytes
        streams = []
        for q in range(self.qpus):
            words = [vpm_write_setup(staging_y(q))]
            for block in range(q, self.full_blocks, self.qpus):
                offset = block * step
                words += [1, a + offset, b + offset, y + offset,
                          vdw_setup(BLOCK_VECTORS, LANES, staging_y(q))]
            words.append(0)
            tail_qpu = self.full_blocks % self.qpus
            if self.tail and q == tail_qpu:
                offset = self.full_blocks * step
                full, part = divmod(self.tail, LANES)
                words += [1, a + offset, b + offset, y + offset]
                words += [vdw_setup(full, LANES, staging_y(q))] if full else []
                words += [vdw_setup(1, part, staging_y(q) + full)] if part else []
            elif self.tail:
                words.append(0)
            streams.append(words)
        return streams


def staging_y(q):
    return q * BLOCK_VECTORS


@functools.lru_cache(maxsize=64)
def program_for(plan):
    return add_kernel.assemble(plan)


def block(a, plan, valid):
    """One block of ``valid`` elements: gather, add, stage, store. Reads the block's a, b and
    y addresses and its VDW setups (one per store) from the uniform stream."""
    vectors = ceil_div(valid, LANES)
    full, part = divmod(valid, LANES)
    a.mov(A_BASE, uniform)
    a.mov(B_BASE, uniform)
    a.mov(Y_ADDR, uniform)
    for v in range(vectors):        # byte offsets of each lane, clamped to the block
        a.ldi(r1, v * LANES)
        a.add(r0, element_number, r1)
        if (v + 1) * LANES > valid:
            a.ldi(r1, valid - 1)
            a.min(r0, r0, r1)
        a.shl(OFFSETS[v], r0, plan.element_bytes.bit_length() - 1)
    if vectors == 1:
        a.nop()                     # OFFSETS[0] is read by the next instruction
    requests = [(base, v) for v in range(vectors) for base in (A_BASE, B_BASE)]

    def request(i):
        base, v = requests[i]
        a.add(tmu0_s, base, OFFSETS[v])

    ahead = min(GATHER_DEPTH, len(requests))
    for i in range(ahead):
        request(i)
    a.read(vw_wait)                 # my previous block's store has left the staging rows
    a.mov(vw_setup, STAGE_W)
    for v in range(vectors):
        a.nop(sig="ldtmu0")
        a.mov(r3, r4)
        a.nop(sig="ldtmu0")
        a.fadd(r1, r3, r4)
        for i in range(ahead + 2 * v, min(ahead + 2 * v + 2, len(requests))):
            request(i)
        activate(a, vpm, r1, plan.epilogue.activation, r5)
    if full:
        a.mov(vw_setup, uniform)
        a.mov(vw_addr, Y_ADDR)
    if part:                        # the partial vector: its own store of fewer columns
        if full:
            a.read(vw_wait)
        a.mov(vw_setup, uniform)
        a.ldi(r1, full * LANES * plan.element_bytes)
        a.add(vw_addr, Y_ADDR, r1)


@kernel
def add_kernel(a, plan):
    prepare_activation(a, plan.epilogue)
    a.mov(STAGE_W, uniform)
    a.ldi(vw_setup, vdw_stride(0))          # a block's rows are contiguous in memory
    each_record(a, lambda: block(a, plan, plan.block_elements))
    if plan.tail:
        a.mov(null, uniform, sf=True)
        a.branch("end", cond="all_zs")
        a.nop()
        a.nop()
        a.nop()
        block(a, plan, plan.tail)
        a.label("end")
    a.read(vw_wait)
    a.exit()
