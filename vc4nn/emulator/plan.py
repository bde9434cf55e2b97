"""Predecoding: an instruction word at a code address becomes a plan, ``run(qpu) -> bool``.

A plan is built once per (address, word) and holds everything decoding decided: which reads
happen, which functions select the operands, the ALU functions, the writes with their
conditions and packs, the flag update and the signal. Running it returns False only when the
instruction blocks (semaphore, mutex), and then it has changed nothing.

Order within an instruction: blocking check, port reads (A then B), both ALUs, ADD write, MUL
write, flags, signal. Conditions see the flags from before the instruction; r4 reads see r4
from before it (an ldtmu or SFU result lands at its end).

Choices where the fact sheet leaves room are listed in docs/hardware-choices.md "Emulator core".
"""

import numpy as np

from asm import isa
from asm.encoding import branch_target, decode

from . import alu, pack
from .alu import U32, lanes
from .errors import UnsupportedInstruction
from .qpu import ELEMENT_NUMBER

ROTATE_FULL = [np.roll(np.arange(isa.SIMD_WIDTH), n) for n in range(isa.SIMD_WIDTH)]
# Rotation of an operand that is not r0-r3: within each quad by n & 3 (facts §5.12, errata).
ROTATE_QUAD = [(np.arange(isa.SIMD_WIDTH) & ~3) | ((np.arange(isa.SIMD_WIDTH) - n) & 3)
               for n in range(4)]
QUAD_LEADER = np.arange(isa.SIMD_WIDTH) & ~3
ELEMENT_ZERO = np.zeros(isa.SIMD_WIDTH, dtype=np.intp)
_FULL_ROTATION_MUXES = frozenset(isa.MUX_ACC[r] for r in ("r0", "r1", "r2", "r3"))
_R4, _R5 = isa.MUX_ACC["r4"], isa.MUX_ACC["r5"]
_SIDES = ("a", "b")
_PURE_READS = frozenset({"element_number", "qpu_number", "nop"})
# Signals with no effect on a compute program: threads are not switched (one thread per QPU)
# and the scoreboard orders fragment shading only.
_NO_EFFECT_SIGNALS = frozenset(isa.SIGNALS[s] for s in (
    "none", "thread_switch", "last_thread_switch", "wait_scoreboard", "unlock_scoreboard",
    "small_imm"))


def compile_word(word):
    """The plan of instruction ``word``. UnsupportedInstruction if it uses something with no
    defined meaning for a compute program. Plans do not depend on where the word sits (a branch
    reads its own address from the QPU's pc), so one plan serves every copy of a program."""
    ins = decode(word)
    if ins.sig == isa.SIG_BRANCH:
        return _branch_plan(ins)
    if ins.sig == isa.SIG_LOAD_IMM:
        return _load_imm_plan(ins)
    return _alu_plan(ins)


def _unsupported(message):
    raise UnsupportedInstruction(message)


# --- conditions ---------------------------------------------------------------------------
# A write condition is None (never), True (always) or (flag, value it must have).

def _condition(code):
    name = isa.CONDITION_NAMES[code]
    if name == "never":
        return None
    if name == "always":
        return True
    return name[0], name[1] == "s"


def _select(q, cond, new, old):
    flag = getattr(q, cond[0])
    return np.where(flag, new, old) if cond[1] else np.where(flag, old, new)


# --- reads --------------------------------------------------------------------------------

def _io_reader(side, addr):
    """Reader of a non-regfile read address, or None if the address has no read meaning."""
    name = isa.READ[_SIDES[side]].get(addr)
    if name == "uniform":
        return lambda q: q.read_uniform()
    if name == "element_number":
        return lambda q: ELEMENT_NUMBER
    if name == "qpu_number":
        return lambda q: q.qpu_number
    if name == "nop":       # ra39/rb39: the last value this port delivered (facts §5.17)
        return lambda q: q.port_last[side]
    if name == "vpm":
        return lambda q: q.vpm_io("read", "vpm")
    if name in ("vr_busy", "vw_busy", "vr_wait", "vw_wait"):
        return lambda q, method="read_" + name: q.vpm_io(method, "dma")
    if name == "mutex_acquire":     # acquired by the plan's blocking check
        return lambda q: alu.ZERO
    return None


def _port_reader(side, addr, used):
    """Reader of read port ``side`` for address ``addr``; None when nothing is read. Reads
    with a side effect (uniform, vpm, waits, mutex) happen whether or not an operand uses them."""
    if addr < isa.REGFILE_SIZE:
        return (lambda q: q.regfile_read(side, addr)) if used else None
    name = isa.READ[_SIDES[side]].get(addr, f"address {addr}")
    reader = _io_reader(side, addr)
    if name == "varying" or (reader is None and used):
        _unsupported(f"reads {name} on read port {_SIDES[side].upper()}, which has no meaning "
                     f"for a compute program")
    if reader is None or (name in _PURE_READS and not used):
        return None
    return reader


# --- operands -----------------------------------------------------------------------------

def _operand(ins, mux, unpack_kind, small_imm):
    """Function (q, port_a, port_b) -> operand vector for ``mux``; a regfile-A unpack converts
    as for ``unpack_kind``."""
    if mux == _R4:
        unpack = pack.unpack(ins.unpack, "float") if ins.pm else None
        if unpack is not None:
            return lambda q, pa, pb: unpack(q.read_r4())
        return lambda q, pa, pb: q.read_r4()
    if mux < isa.MUX_A:
        return lambda q, pa, pb: q.acc[mux]
    if mux == isa.MUX_A:
        unpack = None if ins.pm else pack.unpack(ins.unpack, unpack_kind)
        if unpack is not None:
            return lambda q, pa, pb: unpack(pa)
        return lambda q, pa, pb: pa
    if small_imm is not None:
        return lambda q, pa, pb: small_imm
    return lambda q, pa, pb: pb


def _rotated(operand, mux, amount):
    """Operand rotated for the MUL ALU: full 16-lane rotation for r0-r3, quad-local otherwise."""
    full = mux in _FULL_ROTATION_MUXES
    if amount == "r5":
        if full:
            return lambda q, pa, pb: operand(q, pa, pb)[ROTATE_FULL[int(q.acc[_R5][0]) & 15]]
        return lambda q, pa, pb: operand(q, pa, pb)[ROTATE_QUAD[int(q.acc[_R5][0]) & 3]]
    index = ROTATE_FULL[amount] if full else ROTATE_QUAD[amount & 3]
    return lambda q, pa, pb: operand(q, pa, pb)[index]


# --- writes -------------------------------------------------------------------------------

def _register_write(get_file, get_written, i, packer, cond):
    """Write to a register list slot: pack against the old value, then the condition."""
    if packer is None and cond is True:         # the common case, without the general steps
        if get_written is None:
            def write_plain(q, value):
                get_file(q)[i] = value
        else:
            def write_plain(q, value):
                get_file(q)[i] = value
                get_written(q)[i] = q.count
        return write_plain

    def write(q, value):
        regs = get_file(q)
        old = regs[i]
        if packer is not None:
            value = packer(value, old)
        regs[i] = value if cond is True else _select(q, cond, value, old)
        if get_written is not None:
            get_written(q)[i] = q.count
    return write


def _io_actions():
    actions = {
        "tmu_noswap": lambda q, v: q.write_tmu_noswap(v),
        "host_int": lambda q, v: q.host_interrupt(v),
        "unif_addr": lambda q, v: q.set_uniforms_address(v, relative=False),
        "unif_addr_rel": lambda q, v: q.set_uniforms_address(v, relative=True),
        "vpm": lambda q, v: q.vpm_io("write", "vpm", v),
        "vr_setup": lambda q, v: q.vpm_io("write_vr_setup", "vpm", v),
        "vw_setup": lambda q, v: q.vpm_io("write_vw_setup", "vpm", v),
        "vr_addr": lambda q, v: q.vpm_io("write_vr_addr", "dma", v),
        "vw_addr": lambda q, v: q.vpm_io("write_vw_addr", "dma", v),
        "mutex_release": lambda q, v: q.mutex_release(v),
    }
    for addr, function in isa.SFU_WRITE.items():
        actions[isa.WRITE_A[addr]] = lambda q, v, f=function: q.write_sfu(f, v)
    for addr, (unit, coord) in isa.TMU_WRITE.items():
        actions[isa.WRITE_A[addr]] = lambda q, v, u=unit, c=coord: q.write_tmu(u, c, v)
    return actions


IO_ACTIONS = _io_actions()


def _destination(side, addr, cond, packer):
    """Function (q, value) writing an ALU result to ``addr`` on ``side``; None for no write."""
    if cond is None:
        return None
    name = isa.WRITE[_SIDES[side]].get(addr)
    if addr < isa.REGFILE_SIZE:
        return _register_write(lambda q: q.rf[side], lambda q: q.rf_written[side], addr,
                               packer, cond)
    if name == "nop":
        return None
    if addr in isa.ACCUMULATOR_WRITE:
        return _register_write(lambda q: q.acc, None, isa.ACCUMULATOR_WRITE[addr], packer, cond)
    if name in ("r5quad", "r5rep"):
        # facts §5.1: from the A side each quad gets its own element 0, from the B side every
        # element gets element 0.
        spread = QUAD_LEADER if name == "r5quad" else ELEMENT_ZERO
        inner = _register_write(lambda q: q.acc, None, _R5, packer, cond)
        return lambda q, value: inner(q, value[spread])
    if name not in IO_ACTIONS:
        _unsupported(f"writes {name or f'address {addr}'} on the {_SIDES[side].upper()} side, "
                     f"which has no meaning for a compute program")
    # Peripherals fire whatever the per-element condition (facts §5.7, read for every I/O
    # register); only "never" suppresses the write.
    action = IO_ACTIONS[name]
    if packer is None:
        return action
    return lambda q, value: action(q, packer(value, alu.ZERO))


def _write_sides(ws):
    """(side index of the ADD write, of the MUL write): 0 = A, 1 = B."""
    return tuple(_SIDES.index(isa.write_side(alu, ws)) for alu in ("add", "mul"))


def _packers(ins, add_kind, mul_kind):
    """(ADD packer, MUL packer, ALU whose op saturates for pack 32s or None)."""
    add_side, mul_side = _write_sides(ins.ws)
    if ins.pm:
        if ins.pack and ins.pack not in isa.PACK_MUL_NAMES:
            _unsupported(f"MUL pack code {ins.pack} (pm = 1) is reserved")
        return None, pack.pack_mul(ins.pack), None
    # pm = 0: the regfile-A pack applies to whichever ALU writes a regfile-A location.
    add_packs = add_side == 0 and ins.waddr_add < isa.REGFILE_SIZE
    mul_packs = mul_side == 0 and ins.waddr_mul < isa.REGFILE_SIZE
    saturating = None
    if pack.pack_a_saturates_op(ins.pack):
        saturating = "add" if add_packs else "mul" if mul_packs else None
    return ((pack.pack_a(ins.pack, add_kind) if add_packs else None),
            (pack.pack_a(ins.pack, mul_kind) if mul_packs else None), saturating)


def _writes(ins, add_kind, mul_kind):
    add_packer, mul_packer, saturating = _packers(ins, add_kind, mul_kind)
    add_side, mul_side = _write_sides(ins.ws)
    add_cond, mul_cond = _condition(ins.cond_add), _condition(ins.cond_mul)
    return (_destination(add_side, ins.waddr_add, add_cond, add_packer),
            _destination(mul_side, ins.waddr_mul, mul_cond, mul_packer), saturating)


# --- flags --------------------------------------------------------------------------------

def _flag_update(cond):
    """Function (q, result, carry) setting Z, N, C where ``cond`` holds; None if nowhere.
    ``carry`` is a bool vector or None for clear."""
    if cond is None:
        return None
    if cond is True:
        def update(q, result, carry):
            q.z, q.n = alu.flags_of(result)
            q.c = alu.NO_CARRY if carry is None else carry
        return update

    def update_where(q, result, carry):
        holds = getattr(q, cond[0])
        if not cond[1]:
            holds = ~holds
        z, n = alu.flags_of(result)
        q.z, q.n = np.where(holds, z, q.z), np.where(holds, n, q.n)
        q.c = np.where(holds, alu.NO_CARRY if carry is None else carry, q.c)
    return update_where


# --- signals ------------------------------------------------------------------------------

def _signal(sig):
    if sig in _NO_EFFECT_SIGNALS:
        return None
    if sig in isa.TMU_LOAD_SIGNALS:
        unit = isa.TMU_LOAD_SIGNALS[sig]
        return lambda q: q.load_tmu(unit)
    if sig == isa.SIGNALS["thrend"]:
        return lambda q: q.schedule(isa.THREAD_END_DELAY_SLOTS, None)
    _unsupported(f"signal {isa.SIGNAL_NAMES[sig]} has no meaning for a compute program "
                 f"(tile buffer or debugger)")


# --- ALU instructions ---------------------------------------------------------------------

def _unpack_kind(ins, add_op, mul_op):
    """How the regfile-A unpack (pm = 0) converts: the guide's "float16 -> float32 if any ALU
    consuming data executes float instruction, else signed int16 -> signed int32", one
    conversion for every use of the A read port in the instruction."""
    readers = [(add_op, (ins.add_a,) if add_op.arity == 1 else (ins.add_a, ins.add_b)),
               (mul_op, (ins.mul_a, ins.mul_b))]
    floats = any(op.name != "nop" and op.kind == "float" and isa.MUX_A in muxes
                 for op, muxes in readers)
    return "float" if floats else "int"


def _alu_plan(ins):
    if ins.op_add in isa.ADD_OP_RESERVED:
        _unsupported(f"ADD op code {ins.op_add} is reserved")
    add_op, mul_op = isa.ADD_OPS_BY_CODE[ins.op_add], isa.MUL_OPS_BY_CODE[ins.op_mul]
    add_kind = isa.RESULT_KIND.get(add_op.name, add_op.kind)
    mul_kind = isa.RESULT_KIND.get(mul_op.name, mul_op.kind)
    small_imm = ins.sig == isa.SIG_SMALL_IMM
    imm_value = lanes(isa.small_imm_operand_value(ins.raddr_b)) if small_imm else None
    rotation = isa.rotation_of(ins.raddr_b) if small_imm else None

    add_write, mul_write, saturating = _writes(ins, add_kind, mul_kind)
    add_cond, mul_cond = _condition(ins.cond_add), _condition(ins.cond_mul)
    if add_op.name == "nop":
        add_write = None          # a nop writes nothing, whatever its write address
    # The ADD ALU sets the flags if its op is not nop, else the MUL ALU, and only where that
    # ALU's condition holds (facts §5.2, errata).
    flags = None
    if ins.sf:
        flags = _flag_update(add_cond if add_op.name != "nop" else
                             mul_cond if mul_op.name != "nop" else None)
    flags_from_add = add_op.name != "nop"
    compute_add = add_op.name != "nop" and (add_write is not None or (flags and flags_from_add))

    unpack_kind = _unpack_kind(ins, add_op, mul_op)
    muxes = []
    add_fn = mul_fn = add_in = mul_in = None
    if compute_add:
        add_fn = (alu.SATURATING.get(add_op.name) if saturating == "add" else None) \
            or alu.ADD[add_op.name]
        x = _operand(ins, ins.add_a, unpack_kind, imm_value)
        y = x if add_op.arity == 1 else _operand(ins, ins.add_b, unpack_kind, imm_value)
        add_in = (x, y)
        muxes += [ins.add_a] if add_op.arity == 1 else [ins.add_a, ins.add_b]
    if mul_op.name != "nop":
        mul_fn = (alu.SATURATING.get(mul_op.name) if saturating == "mul" else None) \
            or alu.MUL[mul_op.name]
        x = _operand(ins, ins.mul_a, unpack_kind, imm_value)
        y = _operand(ins, ins.mul_b, unpack_kind, imm_value)
        if rotation is not None:
            x, y = _rotated(x, ins.mul_a, rotation), _rotated(y, ins.mul_b, rotation)
        mul_in = (x, y)
        muxes += [ins.mul_a, ins.mul_b]

    read_a = _port_reader(0, ins.raddr_a, isa.MUX_A in muxes)
    read_b = None if small_imm else _port_reader(1, ins.raddr_b, isa.MUX_B in muxes)
    acquire = isa.MUTEX_ADDR in (ins.raddr_a, None if small_imm else ins.raddr_b)
    signal = _signal(ins.sig)

    flags_op = add_op.name if flags_from_add else mul_op.name
    carry_of = alu.CARRY.get(flags_op) if flags is not None else None

    def run(q):
        if acquire and not q.try_mutex_acquire():
            return False
        pa = pb = None
        if read_a is not None:
            pa = q.port_last[0] = read_a(q)
        if read_b is not None:
            pb = q.port_last[1] = read_b(q)
        if add_fn is not None:
            add_x, add_y = add_in[0](q, pa, pb), add_in[1](q, pa, pb)
            add_result = add_fn(add_x, add_y)
        if mul_fn is not None:
            mul_x, mul_y = mul_in[0](q, pa, pb), mul_in[1](q, pa, pb)
            mul_result = q.last_mul = mul_fn(mul_x, mul_y)
        elif mul_write is not None:
            # MUL op nop with a destination writes the MUL ALU's previous result (facts §5.17).
            mul_result = q.last_mul
        if add_write is not None:
            add_write(q, add_result)
        if mul_write is not None:
            mul_write(q, mul_result)
        if flags is not None:
            if flags_from_add:
                flags(q, add_result, carry_of and carry_of(add_x, add_y, add_result))
            else:
                flags(q, mul_result, carry_of and carry_of(mul_x, mul_y, mul_result))
        if signal is not None:
            signal(q)
        return True
    return run


# --- load immediate and semaphore ---------------------------------------------------------

def _load_imm_plan(ins):
    mode = isa.LOAD_IMM_MODE_NAMES.get(ins.ldi_mode)
    if mode is None:
        _unsupported(f"load immediate mode {ins.ldi_mode} is reserved")
    value = np.array(isa.per_element_values(ins.immediate, mode), dtype=np.int64).astype(U32) \
        if mode in ("signed", "unsigned") else lanes(ins.immediate)
    semaphore = None
    if mode == "semaphore":
        semaphore = (isa.field_get(ins.immediate, isa.SEMAPHORE_FIELDS["number"]),
                     bool(isa.field_get(ins.immediate, isa.SEMAPHORE_FIELDS["acquire"])))
    # Both ALUs produce the immediate; flags come from the ADD side (op_add is not nop in
    # spirit) with a clear carry.
    add_write, mul_write, _ = _writes(ins, "int", "int")
    flags = _flag_update(_condition(ins.cond_add)) if ins.sf else None

    def run(q):
        if semaphore is not None and not q.try_semaphore(*semaphore):
            return False
        if add_write is not None:
            add_write(q, value)
        if mul_write is not None:
            mul_write(q, value)
        if flags is not None:
            flags(q, value, None)
        return True
    return run


# --- branches -----------------------------------------------------------------------------

_BRANCH_TESTS = {
    "all_zs": lambda q: q.z.all(), "all_zc": lambda q: not q.z.any(),
    "any_zs": lambda q: q.z.any(), "any_zc": lambda q: not q.z.all(),
    "all_ns": lambda q: q.n.all(), "all_nc": lambda q: not q.n.any(),
    "any_ns": lambda q: q.n.any(), "any_nc": lambda q: not q.n.all(),
    "all_cs": lambda q: q.c.all(), "all_cc": lambda q: not q.c.any(),
    "any_cs": lambda q: q.c.any(), "any_cc": lambda q: not q.c.all(),
    "always": lambda q: True,
}
# The register added to a branch target is read from element 15 (facts §5.3: the errata and
# VC4C, measured, against the guide's element 0).
BRANCH_REGISTER_ELEMENT = 15


def _branch_plan(ins):
    name = isa.BRANCH_CONDITION_NAMES.get(ins.cond_br)
    if name is None:
        _unsupported(f"branch condition {ins.cond_br} is reserved")
    taken = _BRANCH_TESTS[name]
    relative = bool(ins.rel)
    immediate = ins.immediate
    register = ins.raddr_a if ins.reg else None
    add_side, mul_side = _write_sides(ins.ws)
    links = [w for w in (_destination(add_side, ins.waddr_add, True, None),
                         _destination(mul_side, ins.waddr_mul, True, None)) if w is not None]
    # Bit 45 is both raddr_a bit 0 and "sf" (facts §5.4): an odd register number sets the
    # flags from the link value; link and flags only when the branch is taken.
    flags = _flag_update(True) if ins.raddr_a & 1 else None

    def run(q):
        if not taken(q):
            return True
        pc = q.pc
        target = branch_target(ins, pc) if relative else immediate
        if register is not None:
            target += int(q.regfile_read(0, register)[BRANCH_REGISTER_ELEMENT])
        q.schedule(isa.BRANCH_DELAY_SLOTS, target & 0xFFFFFFFF)
        if links or flags is not None:
            link_value = lanes((pc + isa.BRANCH_RETURN_OFFSET) & 0xFFFFFFFF)
            for write in links:
                write(q, link_value)
            if flags is not None:
                flags(q, link_value, None)
        return True
    return run
