"""Text syntax -> words (hand-derived from the fact sheet), labels, and errors with locations."""

import os
import re

import pytest

from asm import parser
from asm.errors import AssemblerError, HazardError, ParseError

from .reference_words import alu, branch, ldi

NOP = 39
R0, R1, R2, R3 = 32, 33, 34, 35          # write addresses of r0..r3 (facts section 1 map)
ALWAYS, ZS = 1, 2


def one(text):
    return parser.assemble_line(text)


@pytest.mark.parametrize("text, word", [
    ("nop", 0x100009e7_009e7000),
    ("fadd r0, r1, r2", alu(op_add=1, cond_add=ALWAYS, waddr_add=R0, add_a=1, add_b=2)),
    ("  fadd r0 , r1,r2   # comment", alu(op_add=1, cond_add=ALWAYS, waddr_add=R0, add_a=1, add_b=2)),
    # ADD op 12 with small immediate (sig 13) code 16 + 13 = -3; float 0.5 = code 47
    ("add r0, r1, -3", alu(sig=13, op_add=12, cond_add=ALWAYS, waddr_add=R0, raddr_b=29, add_a=1, add_b=7)),
    ("fmul r0, r1, 0.5", alu(sig=13, op_mul=1, cond_mul=ALWAYS, waddr_mul=R0, raddr_b=47, mul_a=1, mul_b=7)),
    # MUL-only shorthand and the explicit form are the same word; MUL v8adds = MUL op 6
    ("nop ; fmul r3, r1, r2", alu(op_mul=1, cond_mul=ALWAYS, waddr_mul=R3, mul_a=1, mul_b=2)),
    ("nop ; v8adds r3, r1, r2", alu(op_mul=6, cond_mul=ALWAYS, waddr_mul=R3, mul_a=1, mul_b=2)),
    ("v8adds r3, r1, r2", alu(op_add=30, cond_add=ALWAYS, waddr_add=R3, add_a=1, add_b=2)),
    # mov on each ALU: or (21) / v8min (4) with the source in both muxes
    ("mov ra7, r1 ; mov r2, uniform", alu(op_add=21, cond_add=ALWAYS, waddr_add=7, add_a=1, add_b=1,
                                         op_mul=4, cond_mul=ALWAYS, waddr_mul=R2, raddr_a=32,
                                         mul_a=6, mul_b=6)),
    # conditions, sf, pack 16a (1) on the regfile-A write, rotation by 3 (code 51)
    ("sub.zs.sf ra3.16a, r1, r2", alu(op_add=13, cond_add=ZS, sf=1, pack=1, waddr_add=3, add_a=1, add_b=2)),
    ("nop ; fmul.rot3 r0, r1, r2", alu(sig=13, op_mul=1, cond_mul=ALWAYS, waddr_mul=R0, raddr_b=51,
                                       mul_a=1, mul_b=2)),
    # unpack 16a of a regfile-A read (pm 0), 8a (4) of r4 (pm 1)
    ("fadd r0, ra5.16a, r1", alu(unpack=1, op_add=1, cond_add=ALWAYS, waddr_add=R0, raddr_a=5, add_a=6, add_b=1)),
    ("fadd r0, r4.8a, r1", alu(pm=1, unpack=4, op_add=1, cond_add=ALWAYS, waddr_add=R0, add_a=4, add_b=1)),
    # colour pack 8888 (pm 1, code 3) on the MUL result
    ("nop ; fmul r0.8888c, r1, r2", alu(pm=1, pack=3, op_mul=1, cond_mul=ALWAYS, waddr_mul=R0, mul_a=1, mul_b=2)),
    # side-forced names: r0 written through side B (ws 1); uniform read through regfile B
    ("add rb32, r1, r2", alu(ws=1, op_add=12, cond_add=ALWAYS, waddr_add=R0, add_a=1, add_b=2)),
    ("mov r0, rb32", alu(op_add=21, cond_add=ALWAYS, waddr_add=R0, raddr_b=32, add_a=7, add_b=7)),
    ("mov r0, uniform", alu(op_add=21, cond_add=ALWAYS, waddr_add=R0, raddr_a=32, add_a=6, add_b=6)),
    # signals (ldtmu0 = 10, thrend = 3) and bare reads (vr_wait = A 50)
    ("fadd r0, r1, r2 ; ldtmu0", alu(sig=10, op_add=1, cond_add=ALWAYS, waddr_add=R0, add_a=1, add_b=2)),
    ("thrend", alu(sig=3)),
    ("read vr_wait", alu(raddr_a=50)),
    # ldi: 32-bit int, float, negative; per element; two destinations (ADD then MUL port)
    ("ldi r0, 0x3f800000", ldi(cond_add=ALWAYS, waddr_add=R0, imm=0x3f800000)),
    ("ldi r0, 1.0", ldi(cond_add=ALWAYS, waddr_add=R0, imm=0x3f800000)),
    ("ldi r0, -1", ldi(cond_add=ALWAYS, waddr_add=R0, imm=0xFFFFFFFF)),
    ("ldi vr_setup, 0x1a00", (0xe0020c67 << 32) | 0x1a00),          # facts section 1 worked example
    ("ldi.unsigned r0, [3" + ", 0" * 15 + "]", ldi(mode=3, cond_add=ALWAYS, waddr_add=R0, imm=1 | 1 << 16)),
    ("ldi.signed r0, [0, -1" + ", 0" * 14 + "]", ldi(mode=1, cond_add=ALWAYS, waddr_add=R0, imm=2 | 2 << 16)),
    ("ldi.zs ra1, rb2, 7", ldi(cond_add=ZS, cond_mul=ZS, waddr_add=1, waddr_mul=2, imm=7)),
    ("ldi 7", ldi(imm=7)),
    ("sacq 15", ldi(mode=4, imm=0x1F)),
    ("srel 0", ldi(mode=4, imm=0)),
    # a semaphore writes its immediate like ldi: rb2 through the ADD port needs ws=1
    ("srel.sf rb2, 9", ldi(mode=4, ws=1, sf=1, cond_add=ALWAYS, waddr_add=2, imm=9)),
    ("sacq.nc r0, ra1, 1", ldi(mode=4, ws=1, cond_add=5, cond_mul=5, waddr_add=R0, waddr_mul=1, imm=0x11)),
    # branches: relative immediate = target - (branch + 32); absolute; register; link
    ("branch pc+32", branch(cond_br=15, rel=1, imm=0)),
    ("branch.any_zc pc-0x10", branch(cond_br=3, rel=1, imm=(-48) & 0xFFFFFFFF)),
    ("branch.all_nc.abs 0x1234 + ra9, link=rb4", branch(cond_br=5, reg=1, raddr_a=9, ws=1, waddr_add=4, imm=0x1234)),
    (".quad 0x0123456789abcdef", 0x0123456789abcdef),
])
def test_statement_words(text, word):
    assert one(text) == word


def test_program_labels_source_map_and_pc_offsets():
    source = ("# a loop\n"
              "start: ldi r1, 4\n"
              "loop:\n"
              "  sub.sf r1, r1, 1\n"
              "  branch.any_zc loop\n"
              "  nop\n  nop\n  nop\n"
              "  branch pc+0x20\n"
              "  branch end\n"
              "  nop\n  nop\n  nop\n  nop\n"
              "end: a2: mov host_int, 1\n"
              "  thrend\n  nop\n  nop\n")
    program = parser.assemble_text(source, "loop.s", check=False)
    assert program.labels == {"start": 0, "loop": 8, "end": 12 * 8, "a2": 12 * 8}
    # branch at 16 to 8: immediate 8 - (16 + 32) = -40
    assert program.words[2] == branch(cond_br=3, rel=1, imm=(-40) & 0xFFFFFFFF)
    assert program.words[6] == branch(cond_br=15, rel=1, imm=0)
    assert program.words[7] == branch(cond_br=15, rel=1, imm=12 * 8 - (7 * 8 + 32))
    assert [loc.line for loc in program.source_map[:3]] == [2, 4, 5]
    assert program.source_map[0].file == "loop.s"


def _error(source, kind=ParseError, check=False):
    with pytest.raises(kind) as info:
        parser.assemble_text(source, "bad.s", check=check)
    return str(info.value)


@pytest.mark.parametrize("source, expected", [
    ("nop\nfadx r0, r1, r2\n", ["bad.s:2", "column 1", "unknown ADD op 'fadx'", "fadd"]),
    ("fmul r0, r1, r2 ; fadd r0, r1, r2\n", ["bad.s:1", "fadd"]),
    ("fadd r0, r1, rx2\n", ["bad.s:1", "column 14", "unknown register 'rx2'"]),
    ("fadd.zz r0, r1, r2\n", ["modifier 'zz'", "zs"]),
    ("fadd r0, r1, 09\n", ["column 14", "not a number"]),
    ("fadd r0, r1, ra2.16x\n", ["unknown unpack mode '16x'"]),
    ("fadd r0.17a, r1, r2\n", ["unknown pack mode '17a'"]),
    ("fadd r0, r1, r2 ;\n", ["column 18", "expected an instruction part"]),
    ("fadd r0 r1\n", ["column 9", "expected end of statement"]),
    ("fadd r0, r1, r2 ; ldtmu0 ; ldtmu1\n", ["a second signal"]),
    ("ldi r0, r1\n", ["last operand is the value"]),
    ("ldi r0, [1, 2\n", ["']' closing"]),
    ("sacq.signed 1\n", ["bad.s:1", "sacq: modifier 'signed'", "a condition"]),
    ("srel r0, [1]\n", ["bad.s:1", "a destination or a value"]),
    ("ldi r0.8ac, 5\n", ["second (MUL) destination"]),
    ("branch\n", ["expected a label or pc+OFFSET"]),
    ("branch 0x40\n", ["branch.abs"]),
    ("branch loop, lnk=ra1\n", ["'link=REGISTER'"]),
    ("ldi r0, 5 ; ldtmu0\n", ["waive RULE"]),
    ("fadd r0, r1, r2 @\n", ["column 17", "unexpected character '@'"]),
])
def test_parse_errors_name_file_line_column_and_what_was_expected(source, expected):
    message = _error(source)
    for part in expected:
        assert part in message


@pytest.mark.parametrize("source, expected", [
    ("nop\nnop\nfadd r0, ra1, ra2\n", ["bad.s:3", "regfile A reads ra1 and ra2"]),
    ("fadd r0, r1, 17\n", ["bad.s:1", "not representable as a small immediate"]),
    ("fadd r0, r1, r2 ; fmul r3, r1, r2 ; ldtmu0\nfadd.sf r0, r1, 1 ; ldtmu0\n", ["bad.s:2", "signal"]),
    ("ldi.signed r0, [5" + ", 0" * 15 + "]\n", ["bad.s:1", "-2..1"]),
    ("sacq 16\n", ["bad.s:1", "semaphore number 16"]),
    (".quad 0x10000000000000000\n", ["bad.s:1", "64-bit"]),
    ("nop\nbranch nowhere\n", ["bad.s:2", "undefined label 'nowhere'"]),
    ("x:\nx: nop\n", ["bad.s:2", "duplicate label 'x'", "bad.s:1"]),
    ("branch.abs 0x10 + rb3\n", ["bad.s:1", "ra0..ra31"]),
])
def test_builder_errors_carry_the_text_line(source, expected):
    message = _error(source, AssemblerError)
    for part in expected:
        assert part in message


HAZARD = ("  mov ra1, r0\n"
          "  mov r1, ra1{waive}\n"
          "  mov host_int, 1\n  thrend\n  nop\n  nop\n")


def test_assembling_text_runs_the_hazard_checker_and_honours_waivers():
    with pytest.raises(HazardError) as info:
        parser.assemble_text(HAZARD.format(waive=""), "h.s")
    assert info.value.rule == "regfile_raw" and "h.s:2" in str(info.value)
    program = parser.assemble_text(HAZARD.format(waive=" ; waive regfile_raw"), "h.s")
    assert program.waivers[1] == {"regfile_raw"}
    assert parser.assemble_text(HAZARD.format(waive=""), check=False).words == program.words


def test_assemble_file_and_line(tmp_path):
    path = tmp_path / "p.s"
    path.write_text(HAZARD.format(waive=" ; waive regfile_raw"))
    program = parser.assemble_file(path)
    assert len(program) == 6 and program.source_map[1].file == str(path)
    assert parser.assemble_line("branch back", address=64, labels={"back": 8}) == \
        branch(cond_br=15, rel=1, imm=(8 - 64 - 32) & 0xFFFFFFFF)
    with pytest.raises(ParseError):
        parser.assemble_line("x: nop")
    (tmp_path / "latin.s").write_bytes(b"nop # \xff\n")
    with pytest.raises(ParseError, match="not UTF-8"):
        parser.assemble_file(tmp_path / "latin.s")


def test_the_syntax_document_examples_assemble():
    doc = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "asm-syntax.md")
    with open(doc, encoding="utf-8") as f:
        blocks = re.findall(r"```\n(.*?)```", f.read(), re.S)
    program = parser.assemble_text(blocks[0], "asm-syntax.md")        # hazard-checked
    assert len(program) == 13 and program.labels == {"loop": 24}
    parser.assemble_text(blocks[1], check=False)
