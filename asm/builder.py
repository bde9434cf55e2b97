"""Operands -> the fields of one instruction (``encoding.Instruction``).

This is where operand conflicts are found: read-port allocation (one regfile-A read, one
regfile-B read or small immediate), small-immediate encoding, write swap, pack/unpack/pm,
signals. Every problem raises ``AssemblerError`` saying what conflicts; the caller (the
Assembler) adds the source location.

Canonical encoding: the builder is a function of its operands, and fields an instruction does
not use always hold the same values (those of ``encoding.Instruction``'s defaults):

- an ALU half without an op: op 0 (nop), condition 0 (never), write address 39 (nop), muxes 0;
- a read port nobody uses: raddr 39 (nop) -- except in a branch, whose 5-bit raddr_a is 0 when
  no register is added (bit 45 doubles as "sf", fact sheet 5.4, so an odd value is not inert);
- no signal: sig 1 ("none"); no pack/unpack: pack 0, unpack 0, pm 0; sf 0;
- write swap: ws=0 unless the destinations (or a pm=0 pack) need ws=1;
- a register that can be read through either port (``uniform``, ``vpm``...) takes an address
  it already shares with another operand, else port A if free, else port B;
- unary ops (ftoi, itof, not, clz, mov) put their source in both muxes (fact sheet 5.8).
"""

import math
import numbers
import reprlib
import struct

import numpy as np

from . import isa
from .encoding import Instruction
from .errors import AssemblerError
from .registers import REGISTERS, Register, resolve

WORD_MASK = (1 << isa.WORD_BITS) - 1
ALU_NAMES = {"add": "ADD", "mul": "MUL"}
SIDE_NAMES = {"a": "regfile A", "b": "regfile B"}
# `mov` is an op of either ALU: exact for every 32-bit value (fact sheet section 1 op lists).
MOV_OPS = {"add": "or", "mul": "v8min"}

# Small immediates 0..47 by the 32-bit pattern an operand sees; 48..63 are rotations.
SMALL_IMM_BY_BITS = {isa.small_imm_operand_value(code): code for code, (kind, _) in
                     isa.SMALL_IMMEDIATES.items() if kind != "rotate"}
_SMALL_INTS = sorted(isa.SMALL_IMM_INT)
_SMALL_FLOATS = sorted(isa.SMALL_IMM_FLOAT)
SMALL_IMM_HELP = (f"small immediates are the ints {_SMALL_INTS[0]}..{_SMALL_INTS[-1]} and the floats "
                  f"{_SMALL_FLOATS[0]}..{_SMALL_FLOATS[-1]} (powers of two); load other values "
                  f"into a register with a.ldi")


def is_immediate(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def flag(name, value):
    """A yes/no argument: True or False (or the ints 0 and 1), never any other truthy value."""
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, numbers.Integral) and value in (0, 1)):
        return bool(value)
    raise AssemblerError(f"{name}={value!r}: give True or False")


def immediate_bits(value):
    """The 32-bit pattern of an int (signed or unsigned) or a float (as float32)."""
    if isinstance(value, numbers.Integral):
        value = int(value)
        if not -(1 << 31) <= value <= WORD_MASK:
            raise AssemblerError(f"{value} does not fit in 32 bits (ints are {-(1 << 31)}..{WORD_MASK}, "
                                 f"signed or unsigned)")
        return value & WORD_MASK
    value = float(value)
    if math.isnan(value):
        # Any exponent-255 pattern with a non-zero fraction is a NaN; none is "the" NaN.
        raise AssemblerError("NaN has many float32 bit patterns; give the one you mean as an int "
                             "(0x7fc00000 is the usual quiet NaN)")
    try:
        return struct.unpack("<I", struct.pack("<f", value))[0]
    except OverflowError:
        raise AssemblerError(f"{value!r} is out of float32 range") from None


def _not_a_register(value):
    """``value`` for a message about a non-register operand, with the fix for the usual slip."""
    if isinstance(value, str) and value in REGISTERS:
        return f"{value!r} (a string: the register is asm.{value}, or asm.lookup({value!r}))"
    return reprlib.repr(value)


def _check_source(src, op_name):
    if is_immediate(src):
        return src
    if not isinstance(src, Register):
        raise AssemblerError(f"{op_name}: source {_not_a_register(src)} is neither a register nor a number")
    if not src.readable:
        raise AssemblerError(f"{op_name}: {src!r} cannot be read (it is a write-only address)")
    return src


def check_destination(dst, what):
    if not isinstance(dst, Register):
        raise AssemblerError(f"{what}: destination {_not_a_register(dst)} is not a register")
    if dst.unpack_mode is not None:
        raise AssemblerError(f"{what}: unpack applies to reads; destination {dst!r} cannot be unpacked")
    if not dst.writable:
        hint = " (write r5quad or r5rep)" if dst.name == "r5" else ""
        raise AssemblerError(f"{what}: {dst!r} cannot be written{hint}")
    return dst


PACKS = {**isa.PACK_A, **isa.PACK_MUL}     # the names never collide ("nop" is 0 in both)


def pack_of(pack, alu=None):
    """``pack`` name -> (pm, code, name) for an op on ``alu`` (None: whichever ALU the pack
    belongs to); None for no pack."""
    if pack is None:
        return None
    code = resolve("pack mode", pack, PACKS)
    if pack == "nop":
        return None
    if pack in isa.PACK_A:
        return 0, code, pack
    if alu == "add":
        raise AssemblerError(f"pack {pack!r} is the MUL ALU's colour pack (pm=1); "
                             f"the {ALU_NAMES[alu]} op cannot use it")
    return 1, code, pack


ROTATION_CODES = {value: code for code, (kind, value) in isa.SMALL_IMMEDIATES.items() if kind == "rotate"}


def rotation_code(rotate):
    """``rotate`` (1..15 or r5; None or 0 for none) -> the small-immediate code that selects it."""
    if rotate is None:
        return None
    if isinstance(rotate, Register) and rotate.name == "r5" and rotate.unpack_mode is None:
        return ROTATION_CODES["r5"]
    if isinstance(rotate, numbers.Integral) and not isinstance(rotate, bool):
        if int(rotate) == 0:
            return None
        if int(rotate) in ROTATION_CODES:
            return ROTATION_CODES[int(rotate)]
    amounts = sorted(k for k in ROTATION_CODES if k != "r5")
    raise AssemblerError(f"rotate={rotate!r}: rotation is by {amounts[0]}..{amounts[-1]} elements or by r5")


class AluHalf:
    """One ALU's part of an instruction: op, destination, sources and modifiers."""

    __slots__ = ("alu", "op", "dst", "srcs", "cond", "sf", "pack", "rotate")

    def __init__(self, alu, op_name, dst, srcs, cond="always", sf=False, pack=None, rotate=None):
        ops = isa.ADD_OPS if alu == "add" else isa.MUL_OPS
        self.alu = alu
        if op_name == "mov":
            self.op, arity = ops[MOV_OPS[alu]], 1
        else:
            self.op = resolve(f"{ALU_NAMES[alu]} op", op_name, {k: v for k, v in ops.items() if k != "nop"})
            arity = self.op.arity
        if len(srcs) != arity:
            raise AssemblerError(f"{op_name} takes a destination and {arity} source(s), "
                                 f"got {len(srcs)} source(s)")
        self.dst = check_destination(dst, op_name)
        srcs = tuple(_check_source(s, op_name) for s in srcs)
        self.srcs = srcs * 2 if op_name == "mov" else srcs     # mov d, s = MOV_OPS op d, s, s
        self.cond = resolve("condition", cond, isa.CONDITIONS)
        self.sf = flag("sf", sf)
        self.pack = pack_of(pack, alu)
        self.rotate = rotation_code(rotate)
        if self.rotate is not None and alu != "mul":
            raise AssemblerError(f"rotate=: only the MUL ALU result can be rotated, "
                                 f"{op_name} is an ADD op")

    @property
    def mux_operands(self):
        """The two mux inputs: unary ops read their source through both."""
        return self.srcs * 2 if self.op.arity == 1 else self.srcs


class _ReadPorts:
    """The regfile A and B read addresses of one instruction (B may be the small immediate)."""

    def __init__(self):
        self.held = {"a": None, "b": None}     # side -> (address, unpack mode, operand text)
        self.imm = None                         # (code, operand text)

    def place(self, operand):
        """Allocate a port for an operand; return its mux."""
        if isinstance(operand, Register):
            if operand.mux is not None:
                if operand.unpack_mode is not None and operand.mux != isa.MUX_ACC["r4"]:
                    raise AssemblerError(f"{operand!r}: unpack applies only to regfile-A reads "
                                         f"(pm=0) and to r4 (pm=1)")
                return operand.mux
            return self._place_register(operand)
        return self._place_immediate(immediate_bits(operand), repr(operand))

    def place_rotation(self, code, text):
        self.imm = (code, text)

    def _place_immediate(self, bits, text):
        if self.held["b"] is not None:
            raise AssemblerError(f"small immediate {text} and regfile-B read {self.held['b'][2]} "
                                 f"both need raddr_b; move one into an accumulator first")
        if self.imm is None:
            if bits not in SMALL_IMM_BY_BITS:
                raise AssemblerError(f"{text} is not representable as a small immediate: {SMALL_IMM_HELP}")
            self.imm = (SMALL_IMM_BY_BITS[bits], text)
        elif isa.small_imm_operand_value(self.imm[0]) != bits:
            raise AssemblerError(f"two different small immediates {self.imm[1]} and {text}: "
                                 f"an instruction has one small-immediate field")
        return isa.MUX_B

    def _place_register(self, reg):
        sides = [side for side in ("a", "b") if side in reg.reads]
        if reg.unpack_mode is not None:
            if "a" not in sides:
                raise AssemblerError(f"{reg!r}: unpack applies only to regfile-A reads (pm=0) and to "
                                     f"r4 (pm=1); {reg.name} is read through regfile B")
            sides = ["a"]
        for side in sides:
            held = self.held[side]
            if held is not None and held[0] == reg.reads[side]:
                if held[1] != reg.unpack_mode:
                    raise AssemblerError(f"{held[2]} and {reg!r} read the same regfile-A address with "
                                         f"different unpack; the unpack applies to every use of it")
                return isa.MUX_A if side == "a" else isa.MUX_B
        for side in sides:
            if self.held[side] is None and not (side == "b" and self.imm is not None):
                self.held[side] = (reg.reads[side], reg.unpack_mode, repr(reg))
                return isa.MUX_A if side == "a" else isa.MUX_B
        if len(sides) == 2:
            raise AssemblerError(f"{reg!r} needs a read port but regfile A reads {self.held['a'][2]} "
                                 f"and regfile B {self._b_text()}")
        side = sides[0]
        if side == "b" and self.imm is not None:
            raise AssemblerError(f"small immediate {self.imm[1]} and regfile-B read {reg!r} both need "
                                 f"raddr_b; move one into an accumulator first")
        raise AssemblerError(f"two different {SIDE_NAMES[side]} reads {self.held[side][2]} and {reg!r}: "
                             f"an instruction reads one address per register file")

    def _b_text(self):
        return self.held["b"][2] if self.held["b"] is not None else f"holds small immediate {self.imm[1]}"

    @property
    def raddr_a(self):
        return self.held["a"][0] if self.held["a"] else isa.NOP_ADDR

    @property
    def raddr_b(self):
        if self.imm is not None:
            return self.imm[0]
        return self.held["b"][0] if self.held["b"] else isa.NOP_ADDR


def _placement_order(operand):
    """Immediates and one-sided registers first, so two-sided names take what is left."""
    if not isinstance(operand, Register):
        return 0
    return 2 if len(operand.reads) > 1 and operand.unpack_mode is None else 1


def _allocate_reads(ports, operands):
    """Place every operand (mux operands and bare reads); return the mux per operand index."""
    muxes = {}
    for index in sorted(range(len(operands)), key=lambda i: _placement_order(operands[i])):
        muxes[index] = ports.place(operands[index])
    return [muxes[i] for i in range(len(operands))]


def reads_fit(operands):
    """Whether one ALU instruction can read all of ``operands`` (registers and small
    immediates) through its read ports: build_alu's rule, for generators that choose which
    operations to pair in one instruction."""
    try:
        _allocate_reads(_ReadPorts(), list(operands))
    except AssemblerError:
        return False
    return True


def _unpack_fields(ports, operands):
    """(pm, unpack) required by the reads, or None if nothing is unpacked."""
    a_unpack = ports.held["a"][1] if ports.held["a"] else None
    r4_modes = {op.unpack_mode for op in operands
                if isinstance(op, Register) and op.mux == isa.MUX_ACC["r4"]}
    if len(r4_modes) > 1:
        raise AssemblerError("r4 is read with different unpack modes in one instruction "
                             f"({', '.join(repr(m or 'none') for m in sorted(r4_modes, key=str))}); "
                             f"the unpack applies to every r4 read")
    r4_unpack = next(iter(r4_modes), None)
    if a_unpack is not None and r4_unpack is not None:
        raise AssemblerError(f"pm conflict: unpack {a_unpack} of a regfile-A read needs pm=0 and "
                             f"unpack {r4_unpack} of r4 needs pm=1")
    if a_unpack is not None:
        return 0, isa.UNPACK[a_unpack]
    if r4_unpack is not None:
        return 1, isa.UNPACK[r4_unpack]
    return None


def _describe_write(alu, dst):
    sides = " or ".join(SIDE_NAMES[s] for s in ("a", "b") if s in dst.writes)
    return f"{ALU_NAMES[alu]} writes {dst!r} (through {sides})"


def choose_ws(writers, forced=None, pack=None):
    """Pick the write swap for ``writers`` ({"add"/"mul": Register or None}).

    ws=0 sends the ADD result to the A-side address and MUL to the B side (fact sheet section 1).
    ``pack`` is (alu, name) of a pm=0 pack, which packs whatever is written through side A.
    Returns (ws, waddr_add, waddr_mul).
    """
    if forced is not None and not (isinstance(forced, numbers.Integral) and forced in (0, 1)):
        raise AssemblerError(f"ws={forced!r}: write swap is 0 or 1")

    def route(ws):
        sides = {alu: isa.write_side(alu, ws) for alu in ("add", "mul")}
        if pack is not None and sides[pack[0]] != "a":
            return None
        addrs = {}
        for alu in ("add", "mul"):
            dst = writers.get(alu)
            if dst is not None and sides[alu] not in dst.writes:
                return None
            addrs[alu] = dst.writes[sides[alu]] if dst is not None else isa.NOP_ADDR
        return ws, addrs["add"], addrs["mul"]

    for ws in (0, 1) if forced is None else (forced,):
        routed = route(ws)
        if routed is not None:
            return routed
    parts = [_describe_write(alu, dst) for alu, dst in writers.items() if dst is not None]
    if pack is not None:
        parts.append(f"pack {pack[1]} (pm=0) packs the regfile-A write, so the "
                     f"{ALU_NAMES[pack[0]]} result must go through regfile A")
    if forced is not None and any(route(ws) for ws in (0, 1)):
        raise AssemblerError(f"ws={forced} is inconsistent with the writes: " + "; ".join(parts))
    raise AssemblerError("cannot route the writes: " + "; ".join(parts) +
                         "; each register file side takes one ALU result per instruction")


def _sig_code(sig):
    return resolve("signal", "none" if sig is None else sig, isa.USER_SIGNALS)


def build_alu(add=None, mul=None, sig=None, ws=None, reads=()):
    """An ALU instruction from its halves (``AluHalf`` or None), signal and bare reads."""
    ports = _ReadPorts()
    if mul is not None and mul.rotate is not None:
        ports.place_rotation(mul.rotate, f"rotate={isa.rotation_of(mul.rotate)}")
    halves = {"add": add, "mul": mul}
    mux_operands = [op for half in (add, mul) if half is not None for op in half.mux_operands]
    for read in reads:
        _check_source(read, "read")
    operands = mux_operands + list(reads)
    muxes = iter(_allocate_reads(ports, operands))

    fields = {}
    for alu, half in halves.items():
        if half is None:
            continue
        fields[f"op_{alu}"] = half.op.code
        fields[f"cond_{alu}"] = half.cond
        for mux_name in ("a", "b")[:len(half.mux_operands)]:
            fields[f"{alu}_{mux_name}"] = next(muxes)

    packs = [(alu, half.pack) for alu, half in halves.items() if half is not None and half.pack]
    if len(packs) > 1:
        raise AssemblerError(f"two packs in one instruction (ADD {packs[0][1][2]}, MUL {packs[1][1][2]}): "
                             f"there is one pack field")
    pack = packs[0] if packs else None
    unpack = _unpack_fields(ports, operands)
    if pack is not None and unpack is not None and pack[1][0] != unpack[0]:
        pack_unit = "regfile-A pack needs pm=0" if pack[1][0] == 0 else "MUL colour pack needs pm=1"
        unpack_unit = "regfile-A unpack needs pm=0" if unpack[0] == 0 else "r4 unpack needs pm=1"
        raise AssemblerError(f"pm conflict: pack {pack[1][2]} ({pack_unit}) and {isa.UNPACK_NAMES[unpack[1]]} "
                             f"unpack ({unpack_unit}) in one instruction")
    if pack is not None:
        fields["pm"], fields["pack"] = pack[1][0], pack[1][1]
    if unpack is not None:
        fields["pm"], fields["unpack"] = unpack

    if mul is not None and mul.sf and add is not None:
        raise AssemblerError(f"sf on the MUL op {mul.op.name}: with an ADD op in the instruction the "
                             f"flags come from the ADD result; put sf=True on {add.op.name}")
    fields["sf"] = int(any(half.sf for half in (add, mul) if half is not None))

    pm0_pack = (pack[0], pack[1][2]) if pack is not None and pack[1][0] == 0 else None
    fields["ws"], fields["waddr_add"], fields["waddr_mul"] = choose_ws(
        {alu: half.dst if half else None for alu, half in halves.items()}, ws, pm0_pack)

    sig_code = _sig_code(sig)
    if ports.imm is not None:
        if sig_code != isa.SIG_NONE:
            raise AssemblerError(f"signal {sig} cannot ride with {ports.imm[1]}: the small immediate "
                                 f"(and rotation) occupies the signal field")
        sig_code = isa.SIG_SMALL_IMM
    return Instruction(sig=sig_code, raddr_a=ports.raddr_a, raddr_b=ports.raddr_b, **fields)


# ---------------------------------------------------------------------------------------------
# Load immediate, semaphore, branch.
# ---------------------------------------------------------------------------------------------

def load_imm_value(value, mode=None):
    """(mode name, 32-bit immediate) for ``a.ldi``: a scalar, or 16 per-element values."""
    if is_immediate(value):
        if mode not in (None, "32"):
            raise AssemblerError(f"ldi mode {mode!r} is for a list of {isa.SIMD_WIDTH} per-element values")
        return "32", immediate_bits(value)
    try:
        values = [int(v) if isinstance(v, numbers.Integral) and not isinstance(v, bool) else v
                  for v in value]
    except TypeError:
        raise AssemblerError(f"ldi value {value!r} is neither a number nor {isa.SIMD_WIDTH} "
                             f"per-element values") from None
    if len(values) != isa.SIMD_WIDTH or not all(isinstance(v, int) for v in values):
        raise AssemblerError(f"a per-element ldi takes {isa.SIMD_WIDTH} ints, got {value!r}")
    if mode is None:
        mode = "signed" if min(values) < 0 else "unsigned"
    allowed = resolve("per-element ldi mode", mode, isa.PER_ELEMENT_RANGES)
    bad = [v for v in values if v not in allowed]
    if bad:
        raise AssemblerError(f"per-element ldi ({mode}) takes values {allowed.start}..{allowed.stop - 1}; "
                             f"got {bad[0]}")
    return mode, isa.per_element_immediate(values)


def _destinations(dsts):
    dsts = tuple(dsts) if isinstance(dsts, (tuple, list)) else (dsts,)
    if len(dsts) > 2:
        raise AssemblerError(f"ldi writes at most two destinations (one per ALU), got {len(dsts)}")
    return tuple(check_destination(d, "ldi") for d in dsts)


def build_load_imm(dsts, value, mode=None, cond="always", sf=False, pack=None, ws=None):
    """A load immediate. The first destination is the ADD write, the second the MUL write; a
    pm=0 pack applies to the first, a colour pack (pm=1) to the second."""
    mode_name, immediate = load_imm_value(value, mode)
    return _load_imm_format(_destinations(dsts), isa.LOAD_IMM_MODES[mode_name], immediate,
                            cond, sf, pack, ws)


def build_semaphore(number, acquire, dsts=(), cond="always", sf=False, pack=None, ws=None):
    """A semaphore acquire or release. Apart from that it is a 32-bit load immediate (fact sheet
    section 1): its destinations, if any, receive the immediate, i.e. the semaphore word."""
    if isinstance(number, bool) or not isinstance(number, numbers.Integral) \
            or not 0 <= number < isa.NUM_SEMAPHORES:
        raise AssemblerError(f"semaphore number {number!r} out of range 0..{isa.NUM_SEMAPHORES - 1}")
    immediate = (isa.field_put(int(number), isa.SEMAPHORE_FIELDS["number"])
                 | isa.field_put(int(bool(acquire)), isa.SEMAPHORE_FIELDS["acquire"]))
    return _load_imm_format(_destinations(dsts), isa.LOAD_IMM_MODES["semaphore"], immediate,
                            cond, sf, pack, ws)


def _load_imm_format(dsts, mode, immediate, cond, sf, pack, ws):
    writers = dict(zip(("add", "mul"), dsts))
    cond_code = resolve("condition", cond, isa.CONDITIONS)
    if not writers and cond_code != isa.CONDITIONS["always"]:
        raise AssemblerError(f"cond={cond!r} without a destination: the condition is that of the "
                             f"writes, and this instruction writes nothing")
    fields = {f"cond_{alu}": cond_code for alu in writers}
    pm0_pack = None
    packing = pack_of(pack)
    if packing is not None:
        pm, code, name = packing
        alu = "add" if pm == 0 else "mul"
        if alu not in writers:
            raise AssemblerError(f"ldi pack {name}: the colour pack (pm=1) applies to the second "
                                 f"destination, and there is none")
        fields["pm"], fields["pack"] = pm, code
        pm0_pack = (alu, name) if pm == 0 else None
    fields["ws"], fields["waddr_add"], fields["waddr_mul"] = choose_ws(writers, ws, pm0_pack)
    return Instruction(sig=isa.SIG_LOAD_IMM, ldi_mode=mode, immediate=immediate, sf=int(flag("sf", sf)),
                       **fields)


def branch_register(reg):
    """The raddr_a of a register-added branch: only ra0..ra31 (fact sheet section 1)."""
    if isinstance(reg, Register) and set(reg.reads) == {"a"} and reg.unpack_mode is None \
            and reg.reads["a"] < isa.REGFILE_SIZE:
        return reg.reads["a"]
    raise AssemblerError(f"branch reg={reg!r}: the added register must be one of ra0..ra{isa.REGFILE_SIZE - 1}")


def build_branch(cond="always", immediate=0, relative=True, reg=None, link=None, ws=None, sf=False):
    """A branch. ``immediate`` is the raw field (relative: byte offset from branch + 4
    instructions, signed; absolute: the address). ``sf`` sets the flags from the link value
    when taken; its bit (45) is bit 0 of raddr_a, so with ``reg`` it is the register's parity
    (facts §5.4): sf with an even register is an error, an odd register sets the flags anyway."""
    cond_br = resolve("branch condition", cond, isa.BRANCH_CONDITIONS)
    low, high = (-(1 << 31), (1 << 31) - 1) if relative else (0, WORD_MASK)
    if not isinstance(immediate, numbers.Integral) or not low <= immediate <= high:
        what = "relative offset" if relative else "absolute address"
        raise AssemblerError(f"branch target out of range: {what} {immediate!r} is not in {low}..{high}")
    writers = {"add": check_destination(link, "branch link") if link is not None else None}
    ws_value, waddr_add, waddr_mul = choose_ws(writers, ws)
    sf = flag("sf", sf)
    raddr_a = branch_register(reg) if reg is not None else int(sf)
    if sf and not raddr_a & 1:
        raise AssemblerError(f"branch sf with reg={reg!r}: the sf bit is bit 0 of the added "
                             f"register's number, so only an odd ra (ra1, ra3...) can set flags")
    return Instruction(sig=isa.SIG_BRANCH, cond_br=cond_br, rel=int(bool(relative)),
                       reg=int(reg is not None), raddr_a=raddr_a,
                       ws=ws_value, waddr_add=waddr_add, waddr_mul=waddr_mul,
                       immediate=int(immediate) & WORD_MASK)
