"""Lowering for the C core: an instruction word becomes a compact record of small integers.

The plan builder (``plan.py``) stays the one place that decides what an instruction means and
which words are unsupported: ``lower_word`` first compiles the word's Python plan (raising the
same UnsupportedInstruction), then records the decisions the C core needs as numbers. The codes
of the enums below reach C through the generated header (``cheader.py``), so the two sides
cannot disagree on them.
"""

from asm import isa
from asm.encoding import branch_target, decode

from . import alu, pack
from .plan import BRANCH_REGISTER_ELEMENT, _FULL_ROTATION_MUXES, _condition, _unpack_kind, \
    _write_sides, compile_word

ENUMS = {
    "KIND": ("alu", "load_imm", "branch"),
    "READ": ("none", "regfile", "uniform", "element_number", "qpu_number", "nop", "vpm",
             "vr_busy", "vw_busy", "vr_wait", "vw_wait", "mutex_acquire"),
    "DEST": ("none", "rf_a", "rf_b", "acc", "r5quad", "r5rep", "tmu_noswap", "host_int",
             "unif_addr", "unif_addr_rel", "vpm", "vr_setup", "vw_setup", "vr_addr", "vw_addr",
             "mutex_release", "sfu", "tmu"),
    "PACKER": ("none", "a_float", "a_int", "mul"),
    "SIGNAL": ("none", "ldtmu0", "ldtmu1", "thrend"),
    "CARRY": ("none",) + tuple(alu.CARRY),
    "SFU": tuple(isa.SFU_WRITE.values()),
    "BLOCKED": ("none", "semaphore", "mutex"),     # what a blocked QPU waits on (csrc/sync.c)
}
TMU_COORDS = "strb"
# Condition codes in a record: -1 for "no write / no flag update", else the isa code.
NO_CONDITION = -1
ROTATE_R5 = 16

_OPERAND = ("src", "unpack", "float")
RECORD_FIELDS = (
    ("kind", "acquire", "read_a", "raddr_a", "read_b", "raddr_b",
     "add_op", "add_sat", "add_arity")
    + tuple(f"add_x_{f}" for f in _OPERAND) + tuple(f"add_y_{f}" for f in _OPERAND)
    + ("mul_op", "mul_sat") + tuple(f"mul_x_{f}" for f in _OPERAND)
    + tuple(f"mul_y_{f}" for f in _OPERAND)
    + ("rotation", "rot_x_full", "rot_y_full", "imm",
       "add_dest", "add_index", "add_cond", "add_packer", "add_pack",
       "mul_dest", "mul_index", "mul_cond", "mul_packer", "mul_pack", "mul_uses_last",
       "flags_cond", "flags_from_add", "carry", "signal",
       "semaphore", "sem_acquire", "cond_br", "base", "link", "branch_reg", "branch_flags")
    + tuple(f"value{i}" for i in range(isa.SIMD_WIDTH)))
RECORD_WORDS = len(RECORD_FIELDS)
_INDEX = {name: i for i, name in enumerate(RECORD_FIELDS)}
_CODE = {prefix: {name: i for i, name in enumerate(names)} for prefix, names in ENUMS.items()}
_IO_DESTS = frozenset(ENUMS["DEST"][6:16])
_SIDES = ("a", "b")


def _cond_code(code):
    return NO_CONDITION if _condition(code) is None else code


def _read_kind(side, addr, used):
    if addr < isa.REGFILE_SIZE:
        return ("regfile" if used else "none"), addr
    name = isa.READ[_SIDES[side]].get(addr)
    # Unused reads without a side effect read nothing; a used address with no read meaning has
    # already been rejected by the plan (compile_word), so what is left reads nothing too.
    if name not in _CODE["READ"] or (name in ("element_number", "qpu_number", "nop")
                                     and not used):
        return "none", addr
    return name, addr


def _operand(record, prefix, ins, mux, kind, small_imm):
    """``kind``: how a regfile-A unpack converts (plan._unpack_kind)."""
    unpack_code = 0
    as_float = kind == "float"
    if mux == isa.MUX_ACC["r4"] and ins.pm:
        unpack_code, as_float = ins.unpack, True
    elif mux == isa.MUX_A and not ins.pm:
        unpack_code = ins.unpack
    src = mux if not (mux == isa.MUX_B and small_imm) else isa.MUX_B + 1
    record[_INDEX[prefix + "src"]] = src
    record[_INDEX[prefix + "unpack"]] = unpack_code
    record[_INDEX[prefix + "float"]] = int(as_float)


def _destination(record, alu_name, side, addr, cond, packer, pack_code):
    prefix = alu_name + "_"
    if cond is None:
        return
    name = isa.WRITE[_SIDES[side]].get(addr)
    index = 0
    if addr < isa.REGFILE_SIZE:
        dest, index = ("rf_a", "rf_b")[side], addr
    elif name == "nop":
        return
    elif addr in isa.ACCUMULATOR_WRITE:
        dest, index = "acc", isa.ACCUMULATOR_WRITE[addr]
    elif name in ("r5quad", "r5rep"):
        dest = name
    elif name in _IO_DESTS:
        dest = name
    elif addr in isa.SFU_WRITE:
        dest, index = "sfu", _CODE["SFU"][isa.SFU_WRITE[addr]]
    else:
        unit, coord = isa.TMU_WRITE[addr]
        dest, index = "tmu", unit * len(TMU_COORDS) + TMU_COORDS.index(coord)
    record[_INDEX[prefix + "dest"]] = _CODE["DEST"][dest]
    record[_INDEX[prefix + "index"]] = index
    record[_INDEX[prefix + "cond"]] = cond
    record[_INDEX[prefix + "packer"]] = _CODE["PACKER"][packer]
    record[_INDEX[prefix + "pack"]] = pack_code


def _writes(record, ins, add_kind, mul_kind, add_cond, mul_cond):
    """Destinations with their packers, as plan._packers and plan._writes decide them."""
    add_side, mul_side = _write_sides(ins.ws)
    add_packer = mul_packer = "none"
    if ins.pm:
        if isa.PACK_MUL_NAMES[ins.pack] != "nop":
            mul_packer = "mul"
    elif not pack.pack_a_saturates_op(ins.pack) and isa.PACK_A_NAMES[ins.pack] != "nop":
        if add_side == 0 and ins.waddr_add < isa.REGFILE_SIZE:
            add_packer = "a_" + add_kind
        if mul_side == 0 and ins.waddr_mul < isa.REGFILE_SIZE:
            mul_packer = "a_" + mul_kind
    _destination(record, "add", add_side, ins.waddr_add, add_cond, add_packer, ins.pack)
    _destination(record, "mul", mul_side, ins.waddr_mul, mul_cond, mul_packer, ins.pack)
    saturating = None
    if not ins.pm and pack.pack_a_saturates_op(ins.pack):
        if add_side == 0 and ins.waddr_add < isa.REGFILE_SIZE:
            saturating = "add"
        elif mul_side == 0 and ins.waddr_mul < isa.REGFILE_SIZE:
            saturating = "mul"
    return saturating


def _new_record():
    record = [0] * RECORD_WORDS
    for name in ("add_op", "mul_op", "add_cond", "mul_cond", "flags_cond", "rotation",
                 "semaphore", "branch_reg"):
        record[_INDEX[name]] = -1
    return record


def lower_word(word, pc):
    """The record of instruction ``word`` at ``pc`` (a list of RECORD_WORDS ints)."""
    compile_word(word)              # the Python plan decides what is unsupported
    ins = decode(word)
    record = _new_record()
    if ins.sig == isa.SIG_BRANCH:
        _lower_branch(record, ins, pc)
    elif ins.sig == isa.SIG_LOAD_IMM:
        _lower_load_imm(record, ins)
    else:
        _lower_alu(record, ins)
    return record


def _lower_alu(record, ins):
    r = _INDEX
    record[r["kind"]] = _CODE["KIND"]["alu"]
    add_op, mul_op = isa.ADD_OPS_BY_CODE[ins.op_add], isa.MUL_OPS_BY_CODE[ins.op_mul]
    add_kind = isa.RESULT_KIND.get(add_op.name, add_op.kind)
    mul_kind = isa.RESULT_KIND.get(mul_op.name, mul_op.kind)
    small_imm = ins.sig == isa.SIG_SMALL_IMM
    add_cond, mul_cond = _cond_code(ins.cond_add), _cond_code(ins.cond_mul)
    saturating = _writes(record, ins, add_kind, mul_kind,
                         add_cond if add_cond != NO_CONDITION else None,
                         mul_cond if mul_cond != NO_CONDITION else None)
    if add_op.name == "nop":
        record[r["add_dest"]] = _CODE["DEST"]["none"]
    has_add_write = record[r["add_dest"]] != _CODE["DEST"]["none"]
    has_mul_write = record[r["mul_dest"]] != _CODE["DEST"]["none"]
    flags_cond = NO_CONDITION
    if ins.sf:
        flags_cond = add_cond if add_op.name != "nop" else \
            mul_cond if mul_op.name != "nop" else NO_CONDITION
    flags_from_add = add_op.name != "nop"
    compute_add = add_op.name != "nop" and (
        has_add_write or (flags_cond != NO_CONDITION and flags_from_add))
    unpack_kind = _unpack_kind(ins, add_op, mul_op)
    muxes = []
    if compute_add:
        record[r["add_op"]] = ins.op_add
        record[r["add_sat"]] = int(saturating == "add" and add_op.name in alu.SATURATING)
        record[r["add_arity"]] = add_op.arity
        _operand(record, "add_x_", ins, ins.add_a, unpack_kind, small_imm)
        _operand(record, "add_y_", ins, ins.add_a if add_op.arity == 1 else ins.add_b,
                 unpack_kind, small_imm)
        muxes += [ins.add_a] if add_op.arity == 1 else [ins.add_a, ins.add_b]
    if mul_op.name != "nop":
        record[r["mul_op"]] = ins.op_mul
        record[r["mul_sat"]] = int(saturating == "mul" and mul_op.name in alu.SATURATING)
        _operand(record, "mul_x_", ins, ins.mul_a, unpack_kind, small_imm)
        _operand(record, "mul_y_", ins, ins.mul_b, unpack_kind, small_imm)
        rotation = isa.rotation_of(ins.raddr_b) if small_imm else None
        if rotation is not None:
            record[r["rotation"]] = ROTATE_R5 if rotation == "r5" else rotation
            record[r["rot_x_full"]] = int(ins.mul_a in _FULL_ROTATION_MUXES)
            record[r["rot_y_full"]] = int(ins.mul_b in _FULL_ROTATION_MUXES)
        muxes += [ins.mul_a, ins.mul_b]
    elif has_mul_write:
        record[r["mul_uses_last"]] = 1
    if small_imm:
        record[r["imm"]] = isa.small_imm_operand_value(ins.raddr_b)
    kind_a, _ = _read_kind(0, ins.raddr_a, isa.MUX_A in muxes)
    record[r["read_a"]], record[r["raddr_a"]] = _CODE["READ"][kind_a], ins.raddr_a
    if not small_imm:
        kind_b, _ = _read_kind(1, ins.raddr_b, isa.MUX_B in muxes)
        record[r["read_b"]], record[r["raddr_b"]] = _CODE["READ"][kind_b], ins.raddr_b
    record[r["acquire"]] = int(isa.MUTEX_ADDR in (ins.raddr_a, None if small_imm else ins.raddr_b))
    record[r["flags_cond"]] = flags_cond
    record[r["flags_from_add"]] = int(flags_from_add)
    if flags_cond != NO_CONDITION:
        op = add_op.name if flags_from_add else mul_op.name
        record[r["carry"]] = _CODE["CARRY"].get(op, 0)
    signal = ins.sig
    if signal in isa.TMU_LOAD_SIGNALS:
        record[r["signal"]] = _CODE["SIGNAL"][isa.SIGNAL_NAMES[signal]]
    elif signal == isa.SIGNALS["thrend"]:
        record[r["signal"]] = _CODE["SIGNAL"]["thrend"]


def _lower_load_imm(record, ins):
    r = _INDEX
    record[r["kind"]] = _CODE["KIND"]["load_imm"]
    mode = isa.LOAD_IMM_MODE_NAMES[ins.ldi_mode]
    values = isa.per_element_values(ins.immediate, mode) if mode in ("signed", "unsigned") \
        else [ins.immediate] * isa.SIMD_WIDTH
    for i, v in enumerate(values):
        record[r[f"value{i}"]] = v & 0xFFFFFFFF
    if mode == "semaphore":
        record[r["semaphore"]] = isa.field_get(ins.immediate, isa.SEMAPHORE_FIELDS["number"])
        record[r["sem_acquire"]] = isa.field_get(ins.immediate, isa.SEMAPHORE_FIELDS["acquire"])
    add_cond, mul_cond = _cond_code(ins.cond_add), _cond_code(ins.cond_mul)
    _writes(record, ins, "int", "int", add_cond if add_cond != NO_CONDITION else None,
            mul_cond if mul_cond != NO_CONDITION else None)
    record[r["flags_cond"]] = add_cond if ins.sf else NO_CONDITION


def _lower_branch(record, ins, pc):
    r = _INDEX
    record[r["kind"]] = _CODE["KIND"]["branch"]
    record[r["cond_br"]] = ins.cond_br
    record[r["base"]] = branch_target(ins, pc) if ins.rel else ins.immediate
    record[r["link"]] = (pc + isa.BRANCH_RETURN_OFFSET) & 0xFFFFFFFF
    record[r["branch_reg"]] = ins.raddr_a if ins.reg else -1
    add_side, mul_side = _write_sides(ins.ws)
    always = isa.CONDITIONS["always"]
    _destination(record, "add", add_side, ins.waddr_add, always, "none", 0)
    _destination(record, "mul", mul_side, ins.waddr_mul, always, "none", 0)
    record[r["branch_flags"]] = ins.raddr_a & 1


assert BRANCH_REGISTER_ELEMENT < isa.SIMD_WIDTH
