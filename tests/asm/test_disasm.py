"""Disassembler: words derived by hand from the fact sheet -> expected text; input formats.

The bit positions are copied from the table in facts section 1 (reference_words.py, not from
asm.isa), and every op, register, mux, condition and signal number was looked up in the fact
sheet's lists.
"""

import struct

import numpy as np
import pytest

from asm import Program, code_files, disasm, parser
from asm.errors import AsmError, EncodingError, ParseError

from .reference_words import alu, branch, ldi


def text_of(word, address=0):
    return str(disasm.disassemble_word(word, address))


# Hand-derived words and the text they must show (facts section 1 numbers in the comments).
EXPECTED = [
    (0x100009e7_009e7000, "nop"),
    # fadd = ADD op 1, r0 written = address 32, muxes r1 = 1, r2 = 2, cond always = 1
    (alu(op_add=1, cond_add=1, waddr_add=32, add_a=1, add_b=2), "fadd r0, r1, r2"),
    # the worked example of facts section 1: 0xe0020c67 = ldi to vr_setup (49), cond_add always
    ((0xe0020c67 << 32) | 0x00001a00, "ldi vr_setup, 0x00001a00"),
    # the worked example relative branch 0xf02809e7: cond 2 = any Z set, rel; imm 0x20 bytes after
    # branch + 4 instructions (32 bytes) -> 64 bytes past the branch
    ((0xf02809e7 << 32) | 0x20, "branch.any_zs pc+0x40"),
    # fmul = MUL op 1 writing r1 (33) through the B side (ws=0), muxes r2, r3; ldtmu0 = sig 10;
    # ADD: fadd with cond zs (2), sf, regfile A 1 with pack 16a (1), reading r0 and regfile B 2
    (alu(sig=10, pack=1, cond_add=2, cond_mul=1, sf=1, waddr_add=1, waddr_mul=33, op_mul=1, op_add=1,
         raddr_b=2, add_a=0, add_b=7, mul_a=2, mul_b=3),
     "fadd.zs.sf ra1.16a, r0, rb2 ; fmul r1, r2, r3 ; ldtmu0"),
    # or = ADD op 21 with both muxes = regfile A reading uniform (32): mov
    (alu(op_add=21, cond_add=1, waddr_add=32, raddr_a=32, add_a=6, add_b=6), "mov r0, uniform"),
    # small immediate (sig 13) code 35 = 2^3 = 8.0; code 29 = -3
    (alu(sig=13, op_add=1, cond_add=1, waddr_add=32, raddr_b=35, add_a=1, add_b=7), "fadd r0, r1, 8.0"),
    (alu(sig=13, op_add=12, cond_add=1, waddr_add=32, raddr_b=29, add_a=1, add_b=7), "add r0, r1, -3"),
    # MUL rotation: small-immediate code 48 + 5, MUL-only instruction with ADD idle
    (alu(sig=13, op_mul=1, cond_mul=1, waddr_mul=32, raddr_b=53, mul_a=0, mul_b=1), "nop ; fmul.rot5 r0, r0, r1"),
    # per-element signed (mode 1): element 0 = 1 (bit 0), element 1 = -2 (bit 17), others 0
    (ldi(mode=1, cond_add=1, waddr_add=32, imm=(1 << 0) | (1 << 17)),
     "ldi.signed r0, [1, -2" + ", 0" * 14 + "]"),
    # semaphore (mode 4): number 3, bit 4 = acquire
    (ldi(mode=4, imm=0x13), "sacq 3"),
    (ldi(mode=4, imm=0x03), "srel 3"),
    # ...which otherwise is a 32-bit load: here of its immediate 0x15 to r0 (32) if zs (2)
    (ldi(mode=4, cond_add=2, waddr_add=32, imm=0x15), "sacq.zs r0, 5"),
    # absolute branch (rel 0) always (15) to 0x1000 plus ra3 (reg, raddr_a 3), link in ra5
    # raddr_a 3 is odd: bit 45, the branch's sf, is set too (facts §5.4), and the text says so
    (branch(cond_br=15, reg=1, raddr_a=3, waddr_add=5, imm=0x1000), "branch.sf.abs 0x1000 + ra3, link=ra5"),
    (branch(cond_br=15, reg=1, raddr_a=2, imm=0x1000), "branch.abs 0x1000 + ra2"),
    # sf without a register: raddr_a = 1, reg 0; any_zc = 3, relative, immediate 0 = pc+32
    (branch(cond_br=3, rel=1, raddr_a=1, imm=0), "branch.any_zc.sf pc+0x20"),
    # thread end (sig 3) with no ops; a bare read of vpm (48) with ldtmu1 (11): through regfile
    # A it is the name (the assembler's first choice), through regfile B it must be spelled rb48
    (alu(sig=3), "thrend"),
    (alu(sig=11, raddr_a=48), "read vpm ; ldtmu1"),
    (alu(sig=11, raddr_b=48), "read rb48 ; ldtmu1"),
    # unpack 8a (4) of r4 (mux 4) with pm=1 into itof (ADD op 8, unary: both muxes)
    (alu(pm=1, unpack=4, op_add=8, cond_add=1, waddr_add=33, add_a=4, add_b=4), "itof r1, r4.8a"),
    # ADD writing r0 through side B (ws=1): the side must be spelled
    (alu(ws=1, op_add=12, cond_add=1, waddr_add=32, add_a=1, add_b=2), "add rb32, r1, r2"),
]


@pytest.mark.parametrize("word, text", EXPECTED, ids=[t for _, t in EXPECTED])
def test_hand_derived_words_disassemble_as_expected(word, text):
    assert text_of(word) == text
    assert parser.assemble_line(text) == word


@pytest.mark.parametrize("word, why", [
    (alu(op_add=9), "ADD opcode 9 is reserved"),
    (alu(pm=1, pack=1, op_mul=1, cond_mul=1, waddr_mul=32), "MUL pack code 1 (pm=1) is reserved"),
    (ldi(mode=2), "load-immediate mode 2 is reserved"),
    (branch(cond_br=13, rel=1), "branch condition 13 is reserved"),
    (branch(unused=5, cond_br=15, rel=1), "unused branch bits 59:56"),
    (alu(raddr_a=33, add_a=6, add_b=6, op_add=21, cond_add=1, waddr_add=32), "ra33 cannot be read"),
    (branch(cond_br=15, rel=1, imm=4), "not a multiple of 8"),                                 # unaligned target
    # the small immediate signal (13) with immediate 13 that no operand reads: the text drops
    # both, and no fields part can give the signal (it picks the format)
    (alu(sig=13, raddr_b=13), "sig=13 (text gives 1), raddr_b=13 (text gives 39)"),
])
def test_non_canonical_words_are_raw_quads_with_a_reason(word, why):
    line = disasm.disassemble_word(word)
    assert not line.canonical and why in line.reason
    assert line.text == f".quad {word:#018x}"
    assert parser.assemble_line(str(line)) == word


def test_listing_places_labels_and_branch_offsets():
    words = [alu(), alu(), branch(cond_br=15, rel=1, imm=(-32 - 16) & 0xFFFFFFFF), alu(), alu(), alu()]
    text = disasm.disassemble(words)
    lines = text.splitlines()
    assert lines[0].startswith("L0:")
    branch_line = next(line for line in lines if "branch" in line)
    assert branch_line.split("#")[0].strip() == "branch L0"
    assert "0x0010 -> 0x0000" in branch_line
    assert parser.assemble_text(text, check=False).words == words


def test_listing_uses_program_labels_and_waivers():
    source = "start:\n  nop\nloop:\n  branch loop ; waive branch_delay_slot\n  nop\n  nop\n  nop\n"
    program = parser.assemble_text(source, check=False)
    text = disasm.disassemble(program)
    assert "loop:" in text and "branch loop" in text and "L8" not in text
    assert "waive branch_delay_slot" in text
    again = parser.assemble_text(text, check=False)
    assert again.words == program.words and again.labels == program.labels
    assert again.waivers == program.waivers


def test_target_outside_the_code_is_pc_relative():
    assert disasm.disassemble([branch(cond_br=15, rel=1, imm=0x1000)]).split()[0:2] == ["branch", "pc+0x1020"]


def test_hex_listing_forms():
    nop_lo, nop_hi = 0x009e7000, 0x100009e7
    text = ("# comment\n100009e7009e7000\n0x100009e7009e7000 // c\n"
            f"{nop_lo:#x}, {nop_hi:#x},\n{nop_lo:08x} {nop_hi:08x}\n\n")
    assert code_files.words_from_hex(text) == [0x100009e7_009e7000] * 4


@pytest.mark.parametrize("bad, where", [("xyz\n", ":1"), ("00\n12 123456789\n", ":2"), ("1 2 3\n", ":1"),
                                        ("100009e7009e70001\n", ":1")])
def test_hex_listing_errors_name_the_line(bad, where):
    with pytest.raises(ParseError) as info:
        code_files.words_from_hex(bad, "code.hex")
    assert f"code.hex{where}" in str(info.value)


def test_read_words_bin_and_hex_and_auto(tmp_path):
    words = [alu(op_add=1, cond_add=1, waddr_add=32, add_a=1, add_b=2), 0xFFFFFFFF_00000001]
    raw = b"".join(struct.pack("<II", w & 0xFFFFFFFF, w >> 32) for w in words)   # low word first
    (tmp_path / "a.bin").write_bytes(raw)
    (tmp_path / "a.hex").write_text("".join(f"{w:016x}\n" for w in words))
    (tmp_path / "a.code").write_text("".join(f"{w & 0xFFFFFFFF:#x} {w >> 32:#x}\n" for w in words))
    (tmp_path / "b.code").write_bytes(raw)
    for name, fmt in [("a.bin", "auto"), ("a.hex", "auto"), ("a.code", "auto"), ("b.code", "auto"),
                      ("a.code", "hex"), ("b.code", "bin")]:
        got = code_files.read_words(tmp_path / name, fmt)
        assert got.dtype == np.uint64 and [int(w) for w in got] == words, name
    (tmp_path / "odd.bin").write_bytes(raw[:-1])
    with pytest.raises(EncodingError, match="multiple of 8"):
        code_files.read_words(tmp_path / "odd.bin")


def test_program_disassemble_method():
    program = Program.from_words([alu(sig=3), alu(), alu()])
    assert [line.split("#")[0].strip() for line in program.disassemble().splitlines()] == \
        ["thrend", "nop", "nop"]


# Valid words whose fields no operand syntax gives (issue 15 item 6): the instruction text with
# a ``fields`` part setting those fields (bit-exact), and a comment saying what the hardware
# does with them.
HIDDEN = [
    # MUL op nop (0) with condition zs (2) and write address 5, ws 0 -> side B: the MUL ALU's
    # previous result is written (facts §5.17). By hand: sig 1 (63:60), cond_mul 2 (48:46),
    # waddr_add 39 (43:38), waddr_mul 5 (37:32); raddr_a and raddr_b 39 (23:18, 17:12).
    (0x100089c5009e7000, "nop ; fields cond_mul=2, waddr_mul=5",
     "MUL nop writes the MUL ALU's previous result to rb5 where zs"),
    # ADD op nop with condition always (1) and write address 5 (side A): writes nothing
    (alu(cond_add=1, waddr_add=5), "nop ; fields cond_add=1, waddr_add=5",
     "ADD nop writes nothing: destination ra5 is ignored"),
    (alu(mul_b=1), "nop ; fields mul_b=1", "the MUL muxes of a nop are ignored"),
    (alu(cond_add=1), "nop ; fields cond_add=1", ""),      # always, to the nop register
    # branch with a MUL-port link (waddr_mul 5, ws 0 -> side B) and raddr_a 6 without reg
    (branch(cond_br=15, waddr_mul=5), "branch.abs 0x0 ; fields waddr_mul=5",
     "the link goes to rb5 too, through the MUL write port"),
    (branch(cond_br=15, raddr_a=6), "branch.abs 0x0 ; fields raddr_a=6",
     "raddr_a bits 4:1 (3) are ignored without + raN"),
    (branch(cond_br=15, rel=1, raddr_a=4), "branch pc+0x20 ; fields raddr_a=4",
     "raddr_a bits 4:1 (2) are ignored"),
    # fadd r0, r1, r2 with the MUL write address 55 (a nop MUL with condition never: ignored)
    (0x10020837019e7280, "fadd r0, r1, r2 ; fields waddr_mul=55", ""),
]


@pytest.mark.parametrize("word, text, effect", HIDDEN, ids=[t for _, t, _ in HIDDEN])
def test_words_beyond_the_operand_syntax_are_text_with_their_fields(word, text, effect):
    line = disasm.disassemble_word(word)
    assert not line.canonical and line.raw_fields and line.reason is None
    assert line.text == text and effect in line.note and (effect or not line.note)
    assert parser.assemble_line(text) == word
    listing = disasm.disassemble([word])
    assert text in listing and effect in listing and ".quad" not in listing
    assert list(parser.assemble_text(listing, "listing.s", check=False).words) == [word]


@pytest.mark.parametrize("text, message", [
    ("nop ; fields sig=3", "sig is not a field of an ALU instruction"),
    ("ldi r0, 5 ; fields raddr_a=3", "raddr_a is not a field of a load-immediate instruction"),
    ("nop ; fields waddr_mul=64", "does not fit in 6 bits"),
    ("nop ; fields waddr_mul=1, waddr_mul=2", "given twice"),
    ("nop ; fields", "expected a field name"),
    (".quad 5 ; fields waddr_mul=1", "a .quad gives every bit already"),
])
def test_fields_parts_are_checked(text, message):
    with pytest.raises(AsmError, match=message):
        parser.assemble_text(text, "f.s", check=False)


def test_fields_apply_over_the_whole_instruction():
    # the fields part may come before the waive part and after a MUL op and a signal
    text = "fadd r0, r1, r2 ; fmul r3, r1, r2 ; ldtmu0 ; fields unpack=1 ; waive ldtmu_empty"
    plain = parser.assemble_line("fadd r0, r1, r2 ; fmul r3, r1, r2 ; ldtmu0")
    assert parser.assemble_line(text.rsplit(" ; waive", 1)[0]) == plain | (1 << 57)


def test_the_dsl_writes_branch_sf_as_bit_45():
    from asm import AssemblerError, kernel, ra1, ra2

    # always (15) relative (bit 51) branch to the instruction after its delay slots (imm 0),
    # sf = bit 45, no link (both write addresses 39)
    hand = (15 << 60) | (15 << 52) | (1 << 51) | (1 << 45) | (39 << 38) | (39 << 32)

    @kernel
    def k(a, **branch):
        a.branch("next", **branch)
        a.nop()
        a.nop()
        a.nop()
        a.label("next")
        a.exit()
    assert int(k.assemble(sf=True).words[0]) == hand
    # ra1 is odd: the same bit, with or without sf=True
    with_reg = hand | (1 << 50)
    assert int(k.assemble(sf=True, reg=ra1).words[0]) == with_reg
    assert int(k.assemble(reg=ra1).words[0]) == with_reg
    with pytest.raises(AssemblerError, match="odd ra"):
        k.assemble(sf=True, reg=ra2)
