"""fp16 storage of the panel kernel's A, C and residual (the pointwise layer's activations).

One half per element, in the tensors' natural order (docs/kernels.md "fp16 activations in the
pointwise kernel"); the arithmetic stays float32:

- **A** (gathered through the TMU, vc4nn/kernels/halves.py): a lane asks for the half at its
  byte address, the TMU returns the word at address & ~3 and the lane keeps the half that bit 1
  of its address names. The k loop copies each gather out of r4 into r1 anyway (the rotator
  reads only r0-r3); for halves the copy is the flag of bit 1 and two conditional MUL moves of
  r4's 16a / 16b unpacked (to float32, whatever the op), whose ADD slots carry the k-row's other
  bookkeeping (``copy_steps``). The flag is read from r2, the address of the gather asked
  for last, not kept per gather: r2 lies a known number of gather steps past the gather being
  copied (panel_kloop.KStep.flip), so the generator knows whether bit 1 differs there (steps of
  an odd number of halves) and swaps the conditions.
- **C**: the activation's last op packs the result into bits 15:0 of a regfile-A register (the
  chunk counter, dead during the store: ``pack_register``), a 16-bit generic write stages it
  and a 16-bit VDW stores the vector's halves.
- **addresses**: the uniform stream gives C's addresses in C's element size; the float32 bias
  and the residual (either storage) ride as offsets from C's addresses. When their element size
  differs from C's, the kernel scales C's address by the ratio (one shift) before adding the
  offset, which the host computed against the scaled C address (``scaled_offset``).
"""

from asm import null, r1, r2, r4, tmu0_s

from .common import MASK
from .halves import HALF_HIGH, HALF_LOW
from .panel_plan import HALF
from .panel_registers import registers


def copy_steps(a, plan, kind, setup, count):
    """A k-row's bookkeeping with halves, as k_step steps (emit(sig), uses a small immediate):
    on the first k of a gather (``kind``: a panel_kloop.KStep) the flags of bit 1 of r2, then
    the copy of the gather to r1 as two conditional MUL moves (an r4 unpack converts for any
    op), the ADD slots carrying the request of the gather ahead (asked at the old r2 with the
    flags, r2 stepped next), ``setup`` (the chunk's first VPM reads) and ``count`` (the chunk
    loop's counter, last: its flags must outlive the copy's). Other k: ``setup`` and ``count``
    on their own."""
    extras = [step for step in (setup, count) if step]
    if kind.half:
        return extras
    if kind.ones:                   # (stagger's bias row: A is 1, no gather)
        return extras + [(lambda sig: a.mov(r1, 1.0, sig=sig), True)]
    regs = registers(plan)[0]
    low, high = ("zc", "zs") if kind.flip else ("zs", "zc")
    if kind.flagged:
        return flagged_copy_steps(a, plan, kind, extras, low, high)
    flag = (lambda sig: a.and_(null, r2, HALF, sf=True, sig=sig), True)
    ask = None
    if kind.request == "full":
        flag = (lambda sig: a.and_(null, r2, HALF, sf=True, sig=sig).mov(tmu0_s, r2), True)
        ask = (lambda sig: a.add(r2, r2, regs["a_step"], sig=sig), False)
    elif kind.request == "single":
        ask = (lambda sig: a.sub(tmu0_s, r2, regs["lane_k"], sig=sig), False)
    if ask is None and setup and not count:
        ask, extras = setup, []
    elif ask is None and setup:
        ask, extras = setup, [count]
    first = extras[:-1]             # a setup that found no free ADD slot goes before
    last = extras[-1] if extras else None
    return first + [flag, copy_step(a, ask, HALF_LOW, low), copy_step(a, last, HALF_HIGH, high)]


def flagged_copy_steps(a, plan, kind, extras, low, high):
    """copy_steps of a KStep ``flagged`` (the flags are set): the two moves, their ADD slots
    carrying the request at r2, then r2's step, or the extras (``setup`` and ``count``: the
    count last), before which r2 steps elsewhere (k_step: ``deferred_step``)."""
    regs = registers(plan)[0]
    adds = []
    if kind.request == "full":
        adds = [(lambda sig: a.mov(tmu0_s, r2, sig=sig), False)]
        if not extras:
            adds.append((lambda sig: a.add(r2, r2, regs["a_step"], sig=sig), False))
    elif kind.request == "single":
        adds = [(lambda sig: a.sub(tmu0_s, r2, regs["lane_k"], sig=sig), False)]
    adds += extras
    first = adds[:-2]               # more than the moves' two slots take go before
    adds = [None] * (2 - len(adds)) + adds[-2:]
    return first + [copy_step(a, adds[0], HALF_LOW, low), copy_step(a, adds[1], HALF_HIGH, high)]


def deferred_step(kind, extras):
    """Whether flagged_copy_steps leaves r2's step of ``kind`` to k_step (with ``extras``:
    whether it carries a setup or the count)."""
    return kind.flagged and kind.request == "full" and bool(extras)


def copy_step(a, add_step, half, cond):
    """``add_step`` (an ADD op as a step, or None) with the MUL moving r4's ``half`` to r1."""
    emit, small = add_step or ((lambda sig: a.nop(sig=sig)), False)
    return (lambda sig: emit(sig).mov(r1, r4.unpack(half), cond=cond), small)


def pack_register(plan):
    """The regfile-A register C's halves are packed into: the chunk counter, which the store
    does not need (every panel loads it again before its chunk loop)."""
    return registers(plan)[0]["chunks_left"]


def scaled_address(a, dst, address, offset, c_bytes, to_bytes):
    """dst (an accumulator) = C's ``address`` scaled to elements of ``to_bytes`` + ``offset``
    (an accumulator, or a register ``address`` does not share a file with): the address of the
    element of another tensor with C's index, when the uniform stream's offset came from
    ``scaled_offset``."""
    if address is not dst:
        a.mov(dst, address)
    shift = a.shl if to_bytes > c_bytes else a.shr
    shift(dst, dst, 1)
    a.add(dst, dst, offset)


def scaled_offset(base, c_address, c_bytes, to_bytes):
    """The uniform word for ``scaled_address``: ``base`` less C's address scaled to elements of
    ``to_bytes`` (modulo 2**32, as the kernel adds)."""
    return (base - c_address * to_bytes // c_bytes) & MASK
