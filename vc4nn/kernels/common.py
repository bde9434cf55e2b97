"""Pieces every kernel of the library uses: sizes, record loops, lane addresses, zeroing."""

from asm import element_number, isa, null, r5, r5rep, uniform

LANES = isa.SIMD_WIDTH
WORD = 4                        # bytes of a float32
MASK = 0xFFFFFFFF               # a uniform word: offsets wrap modulo 2**32
# Requests in flight when a loop gathers many vectors (C for beta, a transpose): the TMU FIFO
# depth the errata found reliable (facts §5.13).
GATHER_DEPTH = 4
# The VDW stride field is 16 bits (facts §5.14).
MAX_VDW_STRIDE = (1 << isa.VDW_STRIDE["stride"][1]) - 1
# Activation layouts, named by their axes: "hwc" (H, W, C), the layer contract's NHWC; "chw"
# (C, H, W), channel-major, what a depthwise layer may write for the pointwise layer after it
# (docs/kernels.md "Handing over transposed").
LAYOUTS = ("hwc", "chw")


def ceil_div(a, b):
    return -(-a // b)


def each_record(a, body):
    """Run ``body`` once per record of the uniform stream: each starts with 1, a 0 ends them."""
    a.label("next")
    a.mov(null, uniform, sf=True)
    a.branch("done", cond="all_zs")
    a.nop()
    a.nop()
    a.nop()
    body()
    a.branch("next")
    a.nop()
    a.nop()
    a.nop()
    a.label("done")


def lane_addresses(a, dst, stride, scratch, group=None):
    """dst = uniform (address of lane 0) + min(lane, uniform (valid lanes - 1)) * stride, where
    lane counts modulo ``group`` (a power of two) if given: lanes i and i + group then address
    the same row.

    Lanes past the matrix edge repeat the last valid lane's address: they read real data and
    compute values nobody stores, which is cheaper than masking every instruction. A stride
    above the small immediates goes through r5 (whose writes replicate element 0: a constant).
    """
    a.mov(dst, uniform)
    if group:
        a.and_(scratch, element_number, group - 1)
        a.min(scratch, scratch, uniform)
    else:
        a.mov(scratch, uniform)
        a.min(scratch, element_number, scratch)
    if stride > 15:
        a.ldi(r5rep, stride)
        stride = r5
    a.mul24(scratch, scratch, stride)
    a.add(dst, dst, scratch)


def zero(a, regs):
    """Zero registers two per instruction: an ldi writes one A-side and one B-side register."""
    sides = [[reg for reg in regs if reg.name.startswith(side)] for side in ("ra", "rb")]
    for i in range(max(len(side) for side in sides)):
        pair = tuple(side[i] for side in sides if i < len(side))
        a.ldi(pair if len(pair) > 1 else pair[0], 0)


def ops_then_branch(a, ops, target, cond="always", link=None):
    """Emit ``ops`` and a branch to ``target`` (``link``: the register taking the return
    address), the last ops filling the delay slots."""
    slots = isa.BRANCH_DELAY_SLOTS
    before = max(0, len(ops) - slots)
    for op in ops[:before]:
        op()
    a.branch(target, cond=cond, link=link)
    for op in ops[before:]:
        op()
    for _ in range(slots - (len(ops) - before)):
        a.nop()


def paired_moves(a, moves, first=None):
    """Emitters of the moves [(dst, src)], in order, two per instruction where the registers'
    files allow (one read and one write on each side; an accumulator is read on either). A move is
    brought forward only past moves that do not read what it writes (its partner reads the
    old value in the same instruction). ``first(dst, src)``: the first move's own op (on the
    ADD ALU: its partner goes on the MUL), instead of a mov."""
    moves, ops = list(moves), []
    while moves:
        dst, src = moves.pop(0)
        move, first = first or a.mov, None
        partner = next((m for i, m in enumerate(moves)
                        if apart(m[0], dst) and (apart(m[1], src) or m[1] is src)
                        and all(earlier[1] is not m[0] for earlier in moves[:i])), None)
        if partner:
            moves.remove(partner)
            ops.append(lambda d=dst, s=src, p=partner, move=move: move(d, s).mov(*p))
        else:
            ops.append(lambda d=dst, s=src, move=move: move(d, s))
    return ops


def apart(one, other):
    """Whether two registers can be used by the two ALUs of one instruction: not both on the
    same register file (an accumulator is reached from either)."""
    sides = [None if reg.mux is not None else "a" if "a" in reg.reads else "b"
             for reg in (one, other)]
    return None in sides or sides[0] != sides[1]
