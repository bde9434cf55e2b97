"""Rows of a pass parked in spare registers and stored during the next pass
(``PanelPlan.park_rows``).

At a panel's end every QPU stores its rows x V vectors one DMA after another and all QPUs do so
at once, so the memory bus drains the whole block while the QPUs wait (the next pass needs the
accumulators); layers with few k per pixel (112x112x32->64: 11 chunks of work per burst of 384
rows) spend ~40% of their time there. With ``park_rows`` = P, a pass stores only its first
rows at its end: the last P rows' vectors go (activated) into registers the accumulators leave
free, and the next pass stores them from there, one vector after each of the first
``SLOT_ROWS`` k-rows of its steady chunks, through the same staging row, while the k steps go
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

SLOT_ROWS = 2           # k-rows of each chunk followed by a store slot at most (never the last)


def slots_per_chunk(plan):
    """Store slots per chunk: as few as store the parked vectors in the chunk loop, at most
    SLOT_ROWS (slots past the vectors store the last ones again)."""
    bodies = max(1, loop_bodies(plan) * plan.chunk_period)
    return min(SLOT_ROWS, plan.chunk_rows - 1, -(-parked_vectors(plan) // bodies))


def slots_per_body(plan):
    return slots_per_chunk(plan) * plan.chunk_period


def parked_vectors(plan):
    return plan.park_rows * plan.panel_vectors


def park_registers(plan):
    """The registers the accumulators of a pass (``rows`` or ``last_rows``) leave: the first
    parked_vectors(plan) of them hold the parked vectors."""
    used = {reg for rows in {plan.rows, plan.last_rows}
            for row in accumulators(plan, plan.panel_vectors, rows) for reg in row}
    _, a_free, b_free = registers(plan)
    a_spare, b_spare = ([reg for reg in free if reg not in used] for free in (a_free, b_free))
    # the two files alternate, so that the conveyor's moves pair (shift)
    spare = [reg for pair in zip(a_spare, b_spare) for reg in pair]
    spare += a_spare[len(b_spare):] + b_spare[len(a_spare):]
    return spare[:parked_vectors(plan)] if len(spare) >= parked_vectors(plan) else None


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
    registers."""
    prepare_activation(a, plan.epilogue)
    rows = acc[len(acc) - plan.park_rows:]
    for dst, src in zip(park_registers(plan), [reg for row in rows for reg in row]):
        if not plan.c_halves:
            activate(a, dst, src, plan.epilogue.activation, r5)
        elif "a" in dst.writes:
            activate(a, dst, src, plan.epilogue.activation, r5, pack=HALF_LOW)
        else:
            activate(a, pack_register(plan), src, plan.epilogue.activation, r5, pack=HALF_LOW)
            a.nop()                 # (a regfile-A register is not readable the next instruction)
            a.mov(dst, pack_register(plan))


def prepare_drain(a, plan):
    """Before a draining pass's chunks: the VDW setup of its store slots. Only the stores
    write VDW setups, and a generic write setup (the staging row's, B's rows at the
    boundaries) leaves it as it was (panel_store.store_row), so the slots do not write it
    again."""
    a.mov(vw_setup, registers(plan)[0]["vdw_full"])


def drain_slot(a, plan, slot):
    """Store park register ``slot`` (of the body's slots) at the uniform stream's address."""
    regs = registers(plan)[0]
    a.read(vw_wait)
    a.mov(vw_setup, regs["stage_w"])
    a.mov(vpm, park_registers(plan)[slot])
    a.mov(vw_addr, uniform)


def shift(a, plan):
    """The conveyor: the parked registers move down by a body's slots, two per instruction
    where the register files allow (it runs in every chunk: one move per parked vector cost
    pw3 with 3 rows all parked a fifth of its issue time)."""
    regs, step = park_registers(plan), slots_per_body(plan)
    for ops in paired_moves(a, [(regs[i], regs[i + step]) for i in range(len(regs) - step)]):
        ops()


def drain_words(plan, c_addr, m0, bodies):
    """The uniform words of a pass's store slots: the addresses of the vectors the QPU whose
    block of the pass before starts at row ``m0`` parked, in the order the slots store them."""
    step, count, vectors = slots_per_body(plan), parked_vectors(plan), plan.panel_vectors
    first = m0 + plan.rows - plan.park_rows
    words = []
    for body in range(bodies):
        for j in range(step):
            index = min(step * body + j, count - step + j)
            row, vector = divmod(index, vectors)
            words.append(c_addr + ((first + row) * plan.n + vector * LANES) * plan.c_bytes)
    return words
