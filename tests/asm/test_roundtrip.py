"""disassemble -> parse -> encode gives the same word.

1. Any 64-bit word round-trips exactly (non-canonical words through the ``.quad`` fallback).
2. Words built from random *legal* field combinations -- the canonical forms listed in
   docs/asm-syntax.md, drawn from isa.py's tables -- disassemble to an instruction, not to
   ``.quad``, and round-trip.
3. Coverage: every ADD op, MUL op, signal, condition, pack and unpack mode, small immediate,
   rotation, load-immediate mode, semaphore, branch condition and register address appears in a
   canonical round trip.
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asm import disasm, encoding, isa, parser
from asm.encoding import Instruction

NOP = isa.NOP_ADDR
NEVER, ALWAYS = isa.CONDITIONS["never"], isa.CONDITIONS["always"]
READABLE = {side: sorted(set(range(isa.REGFILE_SIZE)) | set(isa.READ[side])) for side in "ab"}
ANY_WADDR = st.integers(0, 63)
ANY_COND = st.sampled_from(sorted(isa.CONDITIONS.values()))
SIGNALS = sorted(v for k, v in isa.USER_SIGNALS.items())
PACK_MUL_CODES = sorted(c for c in isa.PACK_MUL.values() if c)
SETTINGS = settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def round_trip(word, address=0):
    line = disasm.disassemble_word(word, address)
    assert parser.assemble_line(str(line), address) == word, str(line)
    return line


def assert_canonical(word, address=0):
    line = round_trip(word, address)
    assert line.canonical, f"{word:#018x}: {line}"
    return line


# --- 1 --------------------------------------------------------------------------------------


@SETTINGS
@given(st.integers(0, (1 << 64) - 1), st.integers(0, 1 << 20).map(lambda i: i * 8))
def test_every_word_round_trips(word, address):
    round_trip(word, address)


@SETTINGS
@given(st.sampled_from([isa.SIG_SMALL_IMM, isa.SIG_LOAD_IMM, isa.SIG_BRANCH] + SIGNALS),
       st.integers(0, (1 << 60) - 1))
def test_every_word_round_trips_in_each_format(sig, rest):
    round_trip(sig << 60 | rest)


# --- 2: strategies for canonical words, one rule of docs/asm-syntax.md at a time ---------------


def _ops(table):
    return st.sampled_from(sorted(table.values(), key=lambda op: op.code))


@st.composite
def alu_words(draw):
    add_op, mul_op = draw(_ops(isa.ADD_OPS)), draw(_ops(isa.MUL_OPS))
    fields = dict(op_add=add_op.code, op_mul=mul_op.code)
    small_imm = draw(st.booleans())
    operand_muxes = st.integers(0, 7)
    used = []
    for unit, op in (("add", add_op), ("mul", mul_op)):
        if op.arity == 0:
            continue                        # nop half: cond never, waddr 39, muxes 0
        mux_a = draw(operand_muxes)
        mux_b = mux_a if op.arity == 1 else draw(operand_muxes)
        used += [mux_a, mux_b]
        fields.update({f"{unit}_a": mux_a, f"{unit}_b": mux_b, f"cond_{unit}": draw(ANY_COND),
                       f"waddr_{unit}": draw(ANY_WADDR)})
    # read ports: a used mux needs a readable address; an unused port is nop or a bare read
    raddr_a = draw(st.sampled_from(READABLE["a"])) if isa.MUX_A in used \
        else draw(st.sampled_from([NOP] + READABLE["a"]))
    rotation = small_imm and mul_op.arity and draw(st.booleans())
    if small_imm and (isa.MUX_B in used or rotation):
        codes = range(isa.SMALL_IMM_ROTATE_BASE, 64) if rotation else range(isa.SMALL_IMM_ROTATE_BASE)
        raddr_b, sig = draw(st.sampled_from(codes)), isa.SIG_SMALL_IMM
    else:
        raddr_b = draw(st.sampled_from(READABLE["b"])) if isa.MUX_B in used \
            else draw(st.sampled_from([NOP] + READABLE["b"]))
        sig = draw(st.sampled_from(SIGNALS))
    fields.update(sig=sig, raddr_a=raddr_a, raddr_b=raddr_b)
    has_op = bool(add_op.arity or mul_op.arity)
    fields["ws"] = draw(st.integers(0, 1)) if has_op else 0
    fields["sf"] = draw(st.integers(0, 1)) if has_op else 0
    # pack: pm=0 needs an op on the ALU that writes side A; pm=1 a MUL op and code 3..7
    a_writer = (add_op, mul_op)[fields["ws"]]
    packs = [(None, 0)]
    if a_writer.arity:
        packs += [(0, code) for code in range(1, 16)]
    if mul_op.arity:
        packs += [(1, code) for code in PACK_MUL_CODES]
    pm, pack = draw(st.sampled_from(packs))
    # unpack: pm=0 needs a regfile-A read, pm=1 an r4 operand; one pm for both
    unpacks = [(None, 0)]
    if pm != 1 and raddr_a != NOP:
        unpacks += [(0, code) for code in range(1, 8)]
    if pm != 0 and isa.MUX_ACC["r4"] in used:
        unpacks += [(1, code) for code in range(1, 8)]
    unpack_pm, unpack = draw(st.sampled_from(unpacks))
    fields.update(pm=pm or unpack_pm or 0, pack=pack, unpack=unpack)
    return Instruction(**fields).encode()


@st.composite
def load_imm_words(draw):
    mode = draw(st.sampled_from(sorted(isa.LOAD_IMM_MODES)))
    if mode == "semaphore":                 # otherwise a 32-bit load of the semaphore word
        immediate = (isa.field_put(draw(st.integers(0, isa.SEMAPHORE_MAX)), isa.SEMAPHORE_FIELDS["number"])
                     | isa.field_put(draw(st.integers(0, 1)), isa.SEMAPHORE_FIELDS["acquire"]))
    else:
        immediate = draw(st.integers(0, 0xFFFFFFFF))
    writes = draw(st.integers(0, 2))        # ADD port first, both ports share the condition
    cond = draw(ANY_COND)
    fields = dict(sig=isa.SIG_LOAD_IMM, ldi_mode=isa.LOAD_IMM_MODES[mode], immediate=immediate,
                  sf=draw(st.integers(0, 1)), ws=draw(st.integers(0, 1)) if writes else 0)
    for unit in ("add", "mul")[:writes]:
        fields.update({f"waddr_{unit}": draw(ANY_WADDR), f"cond_{unit}": cond})
    packs = [(0, 0)]
    if writes and fields["ws"] == 0:
        packs += [(0, code) for code in range(1, 16)]
    if writes == 2:
        packs += [(1, code) for code in PACK_MUL_CODES]
    fields["pm"], fields["pack"] = draw(st.sampled_from(packs))
    return Instruction(**fields).encode()


@st.composite
def branch_words(draw):
    relative = draw(st.booleans())
    immediate = (draw(st.integers(-(1 << 28), (1 << 28) - 1)) * isa.INSTRUCTION_BYTES & 0xFFFFFFFF
                 if relative else draw(st.integers(0, 0xFFFFFFFF)))
    reg = draw(st.integers(0, 1))
    link = draw(st.booleans())
    return Instruction(sig=isa.SIG_BRANCH, cond_br=draw(st.sampled_from(sorted(isa.BRANCH_CONDITIONS.values()))),
                       rel=int(relative), immediate=immediate, reg=reg,
                       raddr_a=draw(st.integers(0, isa.REGFILE_SIZE - 1)) if reg else 0,
                       waddr_add=draw(ANY_WADDR) if link else NOP,
                       ws=draw(st.integers(0, 1)) if link else 0).encode()


@SETTINGS
@given(alu_words())
def test_legal_alu_words_are_canonical(word):
    assert_canonical(word)


@SETTINGS
@given(load_imm_words())
def test_legal_load_immediates_are_canonical(word):
    assert_canonical(word)


@SETTINGS
@given(branch_words(), st.integers(0, 1 << 16).map(lambda i: i * 8))
def test_legal_branches_are_canonical(word, address):
    assert_canonical(word, address)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.one_of(alu_words(), load_imm_words(), branch_words(), st.integers(0, (1 << 64) - 1)),
                min_size=1, max_size=12))
def test_listings_of_random_programs_assemble_to_the_same_words(words):
    text = disasm.disassemble(words)
    assert parser.assemble_text(text, check=False).words == words


# --- 3: coverage ------------------------------------------------------------------------------


def _alu(**fields):
    base = dict(op_add=isa.ADD_OPS["fadd"].code, cond_add=ALWAYS, waddr_add=isa.WRITE_BY_NAME["a"]["r0"],
                add_a=isa.MUX_ACC["r1"], add_b=isa.MUX_ACC["r2"])
    return Instruction(**{**base, **fields}).encode()


def _coverage_words():
    r1, r4 = isa.MUX_ACC["r1"], isa.MUX_ACC["r4"]
    fmul = dict(op_mul=isa.MUL_OPS["fmul"].code, cond_mul=ALWAYS, waddr_mul=isa.WRITE_BY_NAME["b"]["r1"],
                mul_a=r1, mul_b=r1)
    cases = {}
    for op in isa.ADD_OPS.values():
        cases[f"add {op.name}"] = _alu(op_add=op.code, cond_add=ALWAYS if op.arity else NEVER,
                                       waddr_add=isa.WRITE_BY_NAME["a"]["r0"] if op.arity else NOP,
                                       add_a=r1 if op.arity else 0, add_b=r1 if op.arity else 0)
    for op in isa.MUL_OPS.values():
        cases[f"mul {op.name}"] = _alu(**{**fmul, "op_mul": op.code} if op.arity else {})
    for name, sig in isa.USER_SIGNALS.items():
        cases[f"signal {name}"] = _alu(sig=sig)
    for name, cond in isa.CONDITIONS.items():
        cases[f"cond {name}"] = _alu(cond_add=cond, **{**fmul, "cond_mul": cond})
    for name, code in isa.PACK_A.items():
        cases[f"pack {name}"] = _alu(pack=code, waddr_add=5)
    for name, code in isa.PACK_MUL.items():
        cases[f"mul pack {name}"] = _alu(pm=int(code != 0), pack=code, **fmul)
    for name, code in isa.UNPACK.items():
        cases[f"unpack {name} regfile A"] = _alu(unpack=code, add_b=isa.MUX_A, raddr_a=3)
        cases[f"unpack {name} r4"] = _alu(pm=int(code != 0), unpack=code, add_b=r4)
    for code, (kind, _) in isa.SMALL_IMMEDIATES.items():
        use = dict(add_b=isa.MUX_B) if kind != "rotate" else fmul
        cases[f"small immediate {code}"] = _alu(sig=isa.SIG_SMALL_IMM, raddr_b=code, **use)
    for side, table in isa.READ.items():
        for addr in READABLE[side]:
            mux = isa.MUX_A if side == "a" else isa.MUX_B
            cases[f"read {side} {addr}"] = _alu(**{f"raddr_{side}": addr, "add_b": mux})
            cases[f"bare read {side} {addr}"] = _alu(**{f"raddr_{side}": addr})
    for side, ws in (("a", 0), ("b", 1)):
        for addr in range(64):
            cases[f"write {side} {addr}"] = _alu(ws=ws, waddr_add=addr)
            cases[f"ldi write {side} {addr}"] = Instruction(sig=isa.SIG_LOAD_IMM, ws=ws, waddr_add=addr,
                                                            cond_add=ALWAYS, immediate=addr).encode()
    for name, mode in isa.LOAD_IMM_MODES.items():
        # semaphore: number 5, acquire; the others load to ra5
        cases[f"ldi mode {name}"] = Instruction(sig=isa.SIG_LOAD_IMM, ldi_mode=mode,
                                                **(dict(immediate=0x15) if name == "semaphore" else
                                                   dict(immediate=0x10005, cond_add=ALWAYS, waddr_add=5))
                                                ).encode()
    for number in range(isa.NUM_SEMAPHORES):
        for acquire in (0, 1):
            cases[f"semaphore {number} {acquire}"] = Instruction(
                sig=isa.SIG_LOAD_IMM, ldi_mode=isa.LOAD_IMM_MODES["semaphore"],
                immediate=number | acquire << 4).encode()
    for name, cond in isa.BRANCH_CONDITIONS.items():
        for rel in (0, 1):
            cases[f"branch {name} rel={rel}"] = Instruction(sig=isa.SIG_BRANCH, cond_br=cond, rel=rel,
                                                            immediate=0x40, reg=1, raddr_a=7,
                                                            waddr_add=9).encode()
    return cases


COVERAGE = _coverage_words()


@pytest.mark.parametrize("case", sorted(COVERAGE))
def test_coverage_of_canonical_forms(case):
    assert_canonical(COVERAGE[case])


def test_coverage_names_every_table_entry():
    names = set(COVERAGE)
    expected = ([f"add {n}" for n in isa.ADD_OPS] + [f"mul {n}" for n in isa.MUL_OPS]
                + [f"signal {n}" for n in isa.USER_SIGNALS] + [f"pack {n}" for n in isa.PACK_A]
                + [f"mul pack {n}" for n in isa.PACK_MUL] + [f"unpack {n} r4" for n in isa.UNPACK]
                + [f"branch {n} rel=1" for n in isa.BRANCH_CONDITIONS]
                + [f"small immediate {c}" for c in range(64)] + [f"ldi mode {n}" for n in isa.LOAD_IMM_MODES])
    assert set(expected) <= names
    assert len({COVERAGE[name] for name in expected}) > 0.9 * len(expected)


@pytest.mark.parametrize("word", [0, (1 << 64) - 1, 0x100009e7_009e7000, 0xe0020c67_00001a00])
def test_extreme_words_round_trip(word):
    round_trip(word)


def test_decode_of_fallback_quads_is_exact():
    # The .quad fallback must not lose bits that no field of the format covers: every bit of a
    # 64-bit word belongs to some field of each format (facts section 1 table).
    for fmt in ("alu", "load_imm", "branch"):
        covered = 0
        for lsb, width in encoding.FORMAT_FIELDS[fmt].values():
            covered |= ((1 << width) - 1) << lsb
        assert covered == (1 << 64) - 1, fmt
