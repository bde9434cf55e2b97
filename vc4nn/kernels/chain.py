"""The end of every layer kernel: end the program, or chain to the next layer of the launch.

Several layers run in one launch (docs/runtime.md "Launches") when each program, instead of
ending, hands its QPU to the next layer's program. Every kernel ends with ``end(a)``, which
reads one uniform, the last of its stream (``with_tail``), the *chain word*:

- 0: the program ends as a standalone launch's does (host interrupt, thrend);
- otherwise the bus address of this QPU's *chain record* ``[joint parity, leader, next
  uniforms, next code]`` (``RECORD_WORDS``): the QPU waits for its VDW stores, meets the
  launch's other QPUs at a barrier (the next layer reads what all of them wrote), points
  ``unif_addr`` at the next program's uniform stream and branches to its code.

The runtime writes the records (vc4nn/runtime/replay_chain.py); kernels only read them.

The barrier uses semaphores no kernel uses (``ARRIVE``, ``GO``; the kernels' own use 0-7,
checked by tests/kernels/test_chain.py). Every QPU releases ARRIVE once; the leader
(``leader`` = the launch's QPU count on one QPU, 0 on the others) acquires ARRIVE that many
times, then releases GO as many times; every QPU then acquires GO once. A QPU cannot arrive at
the next joint before the leader has counted every arrival at this one, so one ARRIVE serves
every joint; but a fast QPU can reach the next joint's GO while slower ones have not taken
their GO of this one yet, so consecutive joints alternate between two GO semaphores (the
record's parity word). The counters end at 0, which the next launch needs (semaphores
persist through a launch, docs/hardware-choices.md "Several layers in one launch").

A QPU a layer does not use runs ``pass_program`` there: this tail alone, its stream the chain
word of its record for the next joint.
"""

import functools

from asm import isa, kernel, null, r0, r2, r3, ra, uniform, unif_addr, vw_wait

# Semaphores of the joint barrier (no kernel uses them; tests/kernels/test_chain.py).
# The last three of the ISA's semaphores; GO by the joint's parity.
ARRIVE, GO = isa.NUM_SEMAPHORES - 3, (isa.NUM_SEMAPHORES - 2, isa.NUM_SEMAPHORES - 1)
RECORD_WORDS = 4        # [parity, leader's QPU count or 0, next uniforms, next code address]
END = 0                 # the chain word of a program that ends its launch
NEXT_CODE = ra[31]      # the branch reads its register from regfile A; clobbered at the end only


def with_tail(streams):
    """Each QPU's uniform stream followed by its chain word (END: the program ends there; the
    runtime rewrites it to chain). The word is the last one the program reads."""
    return [list(words) + [END] for words in streams]


def end(a):
    """The kernel's last instructions: read the chain word, then end or chain (see above)."""
    with a.scope("chain"):
        a.mov(r0, uniform, sf=True)             # the chain word
        a.branch("end", cond="all_zs")
        a.nop()
        a.nop()
        a.nop()
        a.mov(unif_addr, r0)                    # the chain record
        a.read(vw_wait)                         # this QPU's VDW stores have landed
        a.nop()                                 # 2 instructions before the next uniform read
        barrier(a)
        a.mov(r2, uniform)                      # the next program's uniforms
        a.mov(NEXT_CODE, uniform)               # and code
        a.mov(unif_addr, r2)
        a.branch(0, absolute=True, reg=NEXT_CODE)
        a.nop()                                 # no uniform read within 2 of the unif_addr
        a.nop()                                 # write, nor in the branch's delay slots
        a.nop()
        a.label("end")
        a.exit()


def barrier(a):
    """Every QPU of the launch reaches this point before any leaves it (the record's words:
    the joint's parity, then the leader's QPU count, 0 on the others)."""
    a.sema_release(ARRIVE)
    a.mov(null, uniform, sf=True)               # the parity
    a.branch("even", cond="all_zs")
    a.nop()
    a.nop()
    a.nop()
    with a.scope("odd"):
        lead_and_leave(a, GO[1])
    a.branch("left")
    a.nop()
    a.nop()
    a.nop()
    a.label("even")
    with a.scope("even"):
        lead_and_leave(a, GO[0])
    a.label("left")


def lead_and_leave(a, go):
    a.mov(r3, uniform, sf=True)                 # the leader's count, 0 on the others
    a.branch("leave", cond="all_zs")
    a.mov(r2, r3)                               # delay slots: the count again, for GO
    a.nop()
    a.nop()
    counted(a, "arrivals", r3, lambda: a.sema_acquire(ARRIVE))
    counted(a, "releases", r2, lambda: a.sema_release(go))
    a.label("leave")
    a.sema_acquire(go)


def counted(a, name, counter, op):
    """``op`` ``counter`` (> 0) times."""
    a.label(name)
    op()
    a.sub(counter, counter, 1, sf=True)
    a.branch(name, cond="all_zc")
    a.nop()
    a.nop()
    a.nop()


@kernel
def pass_kernel(a):
    """A QPU's program for a layer that does not use it: the chain tail only."""
    end(a)


@functools.lru_cache(maxsize=1)
def pass_program():
    return pass_kernel.assemble()


@functools.lru_cache(maxsize=1)
def tail_code():
    """The tail's code bytes (the pass program is the tail alone)."""
    return pass_program().to_bytes()


def chains(code):
    """Whether the program of code bytes ``code`` ends with ``end`` (its relative branches
    make the tail the same bytes wherever it is), so a launch of it can chain."""
    code, tail = bytes(code), tail_code()
    at = code.find(tail)
    while at >= 0 and at % isa.INSTRUCTION_BYTES:
        at = code.find(tail, at + 1)
    return at >= 0
