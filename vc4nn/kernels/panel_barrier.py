"""The panel kernel's chunk boundary: the QPU barrier and the DMA loads of B's next chunk."""

import functools

from asm import isa, null, r1, r3, r5, r5rep, uniform, vr_addr, vr_setup, vr_wait, vw_setup

from .common import ops_then_branch
from .panel_gather_b import arrive_by_done, request_ops
from .panel_halves import widen
from .panel_plan import ROLE_LOADER, relays
from .panel_registers import registers, stepped_loads
from .panel_uniforms import (NEXT_SETUP_STEPS, load_step, next_setup_offset, pieces_per_load,
                              relay_role, setup_in_registers, widen_offset)
from .sgemm import SEMA_DONE, SEMA_GO


# The barrier's other two semaphores (see boundary); sgemm.py uses only DONE and GO.
SEMA_RELAY, SEMA_ARRIVED = SEMA_GO + 1, SEMA_GO + 2


def issue_loads(a, plan):
    """Loaders start the DMA pieces of chunk 0, read from the uniform stream (stepped loads:
    after widen_x, and the address kept in load_next)."""
    regs = registers(plan)[0]
    steps = stepped_loads(plan)
    if steps:           # the loaders are the relays: neither N (the master) nor Z (a leaf)
        a.mov(null, regs["role"], sf=True)
        skip_unless(a, "all_ns")
    else:
        a.and_(null, regs["role"], ROLE_LOADER, sf=True)
    skip_unless(a, "all_zs")
    if steps:
        if plan.b_halves:
            a.mov(regs["widen_x"], uniform)
        a.mov(vr_setup, uniform)
        a.mov(r1, uniform)
        a.mov(regs["load_next"], r1).mov(vr_addr, r1)
    else:
        for _ in range(pieces_per_load(plan)):
            a.mov(vr_setup, uniform)
            a.mov(vr_addr, uniform)
    a.label("skip")


def skip_unless(a, cond):
    """Branch to "skip" on ``cond`` (the flags of the instruction before)."""
    a.branch("skip", cond=cond)
    a.nop()
    a.nop()
    a.nop()


def boundary(a, plan, variant, masters, stepped=True, leaves=False, leaves_behind=False,
             flags_set=False):
    """Before each chunk: finish my load of it (fp16 B: and widen it in the master's or the
    relay's code, panel_halves), meet the others, start my load of the next (b_gather: ask for
    my rows of the next, panel_gather_b; ``stepped`` says how).

    The barrier covers both conditions at once: the chunk's loads were waited for by their
    issuers before they arrived, and nobody reads the previous chunk any more, so its buffer is
    free for the next chunk's loads. The master (QPU 0) is the QPU everyone waits for: it starts
    a chunk after handing out "go" and counts the others' arrivals after computing it, so its
    semaphore instructions are on every chunk's path, and the relays (the loaders other than the
    master) take some of them over:

    - arrive: every QPU but the master releases ARRIVED. Each relay acquires
      ``relay_counts(plan)[0]`` ARRIVED tokens (its own and some leaves', whichever) and then
      releases DONE; the master acquires the remaining ARRIVED tokens and one DONE per relay.
      That consumes exactly one ARRIVED per other QPU, so the master passes when all arrived.
    - go: the master releases RELAY once per relay and GO for some leaves; each relay, in the
      instruction after it gets its RELAY token, releases GO for ``relay_counts(plan)[1]``
      leaves. Exactly one GO per leaf.

    Every token is released while the QPUs it is for are already waiting for it (they arrived,
    or the master would not have passed) and nothing that can stall lies between a relay's
    RELAY and its GO releases, so a QPU gets its token within a few instructions, long before
    anyone could finish a chunk and ask again: the tokens of two chunks are never outstanding
    at once and one semaphore per kind suffices (see ``relay`` for what broke this once).
    Leaves fall through; the master and the relays branch to their code, placed after the end
    of the program (``masters``). Flat arrival, with the master acquiring one DONE per QPU and
    releasing one GO per QPU, measured 15.00 GFLOPS on the quick AlexNet shape, this 15.22.
    ``leaves``: code that only leaves run (``leaf_boundary``); ``leaves_behind``: see
    ``coordinators``; ``flags_set``: the flags of the role are set (carries_role_flags).
    """
    regs = registers(plan)[0]
    if leaves:
        return leaf_boundary(a, plan, stepped)
    number = len(masters)
    # b_gather: my requests for the next chunk's rows of B fill the branches' free delay slots;
    # the master and the relays do the rest first thing in their code.
    ops = request_ops(a, plan, stepped) if plan.b_gather else []
    if arrive_by_done(plan):
        return gathered_boundary(a, plan, masters, ops, leaves_behind, flags_set)
    with a.scope():
        a.mov(null, regs["role"], sf=True)              # N: master; Z: a leaf; else a relay
        a.branch(f"master{number}", cond="all_ns")
        a.xor(regs["buffer"], regs["buffer"], regs["toggle"])   # delay slots: the next buffer
        (ops[0] if ops else a.nop)()
        a.add(r3, regs["buffer"], plan.row_base)                     # and r3 for the k steps
        rest = ops[1:]
        if relays(plan):
            a.branch(f"relay{number}", cond="all_zc")
        # (delay slots of the relay branch) a relay's load of this chunk must be done before it
        # arrives; vr_wait returns at once on a leaf, which has no load in flight.
        if not plan.b_gather:
            a.read(vr_wait)
        a.sema_release(SEMA_ARRIVED)
        if relays(plan):
            for _ in range(isa.BRANCH_DELAY_SLOTS - 1 - (not plan.b_gather)):
                (rest.pop(0) if rest else a.nop)()
        for op in rest:
            op()
        a.sema_acquire(SEMA_GO)                         # leaves
        back = a.label("back")
    masters.append(functools.partial(master, a, plan, variant, number, back, ops[1:]))
    if relays(plan):
        masters.append(functools.partial(relay, a, plan, variant, number, back, rest, stepped))


def gathered_boundary(a, plan, masters, ops, leaves_behind=False, flags_set=False):
    """``boundary`` with gathered B (a relay has no load to wait for) and relays: one branch
    takes the master and the relays to their code (``coordinators``), where the relays' path
    was two (the master's, then the relays'), and a relay's DONE says it arrived (all_arrive
    aside, it releases no ARRIVED): its DONE comes 3-4 instructions sooner after its chunk,
    and the chain of tokens through the relays and the master is what every chunk waits for
    (the QPUs' semaphore stalls). ``ops``: my requests of B's rows; ``leaves_behind``: see
    ``coordinators``; ``flags_set``: see boundary."""
    regs = registers(plan)[0]
    number = len(masters)
    arrive = lambda: a.sema_release(SEMA_ARRIVED)      # noqa: E731
    slots = [lambda: step_buffer(a, plan)] + ops + [arrive] * all_arrive(plan)
    slots += [a.nop] * (isa.BRANCH_DELAY_SLOTS - len(slots))
    with a.scope():
        if not flags_set:
            a.mov(null, regs["role"], sf=True)          # N: master; Z: a leaf; else a relay
        a.branch(f"coordinator{number}", cond="all_zc")
        for op in slots:
            op()
        if not all_arrive(plan):
            arrive()
        a.sema_acquire(SEMA_GO)                         # leaves
        back = a.label("back")
    masters.append(functools.partial(coordinators, a, plan, number, back,
                                     slots[isa.BRANCH_DELAY_SLOTS:], leaves_behind))


def all_arrive(plan):
    """Whether every QPU releases ARRIVED in the last delay slot of gathered_boundary's branch
    (its requests of B take one: single-gather B), the master and the relays too, who take
    those tokens back in their share: the leaves' path has one instruction less, the
    others' as many (the slot was a nop, the relays' ARRIVED share grows by one)."""
    return arrive_by_done(plan) and plan.b_gathers == 1


def step_buffer(a, plan):
    """The next chunk's buffer and r3 for its k steps from r3, which the chunk before left at
    the next buffer's read setup (panel_gather_b.pop_steps; a panel's first chunk:
    first_buffer): one instruction where the buffer's xor and r3's add were two."""
    a.add(r3, r3, plan.row_base).mov(registers(plan)[0]["buffer"], r3)


def buffer_in_r3(plan, leaves=False):
    """Whether the boundaries take the next buffer from r3 (step_buffer): gathered B, in
    gathered_boundary or leaf_boundary (``leaves``)."""
    return plan.b_gather and (leaves or arrive_by_done(plan))


def first_buffer(a, plan):
    """r3 at the next buffer's read setup for a panel's first boundary (step_buffer)."""
    regs = registers(plan)[0]
    a.xor(r3, regs["buffer"], regs["toggle"])


def coordinators(a, plan, number, back, first=(), leaves_behind=False):
    """The master's and the relays' part of a gathered_boundary, after the ops ``first``: the
    ARRIVED tokens both take in the delay slots of the branch that parts them, then each its
    own (``relay`` and ``master`` say why nothing stalls between a relay's DONE, RELAY and
    GO).

    ``leaves_behind`` (the leaves' pass has pieces, the others' not: they wait for the
    leaves' ARRIVED): a slot left over there releases the relays' DONE right after their
    last ARRIVED, one instruction sooner on the leaves' path to their GO, and the master,
    who runs it too, takes its own DONE back, one more on its path (cycle-model ESTIMATES,
    pi_zero, full layers, float32, ms, without -> with: 7x7x1024->1024 5.635 -> 5.600,
    7x7x512->1024 2.936 -> 2.926; fp16 B leaves no slot over: all_arrive). Where the
    master's path is every chunk's (the passes in which all QPUs compute the same rows) that
    costs more than it gains (fp16, before all_arrive, the DONE in every pass: 14x14x512->512
    5.321 -> 5.330, 56x56x128->128 6.079 -> 6.102)."""
    arrived, go = relay_counts(plan)
    own_arrived, own_go = master_counts(plan)
    count = len(relays(plan))
    shared = min(arrived, isa.BRANCH_DELAY_SLOTS)
    done_early = leaves_behind and shared == arrived < isa.BRANCH_DELAY_SLOTS
    a.label(f"coordinator{number}")
    for op in first:
        op()
    ops_then_branch(a, [lambda: a.sema_acquire(SEMA_ARRIVED)] * shared
                    + [lambda: a.sema_release(SEMA_DONE)] * done_early, f"master{number}",
                    cond="all_ns")
    ops_then_branch(a, [lambda: a.sema_acquire(SEMA_ARRIVED)] * (arrived - shared)
                    + [lambda: a.sema_release(SEMA_DONE)] * (not done_early)
                    + [lambda: a.sema_acquire(SEMA_RELAY)]
                    + [lambda: a.sema_release(SEMA_GO)] * go, back)
    a.label(f"master{number}")
    ops_then_branch(a, [lambda: a.sema_acquire(SEMA_ARRIVED)] * (own_arrived - shared)
                    + [lambda: a.sema_acquire(SEMA_DONE)] * (count + done_early)
                    + [lambda: a.sema_release(SEMA_RELAY)] * count
                    + [lambda: a.sema_release(SEMA_GO)] * own_go, back)


def leaf_boundary(a, plan, stepped):
    """``boundary`` in code only leaves run (PanelPlan.spread_leaves): no branch to the master's
    or a relay's part, and no load of B (b_gather)."""
    step_buffer(a, plan)
    for op in request_ops(a, plan, stepped):
        op()
    a.sema_release(SEMA_ARRIVED)
    a.sema_acquire(SEMA_GO)


def relay_counts(plan):
    """(ARRIVED tokens each relay acquires, GO tokens each relay releases): the same for every
    relay, since they run the same code; the master does the rest (``master_counts``). The
    ARRIVED tokens (``arrivals``) go, with arrive_by_done, as many to the master as to a relay,
    or more."""
    count = len(relays(plan))
    if not count:
        return 0, 0
    leaves = plan.qpus - 1 - count
    share = count + 1 if arrive_by_done(plan) else count
    return arrivals(plan) // share, leaves // count


def arrivals(plan):
    """The ARRIVED tokens of a barrier: every QPU's but the master's, or (arrive_by_done) the
    leaves', or (all_arrive) every QPU's."""
    if all_arrive(plan):
        return plan.qpus
    return plan.qpus - 1 - (len(relays(plan)) if arrive_by_done(plan) else 0)


def master_counts(plan):
    """(ARRIVED tokens, GO tokens) the master acquires / releases itself."""
    arrived, go = relay_counts(plan)
    count = len(relays(plan))
    return arrivals(plan) - arrived * count, plan.qpus - 1 - count - go * count


def load_ops(a, plan):
    """The DMA pieces of this QPU's k-row of the next chunk, read from the uniform stream."""
    ops = []
    for _ in range(pieces_per_load(plan)):
        ops += [lambda: a.mov(vr_setup, uniform), lambda: a.mov(vr_addr, uniform)]
    return ops


def master(a, plan, variant, number, back, first=()):
    """The master's part of one boundary's barrier (and its loads, when it loads), after the
    ops ``first``."""
    arrived, go = master_counts(plan)
    count = len(relays(plan))
    a.label(f"master{number}")
    for op in first:
        op()
    loads, wait = [], []
    if plan.loader_slot(0) is not None and not plan.b_gather:   # its load of this chunk
        loads, wait = load_ops(a, plan), [lambda: a.read(vr_wait)]
        if plan.b_halves:
            widen(a, plan, variant)         # (waits for the load)
            wait = []
    ops_then_branch(a, wait + [lambda: a.sema_acquire(SEMA_ARRIVED)] * arrived
                    + [lambda: a.sema_acquire(SEMA_DONE)] * count
                    + [lambda: a.sema_release(SEMA_RELAY)] * count
                    + [lambda: a.sema_release(SEMA_GO)] * go + loads, back)


def stepped_widen_setups(a, plan, variant):
    """The widening's VPM read and write setups from ``buffer`` + widen_x and r3 - role
    (panel_uniforms.widen_offset, relay_role), which hold for the first variant; a narrower
    panel's differ by constants, added on the way (r1 is free at a chunk boundary)."""
    regs = registers(plan)[0]
    first = plan.variants[0]
    slot = 0        # the differences between variants do not depend on the slot
    read = (widen_offset(plan, variant, slot) - widen_offset(plan, first, slot)) & 0xFFFFFFFF
    write = (relay_role(plan, first, slot) - relay_role(plan, variant, slot)) & 0xFFFFFFFF
    if read:
        a.ldi(r1, read)
        a.add(r1, r1, regs["widen_x"])
        a.add(vr_setup, regs["buffer"], r1)
    else:
        a.add(vr_setup, regs["buffer"], regs["widen_x"])
    if write:
        a.ldi(r1, write)
        a.add(r1, r3, r1)
        a.sub(vw_setup, r1, regs["role"])
    else:
        a.sub(vw_setup, r3, regs["role"])


def step_ops(a, plan):
    """A stepped load: my k-row of the next chunk lies load_step bytes from the one I loaded
    last, forwards or backwards as A's step (a_step: negative when k runs backwards)."""
    regs = registers(plan)[0]
    step = load_step(plan)
    return [lambda: a.ldi(r1, step),
            lambda: a.mov(null, regs["a_step"], sf=True),
            lambda: a.ldi(r1, -step, cond="ns"),
            lambda: a.add(r1, regs["load_next"], r1),
            lambda: a.mov(regs["load_next"], r1).mov(vr_addr, r1)]


def next_setup_ops(a, plan, variant):
    """(setup_in_registers) The vdr setup of my k-row of the next chunk: 16 x (its buffer's
    read setup + widen_x) + next_setup_offset. All but the last instruction go into the
    widening's free slots (r1 and r5 are free at a chunk boundary with stepped loads)."""
    regs = registers(plan)[0]
    steps = [lambda: a.ldi(r5rep, next_setup_offset(plan, variant)),
             lambda: a.xor(r1, regs["buffer"], regs["toggle"]),
             lambda: a.add(r1, r1, regs["widen_x"]),
             lambda: a.shl(r1, r1, 4)]
    assert len(steps) == NEXT_SETUP_STEPS
    return steps + [lambda: a.add(vr_setup, r1, r5)]


def relay(a, plan, variant, number, back, first=(), stepped=True):
    """A relay's part of one boundary's barrier: arrivals, its "go", its leaves' "go", its loads.

    Nothing that can stall (a uniform read of the load words waits for a line fill, possibly
    queued behind the other relays' DMAs) may lie between its DONE and its RELAY, nor between
    its RELAY and its leaves' GO: a token released while the QPU it is for is not yet waiting
    can be taken at the next barrier by a QPU already through this one. The emulator's race
    check caught both: a GO taken by a fast leaf, and, in a revision that read the load words
    between DONE and RELAY, a RELAY taken by a fast relay (40x100x256 on 10 QPUs). So the load
    words of the first DMA piece are read after the arrivals and before DONE: the setup into
    vr_setup (the previous load was waited for), the address into r5, which is dead between
    chunks (see registers), and vr_addr is written after the GO releases.
    """
    arrived, go = relay_counts(plan)
    a.label(f"relay{number}")
    for op in first:
        op()
    steps = stepped_loads(plan)
    early = [lambda: a.mov(vr_setup, uniform), lambda: a.mov(r5rep, uniform)]
    late = [lambda: a.mov(vr_addr, r5)] + load_ops(a, plan)[2:]
    if steps:           # the address: stepped in load_next, or from the stream into it
        regs = registers(plan)[0]
        early = early[:1] + ([] if stepped else [lambda: a.mov(regs["load_next"], uniform)])
        late = step_ops(a, plan) if stepped else [lambda: a.mov(vr_addr, regs["load_next"])]
    if plan.b_halves and not plan.b_gather:     # its own ARRIVED is out already, but the
        # master waits for its DONE (gathered halves are widened by every QPU, panel_gather_b)
        setups, fill = None, []
        if steps:
            setups = functools.partial(stepped_widen_setups, a, plan, variant)
        if stepped and setup_in_registers(plan):    # the next setup in the free slots
            fill = next_setup_ops(a, plan, variant)
            early, late = [], fill[NEXT_SETUP_STEPS:] + late
        widen(a, plan, variant, setups, fill[:NEXT_SETUP_STEPS])
    if plan.b_gather:               # a relay only relays (panel_gather_b)
        early, late = [], []
    ops_then_branch(a, [lambda: a.sema_acquire(SEMA_ARRIVED)] * arrived + early
                    + [lambda: a.sema_release(SEMA_DONE), lambda: a.sema_acquire(SEMA_RELAY)]
                    + [lambda: a.sema_release(SEMA_GO)] * go + late, back)
