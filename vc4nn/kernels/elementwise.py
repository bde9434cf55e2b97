"""Elementwise add on the QPUs: ``y = act(a + b)`` over any number of float32 elements.

A *block* is up to BLOCK_VECTORS vectors (64 elements) of the flattened tensors. For each block
a QPU gathers its vectors of a and b through the TMU (every vector is one 64-byte line when the
tensors are aligned; GATHER_DEPTH requests in flight), adds them, applies the activation on the
VPM write (vc4nn/kernels/epilogue.py) into its own BLOCK_VECTORS staging rows, and stores the
block with one DMA of contiguous rows. The QPUs take blocks round-robin and never meet. The last
block may be shorter: its code is generated for its exact length (lanes past the end repeat the
last element, so no gather leaves the tensors, and the partial vector is stored by a second DMA
of fewer columns). Memory-bound: 12 bytes move per add in float32.

fp16 storage (each of a, b, y separately; arithmetic float32): the mapping stays one element per
lane. A half tensor's lane reads the word holding its half and keeps it by its address's bit 1
(vc4nn/kernels/halves.py: two instructions where float32 takes one); a half result is packed
into ra3 by the activation's last op and leaves by a 16-bit VPM write and a 16-bit DMA store
(docs/kernels.md "fp16 storage").

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

from . import dma
from . import chain
from .common import GATHER_DEPTH, LANES, each_record
from .epilogue import Epilogue, activate, prepare_activation
from .halves import HALF_LOW, flag_half, gathered_half
from .spatial import STORAGE_BITS, check_storage

BLOCK_VECTORS = 4               # 12 QPUs x 4 staging rows = 48 of the 64 reachable VPM rows
A_BASE, B_BASE, Y_ADDR, PACKED = ra[0], ra[1], ra[2], ra[3]
# per-lane byte offsets of a block's vectors, by element size (float32, half)
OFFSETS = {4: [rb[i] for i in range(BLOCK_VECTORS)],
           2: [rb[BLOCK_VECTORS + 1 + i] for i in range(BLOCK_VECTORS)]}
STAGE_W = rb[BLOCK_VECTORS]
TWO = rb[2 * BLOCK_VECTORS + 1]


def ceil_div(a, b):
    return -(-a // b)


@dataclasses.dataclass(frozen=True)
class AddPlan:
    size: int                   # elements
    num_qpus: int
    activation: typing.Optional[str] = None
    a_storage: str = "fp32"     # "fp32" or "fp16", of a, b and the result y
    b_storage: str = "fp32"
    y_storage: str = "fp32"

    def __post_init__(self):
        for name in ("a_storage", "b_storage", "y_storage"):
            check_storage(f"add: {name}", getattr(self, name))

    @property
    def epilogue(self):
        return Epilogue(activation=self.activation)

    def bytes_of(self, tensor):
        """Bytes of one element of ``tensor`` ("a", "b" or "y")."""
        return STORAGE_BITS[getattr(self, tensor + "_storage")] // 8

    @property
    def y_bits(self):
        return STORAGE_BITS[self.y_storage]

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
        bits = self.y_bits

        def addresses(block):
            first = block * self.block_elements
            return [base + first * self.bytes_of(t) for base, t in ((a, "a"), (b, "b"), (y, "y"))]

        streams = []
        for q in range(self.qpus):
            words = [vpm_write_setup(staging_y(q), size=bits, stride=dma.row_stride(bits))]
            for block in range(q, self.full_blocks, self.qpus):
                words += [1, *addresses(block),
                          vdw_setup(BLOCK_VECTORS, LANES, staging_y(q), size=bits)]
            words.append(0)
            tail_qpu = self.full_blocks % self.qpus
            if self.tail and q == tail_qpu:
                full, part = divmod(self.tail, LANES)
                words += [1, *addresses(self.full_blocks)]
                words += [vdw_setup(full, LANES, staging_y(q), size=bits)] if full else []
                words += [vdw_setup(1, part, staging_y(q) + full, size=bits)] if part else []
            elif self.tail:
                words.append(0)
            streams.append(words)
        return chain.with_tail(streams)


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
    inputs = [(A_BASE, plan.bytes_of("a")), (B_BASE, plan.bytes_of("b"))]
    sizes = sorted({size for _, size in inputs})
    a.mov(A_BASE, uniform)
    a.mov(B_BASE, uniform)
    a.mov(Y_ADDR, uniform)
    for v in range(vectors):        # byte offsets of each lane, clamped to the block
        a.ldi(r1, v * LANES)
        a.add(r0, element_number, r1)
        if (v + 1) * LANES > valid:
            a.ldi(r1, valid - 1)
            a.min(r0, r0, r1)
        for size in sizes:
            a.shl(OFFSETS[size][v], r0, size.bit_length() - 1)
    if vectors == 1:
        a.nop()                     # OFFSETS[.][0] is read by the next instruction
    requests = [(base, OFFSETS[size][v]) for v in range(vectors) for base, size in inputs]

    def request(i):
        base, offset = requests[i]
        a.add(tmu0_s, base, offset)

    def pop(i, op, dst, *srcs):
        """dst = op(*srcs, the element of gather i as float32)."""
        base, offset = requests[i]
        if offset in OFFSETS[4]:
            a.nop(sig="ldtmu0")
            if srcs:
                getattr(a, op)(dst, *srcs, r4)
            else:
                a.mov(dst, r4)
        else:
            a.add(r0, base, offset)
            flag_half(a, r0, TWO, sig="ldtmu0")
            gathered_half(a, op, dst, *srcs)

    ahead = min(GATHER_DEPTH, len(requests))
    for i in range(ahead):
        request(i)
    a.read(vw_wait)                 # my previous block's store has left the staging rows
    a.mov(vw_setup, STAGE_W)
    packed = plan.y_storage == "fp16"
    for v in range(vectors):
        pop(2 * v, "fmax", r3)
        pop(2 * v + 1, "fadd", r1, r3)
        for i in range(ahead + 2 * v, min(ahead + 2 * v + 2, len(requests))):
            request(i)
        if packed and v:
            a.mov(vpm, PACKED)      # the previous vector's halves (bits 15:0 of each lane)
        activate(a, PACKED if packed else vpm, r1, plan.epilogue.activation, r5,
                 pack=HALF_LOW if packed else None)
    if packed:
        a.nop()                     # the last pack is not readable yet
        a.mov(vpm, PACKED)
    if full:
        a.mov(vw_setup, uniform)
        a.mov(vw_addr, Y_ADDR)
    if part:                        # the partial vector: its own store of fewer columns
        if full:
            a.read(vw_wait)
        a.mov(vw_setup, uniform)
        a.ldi(r1, full * LANES * plan.bytes_of("y"))
        a.add(vw_addr, Y_ADDR, r1)


@kernel
def add_kernel(a, plan):
    prepare_activation(a, plan.epilogue)
    a.mov(STAGE_W, uniform)
    a.ldi(TWO, 2)
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
    chain.end(a)
