"""DSL -> instruction words, checked against words derived by hand from the fact sheet.

The bit positions are copied from the table in facts section 1 (reference_words.py, not from
asm.isa), and every op, register, mux and signal number in the expectations was looked up in the
fact sheet's lists. Where a word is a well-known constant (nop, the exit sequence, the worked
examples of facts section 1) it is also written as literal hex.
"""

import pytest

from asm import (Assembler, AssemblerError, element_number, host_int, r0, r1, r2, r3, r4, r5, ra,
                 rb, uniform, vpm, vr_setup, vr_wait, vw_wait)

from .reference_words import (ADD, ALWAYS, FADD, FMUL, ITOF, MUX_A, MUX_B, OR, V8ADDS_ADD,
                              V8ADDS_MUL, V8MIN, ZS, alu, branch, ldi)


def one_word(emit):
    a = Assembler()
    emit(a)
    words = a.assemble(check=False).words
    assert len(words) == 1
    return words[0]


def test_nop_is_the_canonical_word():
    assert one_word(lambda a: a.nop()) == alu() == 0x100009e7_009e7000


def test_exit_sequence_words():
    a = Assembler()
    a.exit()
    assert a.assemble(check=False).words == [
        0xd00209a7_159c1fc0,        # or host_int, 1, 1 (small immediate 1)
        0x300009e7_009e7000,        # thrend
        0x100009e7_009e7000,
        0x100009e7_009e7000,
    ]


@pytest.mark.parametrize("emit, expected", [
    # or r0, uniform, uniform: uniform goes to regfile A (address 32) when both are free
    (lambda a: a.mov(r0, uniform),
     alu(cond_add=ALWAYS, waddr_add=32, op_add=OR, raddr_a=32, add_a=MUX_A, add_b=MUX_A)),
    (lambda a: a.mov(host_int, 1),
     alu(sig=13, cond_add=ALWAYS, waddr_add=38, op_add=OR, raddr_b=1, add_a=MUX_B, add_b=MUX_B)),
    # a fixed regfile-B read leaves regfile A for uniform
    (lambda a: a.add(r0, uniform, rb[5]),
     alu(cond_add=ALWAYS, waddr_add=32, op_add=ADD, raddr_a=32, raddr_b=5, add_a=MUX_A, add_b=MUX_B)),
    # element_number exists only on the A side, qpu_number only on B
    (lambda a: a.add(r1, element_number, uniform),
     alu(cond_add=ALWAYS, waddr_add=33, op_add=ADD, raddr_a=38, raddr_b=32, add_a=MUX_A, add_b=MUX_B)),
    # the same two-sided register read twice shares one port (one uniform popped)
    (lambda a: a.add(r2, uniform, uniform),
     alu(cond_add=ALWAYS, waddr_add=34, op_add=ADD, raddr_a=32, add_a=MUX_A, add_b=MUX_A)),
    (lambda a: a.mov(ra[2], r1, cond="zs", sf=True, sig="ldtmu0"),
     alu(sig=10, cond_add=ZS, sf=1, waddr_add=2, op_add=OR, add_a=1, add_b=1)),
    # ADD writing regfile B needs ws=1
    (lambda a: a.mov(rb[7], r1),
     alu(ws=1, cond_add=ALWAYS, waddr_add=7, op_add=OR, add_a=1, add_b=1)),
    (lambda a: a.mov(r0, r1, ws=1),
     alu(ws=1, cond_add=ALWAYS, waddr_add=32, op_add=OR, add_a=1, add_b=1)),
    # unary ops read their source through both muxes
    (lambda a: a.itof(r0, ra[1]),
     alu(cond_add=ALWAYS, waddr_add=32, op_add=ITOF, raddr_a=1, add_a=MUX_A, add_b=MUX_A)),
    (lambda a: a.v8adds(r0, r1, r2),
     alu(cond_add=ALWAYS, waddr_add=32, op_add=V8ADDS_ADD, add_a=1, add_b=2)),
    # explicit sides of I/O addresses: rb32 reads the uniform through B; ra32 written is r0 via A
    (lambda a: a.mov(r0, rb[32]),
     alu(cond_add=ALWAYS, waddr_add=32, op_add=OR, raddr_b=32, add_a=MUX_B, add_b=MUX_B)),
    (lambda a: a.fmul(ra[32], r1, r1),
     alu(ws=1, cond_mul=ALWAYS, waddr_mul=32, op_mul=FMUL, mul_a=1, mul_b=1)),
    (lambda a: a.fmul(r0, r1, r1),
     alu(cond_mul=ALWAYS, waddr_mul=32, op_mul=FMUL, mul_a=1, mul_b=1)),
    # vpm is the same read as rb48 here, so it shares that port (one VPM value popped)...
    (lambda a: a.add(r0, vpm, rb[48]),
     alu(cond_add=ALWAYS, waddr_add=32, op_add=ADD, raddr_b=48, add_a=MUX_B, add_b=MUX_B)),
    # ...while ra48 and rb48 are two VPM reads
    (lambda a: a.add(r0, ra[48], rb[48]),
     alu(cond_add=ALWAYS, waddr_add=32, op_add=ADD, raddr_a=48, raddr_b=48, add_a=MUX_A, add_b=MUX_B)),
])
def test_alu_words(emit, expected):
    assert one_word(emit) == expected


def test_dual_issue_fadd_fmul():
    # fmul writes ra1 (A only) so ws=1 and fadd's r3 goes through the B side; 1.0 = code 32
    word = one_word(lambda a: a.fadd(r3, r1, 1.0).fmul(ra[1], r2, r2))
    assert word == alu(sig=13, cond_add=ALWAYS, cond_mul=ALWAYS, ws=1, waddr_add=35, waddr_mul=1,
                       op_mul=FMUL, op_add=FADD, raddr_b=32, add_a=1, add_b=MUX_B, mul_a=2, mul_b=2)


def test_chained_mov_is_v8min_on_mul():
    word = one_word(lambda a: a.add(ra[1], r0, r0).mov(rb[2], r1))
    assert word == alu(cond_add=ALWAYS, cond_mul=ALWAYS, waddr_add=1, waddr_mul=2, op_mul=V8MIN,
                       op_add=ADD, mul_a=1, mul_b=1)


def test_chained_v8adds_goes_to_mul():
    word = one_word(lambda a: a.add(r0, r1, r2).v8adds(r3, r1, r2))
    assert word == alu(cond_add=ALWAYS, cond_mul=ALWAYS, waddr_add=32, waddr_mul=35,
                       op_mul=V8ADDS_MUL, op_add=ADD, add_a=1, add_b=2, mul_a=1, mul_b=2)


@pytest.mark.parametrize("value, code", [
    (0, 0), (15, 15), (-16, 16), (-1, 31), (1.0, 32), (128.0, 39), (2.0 ** -8, 40), (0.5, 47),
    (0x3F800000, 32),       # the bit pattern of 1.0 is the same immediate
])
def test_small_immediates(value, code):
    word = one_word(lambda a: a.add(r0, r1, value))
    assert word == alu(sig=13, cond_add=ALWAYS, waddr_add=32, op_add=ADD, raddr_b=code,
                       add_a=1, add_b=MUX_B)


@pytest.mark.parametrize("rotate, code", [(1, 49), (3, 51), (15, 63), (r5, 48)])
def test_rotation(rotate, code):
    word = one_word(lambda a: a.fmul(r0, r1, r2, rotate=rotate))
    assert word == alu(sig=13, cond_mul=ALWAYS, waddr_mul=32, op_mul=FMUL, raddr_b=code,
                       mul_a=1, mul_b=2)


def test_rotation_code_doubles_as_minus_sixteen_plus_n():
    # erratum (facts section 1): codes 48-63 give -16..-1 to mux-7 operands; rotate 3 = code 51 = -13
    word = one_word(lambda a: a.fmul(r0, r1, -13, rotate=3))
    assert word == alu(sig=13, cond_mul=ALWAYS, waddr_mul=32, op_mul=FMUL, raddr_b=51,
                       mul_a=1, mul_b=MUX_B)


@pytest.mark.parametrize("emit, expected", [
    # regfile-A unpack: pm=0, unpack 16a = 1
    (lambda a: a.fmul(r0, ra[3].unpack("16a"), r1),
     alu(unpack=1, cond_mul=ALWAYS, waddr_mul=32, op_mul=FMUL, raddr_a=3, mul_a=MUX_A, mul_b=1)),
    # r4 unpack: pm=1, unpack 8a = 4
    (lambda a: a.fadd(r0, r4.unpack("8a"), r1),
     alu(pm=1, unpack=4, cond_add=ALWAYS, waddr_add=32, op_add=FADD, add_a=4, add_b=1)),
    # regfile-A pack on the ADD writing ra5: pm=0, pack 16a = 1
    (lambda a: a.add(ra[5], r0, r1, pack="16a"),
     alu(pack=1, cond_add=ALWAYS, waddr_add=5, op_add=ADD, add_a=0, add_b=1)),
    # regfile-A pack on the MUL: the MUL result must go through side A, so ws=1
    (lambda a: a.fmul(ra[4], r1, r2, pack="8a"),
     alu(pack=4, ws=1, cond_mul=ALWAYS, waddr_mul=4, op_mul=FMUL, mul_a=1, mul_b=2)),
    # ...which also decides the side of a register writable from both
    (lambda a: a.fmul(r0, r1, r2, pack="32s"),
     alu(pack=8, ws=1, cond_mul=ALWAYS, waddr_mul=32, op_mul=FMUL, mul_a=1, mul_b=2)),
    # MUL colour pack: pm=1, 8888 = 3
    (lambda a: a.fmul(r0, r1, r2, pack="8888c"),
     alu(pm=1, pack=3, cond_mul=ALWAYS, waddr_mul=32, op_mul=FMUL, mul_a=1, mul_b=2)),
])
def test_pack_and_unpack(emit, expected):
    assert one_word(emit) == expected


@pytest.mark.parametrize("emit, expected", [
    (lambda a: a.read(uniform), alu(raddr_a=32)),
    (lambda a: a.read(vr_wait), alu(raddr_a=50)),
    (lambda a: a.read(vw_wait), alu(raddr_b=50)),
    (lambda a: a.mov(r0, r1).read(vw_wait),
     alu(cond_add=ALWAYS, waddr_add=32, op_add=OR, raddr_b=50, add_a=1, add_b=1)),
])
def test_bare_reads(emit, expected):
    assert one_word(emit) == expected


def test_ldi_worked_example_high_word():
    # facts section 1: 0xe0020c67 high word = ldi to vr_setup (waddr_add 49, cond_add always)
    word = one_word(lambda a: a.ldi(vr_setup, 0x00001a00))
    assert word >> 32 == 0xe0020c67
    assert word == ldi(cond_add=ALWAYS, waddr_add=49, imm=0x1a00)


@pytest.mark.parametrize("emit, expected", [
    (lambda a: a.ldi(r0, -1), ldi(cond_add=ALWAYS, waddr_add=32, imm=0xFFFFFFFF)),
    (lambda a: a.ldi(r0, 0xDEADBEEF), ldi(cond_add=ALWAYS, waddr_add=32, imm=0xDEADBEEF)),
    (lambda a: a.ldi(r1, 1.0), ldi(cond_add=ALWAYS, waddr_add=33, imm=0x3F800000)),
    (lambda a: a.ldi(r1, -2.5), ldi(cond_add=ALWAYS, waddr_add=33, imm=0xC0200000)),
    (lambda a: a.ldi(rb[3], 5), ldi(ws=1, cond_add=ALWAYS, waddr_add=3, imm=5)),
    # two destinations: ra1 only on A, so the MUL half takes A (ws=1) and r0 goes through B
    (lambda a: a.ldi((r0, ra[1]), 7),
     ldi(ws=1, cond_add=ALWAYS, cond_mul=ALWAYS, waddr_add=32, waddr_mul=1, imm=7)),
    (lambda a: a.ldi(r0, 3, cond="zs", sf=True), ldi(cond_add=ZS, sf=1, waddr_add=32, imm=3)),
    # per element: element i's high bit at imm bit 16+i, low bit at bit i
    (lambda a: a.ldi(r0, [0, 1, 2, 3] * 4), ldi(mode=3, cond_add=ALWAYS, waddr_add=32, imm=0xCCCCAAAA)),
    (lambda a: a.ldi(r0, [-2, -1, 0, 1] * 4), ldi(mode=1, cond_add=ALWAYS, waddr_add=32, imm=0x3333AAAA)),
    (lambda a: a.ldi(r0, [1, 0] * 8, mode="signed"),
     ldi(mode=1, cond_add=ALWAYS, waddr_add=32, imm=0x5555)),
    # semaphores: mode 100, bit 4 = acquire, bits 3:0 = number
    (lambda a: a.sema_acquire(5), 0xe80009e7_00000015),
    (lambda a: a.sema_release(15), ldi(mode=4, imm=0x0F)),
    # ...otherwise a 32-bit load of the immediate (facts section 1): r0 = 32, ra1 = A side 1 on
    # the MUL port, so ws=1 and r0 goes through B
    (lambda a: a.sema_acquire(5, dst=r0), ldi(mode=4, cond_add=ALWAYS, waddr_add=32, imm=0x15)),
    (lambda a: a.sema_release(2, dst=(r0, ra[1]), cond="zs", sf=True),
     ldi(mode=4, ws=1, cond_add=ZS, cond_mul=ZS, sf=1, waddr_add=32, waddr_mul=1, imm=0x02)),
])
def test_load_immediates(emit, expected):
    assert one_word(emit) == expected


def test_relative_branch_worked_example_and_offset():
    a = Assembler()
    a.label("top")
    a.nop()
    a.branch("top", cond="any_zs")      # at byte 8: offset = 0 - (8 + 4 * 8) = -40
    word = a.assemble(check=False).words[1]
    assert word >> 32 == 0xf02809e7     # facts section 1 worked example
    assert word == branch(cond_br=2, rel=1, imm=(-40) & 0xFFFFFFFF)


def test_forward_branch_with_link():
    a = Assembler()
    a.branch("ahead", link=rb[4])       # link written by the ADD half through B: ws=1
    for _ in range(5):
        a.nop()
    a.label("ahead")                    # at byte 48: offset = 48 - (0 + 32) = 16
    word = a.assemble(check=False).words[0]
    assert word == branch(cond_br=15, rel=1, ws=1, waddr_add=4, imm=16)


def test_absolute_branch_with_register():
    word = one_word(lambda a: a.branch(0x1000, absolute=True, reg=ra[3], link=ra[1], cond="all_cc"))
    assert word == branch(cond_br=9, rel=0, reg=1, raddr_a=3, waddr_add=1, imm=0x1000)


# facts section 1 "Signals": every code but the three that select a format (13-15)
FACT_SHEET_SIGNALS = {
    "breakpoint": 0, "none": 1, "thread_switch": 2, "thrend": 3, "wait_scoreboard": 4,
    "unlock_scoreboard": 5, "last_thread_switch": 6, "load_coverage": 7, "load_color": 8,
    "load_color_end": 9, "ldtmu0": 10, "ldtmu1": 11, "load_alpha_mask": 12,
}


@pytest.mark.parametrize("name, code", sorted(FACT_SHEET_SIGNALS.items()))
def test_every_signal_from_the_dsl(name, code):
    assert one_word(lambda a: a.nop(sig=name)) == alu(sig=code)
    assert one_word(lambda a: a.add(r0, r1, r2, sig=name)) == alu(
        sig=code, cond_add=ALWAYS, waddr_add=32, op_add=ADD, add_a=1, add_b=2)


@pytest.mark.parametrize("name", ["small_imm", "load_imm", "branch"])
def test_format_signals_are_not_written_by_hand(name):
    with pytest.raises(AssemblerError, match=f"unknown signal '{name}'"):
        Assembler().nop(sig=name)
