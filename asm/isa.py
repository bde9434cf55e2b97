"""The VideoCore IV QPU instruction set: every number, written once.

This module is the single source of truth for the encoding. The encoder, decoder, disassembler,
text parser, hazard checker and the emulator (in ``vc4nn``) read opcode numbers, register
addresses, signal codes, pack modes and bit fields from here and nowhere else.

Facts come from ``shared/docs/vc4-facts.md`` (section numbers below refer to it). Where the
sources disagree, the choice made is written next to the table entry and pinned by a test.
"""

import struct
from types import MappingProxyType


def _frozen(mapping):
    return MappingProxyType(dict(mapping))


def _inverse(mapping):
    return _frozen({v: k for k, v in mapping.items()})


# ---------------------------------------------------------------------------------------------
# Instruction formats (fact sheet section 1). A field is (lsb, width). The format is chosen by
# the signal field: 14 = load immediate (and semaphore), 15 = branch, anything else = ALU.
# ---------------------------------------------------------------------------------------------

# Bits 59:32 below the signal are laid out alike in the ALU and the load-immediate formats: the
# write half (pack, conditions, set flags, write swap, write addresses).
_WRITE_HALF_FIELDS = {
    "pm": (56, 1),
    "pack": (52, 4),
    "cond_add": (49, 3),
    "cond_mul": (46, 3),
    "sf": (45, 1),
    "ws": (44, 1),
    "waddr_add": (38, 6),
    "waddr_mul": (32, 6),
}

ALU_FIELDS = _frozen({
    "sig": (60, 4),
    "unpack": (57, 3),
    **_WRITE_HALF_FIELDS,
    "op_mul": (29, 3),
    "op_add": (24, 5),
    "raddr_a": (18, 6),
    "raddr_b": (12, 6),
    "add_a": (9, 3),
    "add_b": (6, 3),
    "mul_a": (3, 3),
    "mul_b": (0, 3),
})

LOAD_IMM_FIELDS = _frozen({
    "sig": (60, 4),
    "ldi_mode": (57, 3),
    **_WRITE_HALF_FIELDS,
    "immediate": (0, 32),
})

# Bits 59:56 of a branch are unused; they are kept as a field so that a word carrying junk there
# still decodes and re-encodes exactly (the disassembler shows such words raw, see asm/disasm.py).
# Bit 45 is raddr_a bit 0 and, per the errata (fact sheet 5.4), also acts as "sf".
BRANCH_FIELDS = _frozen({
    "sig": (60, 4),
    "branch_unused": (56, 4),
    "cond_br": (52, 4),
    "rel": (51, 1),
    "reg": (50, 1),
    "raddr_a": (45, 5),
    "ws": (44, 1),
    "waddr_add": (38, 6),
    "waddr_mul": (32, 6),
    "immediate": (0, 32),
})

# ---------------------------------------------------------------------------------------------
# Signals (bits 63:60).
# ---------------------------------------------------------------------------------------------

SIGNALS = _frozen({
    "breakpoint": 0,
    "none": 1,
    "thread_switch": 2,
    "thrend": 3,            # program end
    "wait_scoreboard": 4,
    "unlock_scoreboard": 5,
    "last_thread_switch": 6,
    "load_coverage": 7,
    "load_color": 8,
    "load_color_end": 9,
    "ldtmu0": 10,
    "ldtmu1": 11,
    "load_alpha_mask": 12,
    "small_imm": 13,
    "load_imm": 14,
    "branch": 15,
})
SIGNAL_NAMES = _inverse(SIGNALS)

SIG_SMALL_IMM = SIGNALS["small_imm"]
SIG_LOAD_IMM = SIGNALS["load_imm"]
SIG_BRANCH = SIGNALS["branch"]
SIG_NONE = SIGNALS["none"]

# Signals a program may put on an ALU instruction by name (the three format-selecting codes are
# chosen by the assembler from the instruction's form, never written by hand).
USER_SIGNALS = _frozen({k: v for k, v in SIGNALS.items()
                        if k not in ("small_imm", "load_imm", "branch")})
# Signals that write r4 at the end of their instruction.
R4_WRITING_SIGNALS = frozenset({SIGNALS["ldtmu0"], SIGNALS["ldtmu1"], SIGNALS["load_color"],
                                SIGNALS["load_color_end"], SIGNALS["load_alpha_mask"]})
# Signals that use the tile buffer (a peripheral, fact sheet section 2 "one peripheral").
TLB_SIGNALS = frozenset({SIGNALS["load_coverage"], SIGNALS["load_color"],
                         SIGNALS["load_color_end"], SIGNALS["load_alpha_mask"]})
TMU_LOAD_SIGNALS = _frozen({SIGNALS["ldtmu0"]: 0, SIGNALS["ldtmu1"]: 1})
THREAD_END_SIGNALS = frozenset({SIGNALS["thrend"], SIGNALS["load_color_end"]})
THREAD_SWITCH_SIGNALS = frozenset({SIGNALS["thread_switch"], SIGNALS["last_thread_switch"]})

# ---------------------------------------------------------------------------------------------
# Input multiplexers (3 bits each): 0-5 accumulators r0-r5, 6 regfile A, 7 regfile B / small imm.
# ---------------------------------------------------------------------------------------------

MUX_ACC = _frozen({"r0": 0, "r1": 1, "r2": 2, "r3": 3, "r4": 4, "r5": 5})
MUX_A = 6
MUX_B = 7
MUX_NAMES = _frozen({0: "r0", 1: "r1", 2: "r2", 3: "r3", 4: "r4", 5: "r5", 6: "a", 7: "b"})

# ---------------------------------------------------------------------------------------------
# ALU operations. Each entry: code, operand kind ("float" or "int", which decides how unpack and
# pack convert), and the number of operands. Unary ops read one source; toolchains put the same
# source in both muxes because which mux the hardware reads is disputed (fact sheet 5.8). We do
# the same, and the emulator reads mux a (see vc4nn/emulator/alu.py).
# ---------------------------------------------------------------------------------------------


class Op:
    __slots__ = ("name", "code", "kind", "arity")

    def __init__(self, name, code, kind, arity):
        self.name, self.code, self.kind, self.arity = name, code, kind, arity

    def __repr__(self):
        return f"Op({self.name!r}, {self.code}, {self.kind!r}, {self.arity})"


def _ops(rows):
    return _frozen({name: Op(name, code, kind, arity) for name, code, kind, arity in rows})


ADD_OPS = _ops([
    ("nop", 0, "int", 0),
    ("fadd", 1, "float", 2),
    ("fsub", 2, "float", 2),
    ("fmin", 3, "float", 2),
    ("fmax", 4, "float", 2),
    ("fminabs", 5, "float", 2),
    ("fmaxabs", 6, "float", 2),
    ("ftoi", 7, "float", 1),
    ("itof", 8, "int", 1),
    ("add", 12, "int", 2),
    ("sub", 13, "int", 2),
    ("shr", 14, "int", 2),
    ("asr", 15, "int", 2),
    ("ror", 16, "int", 2),
    ("shl", 17, "int", 2),
    ("min", 18, "int", 2),
    ("max", 19, "int", 2),
    ("and", 20, "int", 2),
    ("or", 21, "int", 2),
    ("xor", 22, "int", 2),
    ("not", 23, "int", 1),
    ("clz", 24, "int", 1),
    ("v8adds", 30, "int", 2),
    ("v8subs", 31, "int", 2),
])
ADD_OPS_BY_CODE = _frozen({op.code: op for op in ADD_OPS.values()})
ADD_OP_RESERVED = frozenset(range(32)) - set(ADD_OPS_BY_CODE)   # 9-11, 25-29

MUL_OPS = _ops([
    ("nop", 0, "int", 0),
    ("fmul", 1, "float", 2),
    ("mul24", 2, "int", 2),
    ("v8muld", 3, "int", 2),
    ("v8min", 4, "int", 2),
    ("v8max", 5, "int", 2),
    ("v8adds", 6, "int", 2),
    ("v8subs", 7, "int", 2),
])
MUL_OPS_BY_CODE = _frozen({op.code: op for op in MUL_OPS.values()})

# ftoi reads a float and writes an int; itof the reverse. A pack follows its op's result kind;
# the regfile-A unpack converts as for a float if any op reading the A port has float inputs.
RESULT_KIND = _frozen({"ftoi": "int", "itof": "float"})

# ---------------------------------------------------------------------------------------------
# Conditions.
# ---------------------------------------------------------------------------------------------

CONDITIONS = _frozen({"never": 0, "always": 1, "zs": 2, "zc": 3, "ns": 4, "nc": 5, "cs": 6, "cc": 7})
CONDITION_NAMES = _inverse(CONDITIONS)

BRANCH_CONDITIONS = _frozen({
    "all_zs": 0, "all_zc": 1, "any_zs": 2, "any_zc": 3,
    "all_ns": 4, "all_nc": 5, "any_ns": 6, "any_nc": 7,
    "all_cs": 8, "all_cc": 9, "any_cs": 10, "any_cc": 11,
    "always": 15,
})
BRANCH_CONDITION_NAMES = _inverse(BRANCH_CONDITIONS)
BRANCH_CONDITION_RESERVED = frozenset({12, 13, 14})

# Relative branch targets count from the instruction after the three delay slots.
BRANCH_DELAY_SLOTS = 3
INSTRUCTION_BYTES = 8
# The target of a relative branch and its link (return) address both count from here, in bytes
# after the branch: the instruction after the delay slots.
BRANCH_RETURN_OFFSET = (BRANCH_DELAY_SLOTS + 1) * INSTRUCTION_BYTES

# ---------------------------------------------------------------------------------------------
# Pipeline rules (fact sheet section 2), as distances in instructions: "latency n" means the
# dependent instruction may come n instructions after the one that starts it, not sooner. The
# static checker (asm/hazards.py) reads these; docs/hardware-choices.md "Hazard checker".
# ---------------------------------------------------------------------------------------------

# r4 is readable 3 instructions after an SFU write, with no other r4 writer in between.
SFU_RESULT_LATENCY = 3
UNIF_ADDR_LATENCY = 3           # after a uniforms-address write, the next 2 must not read uniforms
THREAD_SWITCH_DELAY_SLOTS = 2
THREAD_END_DELAY_SLOTS = 2
# Branch spacing (fact sheet 5.5): Linux rejects a branch anywhere in another branch's delay
# slots, vc4asm allows one in the last slot. We follow Linux: the stricter rule costs one nop.
BRANCH_MIN_DISTANCE = BRANCH_DELAY_SLOTS + 1
# tmu_noswap (fact sheet 5.6): the guide's example writes the TMU 3 instructions later, the
# validators in effect require 4. We follow the validators, which accept every program we emit.
TMU_NOSWAP_LATENCY = 4
THREAD_END_RESERVED_REGFILE = 14    # regfile A/B address the last 3 instructions must not touch

# ---------------------------------------------------------------------------------------------
# Register addresses (6 bits). 0-31 are the physical regfile locations ra0-31 / rb0-31.
# Reads and writes, A side and B side, each have their own map (fact sheet section 1).
# ---------------------------------------------------------------------------------------------

REGFILE_SIZE = 32
NOP_ADDR = 39

READ_A = _frozen({
    32: "uniform", 35: "varying", 38: "element_number", 39: "nop", 41: "x_pixel_coord",
    42: "ms_flags", 48: "vpm", 49: "vr_busy", 50: "vr_wait", 51: "mutex_acquire",
})
READ_B = _frozen({
    32: "uniform", 35: "varying", 38: "qpu_number", 39: "nop", 41: "y_pixel_coord",
    42: "rev_flag", 48: "vpm", 49: "vw_busy", 50: "vw_wait", 51: "mutex_acquire",
})

_WRITE_COMMON = {
    32: "r0", 33: "r1", 34: "r2", 35: "r3", 36: "tmu_noswap", 38: "host_int", 39: "nop",
    43: "tlb_stencil", 44: "tlb_z", 45: "tlb_color_ms", 46: "tlb_color_all", 47: "tlb_alpha_mask",
    48: "vpm", 51: "mutex_release",
    52: "sfu_recip", 53: "sfu_recipsqrt", 54: "sfu_exp", 55: "sfu_log",
    56: "tmu0_s", 57: "tmu0_t", 58: "tmu0_r", 59: "tmu0_b",
    60: "tmu1_s", 61: "tmu1_t", 62: "tmu1_r", 63: "tmu1_b",
}
# Address 37 writes r5 on both sides but differently (fact sheet 5.1, we follow the measured
# errata): from the A side each quad gets its own element 0 ("quad replicate"), from the B side
# all 16 elements get element 0.
WRITE_A = _frozen({**_WRITE_COMMON, 37: "r5quad", 40: "unif_addr", 41: "quad_x", 42: "ms_flags",
                   49: "vr_setup", 50: "vr_addr"})
WRITE_B = _frozen({**_WRITE_COMMON, 37: "r5rep", 40: "unif_addr_rel", 41: "quad_y",
                   42: "rev_flag", 49: "vw_setup", 50: "vw_addr"})

READ = _frozen({"a": READ_A, "b": READ_B})
WRITE = _frozen({"a": WRITE_A, "b": WRITE_B})
READ_BY_NAME = _frozen({side: _inverse(table) for side, table in READ.items()})
WRITE_BY_NAME = _frozen({side: _inverse(table) for side, table in WRITE.items()})


def write_side(alu, ws):
    """The regfile side ("a" or "b") that ``alu`` ("add" or "mul") writes: ws=0 sends the ADD
    result to the A-side address and the MUL result to the B side, ws=1 swaps them."""
    return "a" if (alu == "add") != bool(ws) else "b"


ACCUMULATOR_WRITE = _frozen({32: 0, 33: 1, 34: 2, 35: 3})   # waddr -> r0..r3
R5_WRITE = 37
SFU_WRITE = _frozen({52: "recip", 53: "recipsqrt", 54: "exp", 55: "log"})
TMU_WRITE_BASE = _frozen({0: 56, 1: 60})                    # unit -> address of tmuN_s
TMU_WRITE = _frozen({addr: (unit, coord) for unit, base in TMU_WRITE_BASE.items()
                     for addr, coord in zip(range(base, base + 4), "strb")})
TLB_WRITE = frozenset(range(43, 48))
MUTEX_ADDR = READ_BY_NAME["a"]["mutex_acquire"]
TMU_NOSWAP_ADDR = WRITE_BY_NAME["a"]["tmu_noswap"]
UNIF_ADDR_WRITE = WRITE_BY_NAME["a"]["unif_addr"]

# ---------------------------------------------------------------------------------------------
# Pack and unpack (fact sheet section 1).
# ---------------------------------------------------------------------------------------------

# pm = 0: regfile-A pack, applied to whichever ALU writes regfile A.
PACK_A = _frozen({
    "nop": 0, "16a": 1, "16b": 2, "8888": 3, "8a": 4, "8b": 5, "8c": 6, "8d": 7,
    "32s": 8, "16as": 9, "16bs": 10, "8888s": 11, "8as": 12, "8bs": 13, "8cs": 14, "8ds": 15,
})
PACK_A_NAMES = _inverse(PACK_A)
# pm = 1: MUL ALU "colour" pack, turning a float in [0, 1] into a byte. Other codes are reserved.
# The names carry a "c" so that a pack name alone says which of the two pack units is meant.
PACK_MUL = _frozen({"nop": 0, "8888c": 3, "8ac": 4, "8bc": 5, "8cc": 6, "8dc": 7})
PACK_MUL_NAMES = _inverse(PACK_MUL)

# pm = 0: applies to regfile-A reads; pm = 1: applies to r4 reads.
UNPACK = _frozen({"nop": 0, "16a": 1, "16b": 2, "8d_rep": 3, "8a": 4, "8b": 5, "8c": 6, "8d": 7})
UNPACK_NAMES = _inverse(UNPACK)

# ---------------------------------------------------------------------------------------------
# Small immediates (raddr_b when sig = 13). Codes 48-63 rotate the MUL output; per the errata
# (fact sheet section 1) they also supply -16..-1 to any operand using mux 7.
# ---------------------------------------------------------------------------------------------


def _small_immediates():
    table = {}
    for code in range(16):
        table[code] = ("int", code)
    for code in range(16, 32):
        table[code] = ("int", code - 32)
    for code in range(32, 40):
        table[code] = ("float", float(2 ** (code - 32)))
    for code in range(40, 48):
        table[code] = ("float", float(2.0 ** (code - 48)))
    table[48] = ("rotate", "r5")
    for code in range(49, 64):
        table[code] = ("rotate", code - 48)
    return _frozen(table)


SMALL_IMMEDIATES = _small_immediates()
SMALL_IMM_INT = _frozen({v: c for c, (k, v) in SMALL_IMMEDIATES.items() if k == "int"})
SMALL_IMM_FLOAT = _frozen({v: c for c, (k, v) in SMALL_IMMEDIATES.items() if k == "float"})
SMALL_IMM_ROTATE_BASE = 48          # code = 48 + n for a rotation by n (1..15)


def rotation_of(small_imm_code):
    """Rotation amount selected by a small-immediate code: None, "r5" or 1..15."""
    kind, value = SMALL_IMMEDIATES[small_imm_code]
    return value if kind == "rotate" else None


def small_imm_operand_value(code):
    """The 32-bit value a mux-7 operand sees for a small-immediate code (errata for 48-63)."""
    kind, value = SMALL_IMMEDIATES[code]
    if kind == "int":
        return value & 0xFFFFFFFF
    if kind == "float":
        return struct.unpack("<I", struct.pack("<f", value))[0]
    return (code - 64) & 0xFFFFFFFF     # 48..63 -> -16..-1


# ---------------------------------------------------------------------------------------------
# Load immediate modes (bits 59:57 when sig = 14) and the semaphore instruction.
# ---------------------------------------------------------------------------------------------

LOAD_IMM_MODES = _frozen({"32": 0, "signed": 1, "unsigned": 3, "semaphore": 4})
LOAD_IMM_MODE_NAMES = _inverse(LOAD_IMM_MODES)
# A per-element load gives element i the 2-bit value (imm bit PER_ELEMENT_HIGH_BIT + i, imm bit i),
# read as signed or unsigned by the mode.
PER_ELEMENT_HIGH_BIT = 16
PER_ELEMENT_RANGES = _frozen({"signed": range(-2, 2), "unsigned": range(0, 4)})


def per_element_immediate(values):
    """The immediate of a per-element load of ``values`` (16 ints in one of PER_ELEMENT_RANGES)."""
    return sum(((v >> 1) & 1) << (PER_ELEMENT_HIGH_BIT + i) | (v & 1) << i for i, v in enumerate(values))


def per_element_values(immediate, mode):
    """The 16 values a per-element load immediate gives in ``mode`` ("signed" or "unsigned")."""
    span = PER_ELEMENT_RANGES[mode]
    values = [((immediate >> (PER_ELEMENT_HIGH_BIT + i)) & 1) << 1 | ((immediate >> i) & 1)
              for i in range(SIMD_WIDTH)]
    return [(v - span.start) % len(span) + span.start for v in values]

SEMAPHORE_FIELDS = _frozen({"number": (0, 4), "acquire": (4, 1)})
NUM_SEMAPHORES = 16
SEMAPHORE_MAX = 15

# ---------------------------------------------------------------------------------------------
# VPM and DMA setup words (fact sheet section 3). Each: field -> (lsb, width), plus the fixed
# "id" bits that select the kind of setup.
# ---------------------------------------------------------------------------------------------

VPM_GENERIC_READ = _frozen({
    "id": (30, 2), "num": (20, 4), "stride": (12, 6), "horizontal": (11, 1), "laned": (10, 1),
    "size": (8, 2), "addr": (0, 8),
})
VPM_GENERIC_WRITE = _frozen({
    "id": (30, 2), "stride": (12, 6), "horizontal": (11, 1), "laned": (10, 1), "size": (8, 2),
    "addr": (0, 8),
})
VPM_GENERIC_ID = 0
VPM_SIZES = _frozen({8: 0, 16: 1, 32: 2})

VDW_SETUP = _frozen({
    "id": (30, 2), "units": (23, 7), "depth": (16, 7), "laned": (15, 1), "horizontal": (14, 1),
    "vpmbase": (3, 11), "modew": (0, 3),
})
VDW_SETUP_ID = 2
# DMA MODEW (VDW bits 2:0, VDR bits 30:28): element width -> base code; 16-bit adds the half
# offset (0..1), 8-bit the byte offset (0..3). VDR never uses code 1: id bits 1001 would make the
# word an extended-pitch setup (fact sheet section 3).
DMA_MODEW = _frozen({32: 0, 16: 2, 8: 4})
# VDR MPITCH n (1..15) means a memory pitch of VDR_MPITCH_BYTES << n bytes; 0 selects MPITCHB.
VDR_MPITCH_BYTES = 8
# The stride is 16 bits wide per the errata (fact sheet 5.14) rather than the guide's 13.
VDW_STRIDE = _frozen({"id": (30, 2), "blockmode": (16, 1), "stride": (0, 16)})
VDW_STRIDE_ID = 3

VDR_SETUP = _frozen({
    "id": (31, 1), "modew": (28, 3), "mpitch": (24, 4), "rowlen": (20, 4), "nrows": (16, 4),
    "vpitch": (12, 4), "vertical": (11, 1), "addrxy": (0, 11),
})
VDR_SETUP_ID = 1
# MPITCHB is 14 bits (13:0), not the guide's 13 (facts §5.18, docs/hardware-choices.md "VPM and
# DMA setup fields"): py-videocore's SGEMM loads rows 12288 bytes apart through it correctly on a
# Pi; qmkl reports rows 16 KB apart and more going wrong. Bits 27:14 must be 0.
VDR_EXTENDED = _frozen({"id": (28, 4), "mpitchb": (0, 14)})
VDR_EXTENDED_ID = 0b1001

VPM_ROWS = 64                  # rows of 16 words reachable by generic QPU access (4 KB)
VPM_DMA_ROWS = 128             # DMA base addresses have a 7-bit Y
QPUS_PER_SLICE = 4
NUM_QPUS = 12
NUM_SLICES = NUM_QPUS // QPUS_PER_SLICE
SIMD_WIDTH = 16
WORD_BITS = 32                 # a register element, a uniform, a VPM word


def unused_bits(table):
    """The bits of a setup word that no field of ``table`` covers."""
    used = 0
    for lsb, width in table.values():
        used |= ((1 << width) - 1) << lsb
    return ~used & ((1 << WORD_BITS) - 1)


def field_get(word, field):
    lsb, width = field
    return (word >> lsb) & ((1 << width) - 1)


def field_put(value, field):
    lsb, width = field
    if not 0 <= value < (1 << width):
        raise ValueError(f"value {value} does not fit in {width} bits")
    return value << lsb
