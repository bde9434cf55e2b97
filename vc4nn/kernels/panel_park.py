"""Rows of a pass parked in spare registers and stored during the next pass
(``PanelPlan.park_rows``).

At a panel's end every QPU stores its rows x V vectors one DMA after another and all QPUs do so
at once, so the memory bus drains the whole block while the QPUs wait (the next pass needs the
accumulators); layers with few k per pixel (112x112x32->64: 11 chunks of work per burst of 384
rows) spend ~40% of their time there. With ``park_rows`` = P, a pass stores only its first
rows at its end: the last P rows' vectors go (activated) into registers the accumulators leave
free, and the next pass stores them from there, one vector after each of the first
k-rows of its steady chunks (as few as cover them, never the last), through the same staging row, while the k steps go
on (the store's DMA runs during the next k-row; one in flight, facts §3). The chunk loop's code
is the same for every chunk, so a body stores the same registers every time: after its
slots, the parked registers move down by the slots of a body (a conveyor); once the conveyor
is empty its last registers are stored again, to their own addresses (the same data). The
stores' addresses come from the uniform stream. The first pass has nothing to store on the way
and the last parks nothing (its rows may be fewer or not all valid).

Single full panels only (one panel of B: a pass's parked rows are stored during the next
pass's only panel), gathered B and no residual. fp16 C (panel_act_halves): a vector is parked
packed, its half in bits 15:0 (a regfile-A write packs: a regfile-B park register takes the
packed word through the store's pack register), so a slot stores it as it is.
"""

from asm import r5, uniform, vpm, vw_addr, vw_setup, vw_wait

from .common import LANES, paired_moves
from .epilogue import activate, prepare_activation
from .halves import HALF_LOW
from .panel_act_halves import pack_register
from .panel_kloop import loop_bodies
from .panel_registers import Accumulators, accumulators, registers

def slots_per_chunk(plan):
    """Store slots per chunk: as few as store the parked vectors in the chunk loop, one after
    each k-row but the last at most (slots past the vectors store the last ones again). (Two
    at most in chunks of 3 k-rows; 5 in pw1's fp16 chunks of 6: its 24 parked vectors in 5
    loop bodies.)"""
    bodies = max(1, loop_bodies(plan) * plan.chunk_period)
    return min(plan.chunk_rows - 1, -(-parked_vectors(plan) // bodies))


def slots_per_body(plan):
    return slots_per_chunk(plan) * plan.chunk_period


def parked_vectors(plan):
    return plan.park_rows * plan.panel_vectors


def park_registers(plan):
    """The registers the accumulators of a pass (``rows`` or ``last_rows``) leave: the first
    parked_vectors(plan) of them hold the parked vectors, regfile A and B in turn while both
    have some, so that the conveyor's moves go two per instruction (``shift``)."""
    spare_a, spare_b = _spare(plan)
    if drain_registers(plan):           # (their last ones)
        spare_a, spare_b = spare_a[:-1], spare_b[:-1]
    turns = min(len(spare_a), len(spare_b))
    spare = [reg for pair in zip(spare_a, spare_b) for reg in pair] + \
        spare_a[turns:] + spare_b[turns:]
    return spare[:parked_vectors(plan)] if len(spare) >= parked_vectors(plan) else None


def _spare(plan):
    """The registers the accumulators of a pass leave: (on regfile A, on regfile B)."""
    used = {reg for rows in {plan.rows, plan.last_rows}
            for row in accumulators(plan, plan.panel_vectors, rows) for reg in row}
    _, a_free, b_free = registers(plan)
    return [reg for reg in a_free if reg not in used], [reg for reg in b_free if reg not in used]


def drain_registers(plan):
    """(address, step) when the store slots take their addresses from a register instead of
    the uniform stream, else None: where every slot stores a vector of its own, in address
    order (the chunk loop's bodies hold exactly the parked vectors, so the conveyor hands
    them out one after another: ``drain_order``), and the park registers leave one register
    on each file. The address steps by one vector in the instruction that starts the store
    (its ADD reads both, its MUL the old address); the pass's first address comes from the
    uniform stream. (The uniform words of the slots missed the uniform cache every 16 slots:
    fp16 112x112x32->64, 6 rows of 4 vectors, 25 slots per pass, uniform stalls 5% of QPU
    time.)"""
    if drain_order(plan) != list(range(parked_vectors(plan))):
        return None
    spare_a, spare_b = _spare(plan)
    if not spare_a or not spare_b or len(spare_a) + len(spare_b) < parked_vectors(plan) + 2:
        return None
    return spare_a[-1], spare_b[-1]


def drain_order(plan):
    """The parked vectors the store slots of one pass store, in order (the conveyor's
    ``shift``): each vector once in order where the bodies' slots are as many as the parked
    vectors; else the last ones stored again."""
    step, count = slots_per_body(plan), parked_vectors(plan)
    held = list(range(count))           # the parked vector each park register holds
    order = []
    for _ in range(loop_bodies(plan)):
        order += held[:step]
        held[:count - step] = held[step:]               # (shift)
    return order


def check(plan):
    """Why ``plan`` cannot park its rows (None: it can)."""
    if not plan.b_gather or plan.epilogue.residual:
        return "it needs gathered B and no residual"
    if plan.spread_rows or plan.full_panels != 1 or plan.edge:
        return f"N = {plan.n} is not one panel, or the last pass is spread"
    if plan.passes < 2 or not 0 < plan.park_rows <= plan.rows:
        return f"{plan.park_rows} rows of {plan.rows} in {plan.passes} passes"
    if park_registers(plan) is None:
        return f"{parked_vectors(plan)} vectors do not fit in the registers left"
    bodies = loop_bodies(plan)
    if not slots_per_chunk(plan) or parked_vectors(plan) < slots_per_body(plan) or \
            bodies * slots_per_body(plan) < parked_vectors(plan):
        return (f"{bodies} chunk loop bodies of {slots_per_body(plan)} store slots for "
                f"{parked_vectors(plan)} vectors")
    return None


def store_rows(plan, acc):
    """The rows a parking pass stores at its panel's end (the others are parked)."""
    return Accumulators(acc[:len(acc) - plan.park_rows])


def park(a, plan, acc):
    """The pass's last park_rows rows, activated (fp16 C: and packed), into the park
    registers. fp16 C with relu6 (two instructions, the last reading r0 and an immediate):
    a regfile-B park register takes its word from the pack register in the MUL slot of the
    next vector's last instruction (two instructions on, when the pack register is readable
    again and just before it is written), so it costs nothing more than a regfile-A one."""
    prepare_activation(a, plan.epilogue)
    rows = acc[len(acc) - plan.park_rows:]
    activation, pack = plan.epilogue.activation, pack_register(plan)
    carried = activation == "relu6"
    waiting = None                  # a regfile-B park register whose word is in ``pack``
    for dst, src in zip(park_registers(plan), [reg for row in rows for reg in row]):
        if not plan.c_halves:
            activate(a, dst, src, activation, r5)
            continue
        to_a = "a" in dst.writes
        last = activate(a, dst if to_a else pack, src, activation, r5, pack=HALF_LOW)
        if waiting is not None:
            last.mov(waiting, pack)
            waiting = None
        if not to_a and carried:
            waiting = dst
        elif not to_a:
            a.nop()                 # (a regfile-A register is not readable the next instruction)
            a.mov(dst, pack)
    if waiting is not None:
        a.nop()
        a.mov(waiting, pack)


def drain_slot(a, plan, slot):
    """Store park register ``slot`` (of the body's slots) at the uniform stream's address, or
    (``drain_registers``) at the address register's, which steps to the next vector."""
    regs = registers(plan)[0]
    a.read(vw_wait)
    a.mov(vw_setup, regs["stage_w"])
    a.mov(vpm, park_registers(plan)[slot])
    stepped = drain_registers(plan)
    if stepped:
        address, step = stepped
        a.add(address, address, step).mov(vw_addr, address)
    else:
        a.mov(vw_addr, uniform)


def start_drains(a, plan):
    """Before a draining pass's chunks: the VDW setup of its store slots, and the first slot's
    address (``drain_registers``). Only the stores write VDW setups, and a generic write setup
    (the staging row's, B's rows at the boundaries) leaves it as it was (panel_store.store_row),
    so the slots do not write it again."""
    a.mov(vw_setup, registers(plan)[0]["vdw_full"])
    stepped = drain_registers(plan)
    if stepped:
        a.mov(stepped[0], uniform)


def load_drain_step(a, plan):
    """Once per program: the address step of the store slots, one vector of C
    (``drain_registers``)."""
    stepped = plan.park_rows and drain_registers(plan)
    if stepped:
        a.ldi(stepped[1], LANES * plan.c_bytes)


def shift(a, plan):
    """The conveyor: the parked registers move down by a body's slots, two moves per
    instruction where their files allow (a move from regfile A to B beside one from B to A, or
    A to A beside B to B: park_registers alternates the files)."""
    regs, step = park_registers(plan), slots_per_body(plan)
    for move in paired_moves(a, [(regs[i], regs[i + step]) for i in range(len(regs) - step)]):
        move()


def drain_words(plan, c_addr, m0):
    """The uniform words of a pass's store slots: the addresses of the vectors the QPU whose
    block of the pass before starts at row ``m0`` parked, in the order the slots store them
    (``drain_registers``: the first one only)."""
    first = m0 + plan.rows - plan.park_rows
    words = []
    for index in drain_order(plan):
        row, vector = divmod(index, plan.panel_vectors)
        words.append(c_addr + ((first + row) * plan.n + vector * LANES) * plan.c_bytes)
    return words[:1] if drain_registers(plan) else words
