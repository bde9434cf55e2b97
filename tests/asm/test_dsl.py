"""The kernel DSL as a whole: kernels, labels and scopes, macros, Program, hazard checking."""

import pathlib
import runpy
import struct
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asm
from asm import (Assembler, HazardError, Program, SourceLocation, kernel, r0, r1, r2, r3, ra, rb,
                 uniform)
from asm.code_files import words_from_hex
from asm.encoding import decode
from asm.parser import assemble_file

from .reference_words import ALWAYS, OR, alu, branch

NOP_WORD = 0x100009e7_009e7000


def here():
    """Line number of the caller's current line."""
    return sys._getframe(1).f_lineno


def test_kernel_parameters_are_plain_python():
    @kernel
    def count_up(a, steps):
        for _ in range(steps):
            a.add(r0, r0, 1)
        a.exit()

    assert len(count_up.assemble(3)) == 3 + 4
    assert len(count_up.assemble(steps=5)) == 5 + 4
    assert count_up.__name__ == "count_up"


def test_design_example_assembles_hazard_checked():
    @kernel
    def hello(a, count=4):
        a.mov(r0, uniform)
        a.ldi(r1, 42)
        a.mov(r2, asm.element_number)
        a.add(r1, r1, r2)
        for _ in range(count):
            a.add(r1, r1, 1)
        a.fadd(r3, r1, 1.0).fmul(ra[1], r2, r2)
        a.mov(ra[2], r1, cond="zs", sf=True)
        a.label("loop")
        a.sub(r1, r1, 1, sf=True)
        a.branch("loop", cond="any_zc")
        a.nop(); a.nop(); a.nop()               # noqa: E702
        a.exit()

    program = hello.assemble(count=8)
    assert len(program) == 8 + 15 and program.labels == {"loop": (8 + 6) * 8}


def test_backward_and_forward_labels():
    a = Assembler()
    a.label("top")
    a.branch("end")                 # pc 0 -> 40: imm = 40 - 32 = 8
    a.nop()
    a.nop()
    a.nop()
    a.branch("top")                 # pc 32 -> 0: imm = 0 - 64
    a.label("end")
    words = a.assemble(check=False).words
    assert words[0] == branch(cond_br=15, rel=1, imm=8)
    assert words[4] == branch(cond_br=15, rel=1, imm=(-64) & 0xFFFFFFFF)


def test_label_objects_and_int_targets():
    a = Assembler()
    top = a.label("top")
    a.nop()
    a.branch(top)                   # at 8: 0 - 40
    a.branch(0)                     # byte offset 0 of the program, at 16: 0 - 48
    words = a.assemble(check=False).words
    assert words[1] == branch(cond_br=15, rel=1, imm=(-40) & 0xFFFFFFFF)
    assert words[2] == branch(cond_br=15, rel=1, imm=(-48) & 0xFFFFFFFF)


def countdown(a, register):
    """A macro with a label, used twice below: each use gets its own scope."""
    with a.scope("countdown"):
        a.label("loop")
        a.sub(register, register, 1, sf=True)
        a.branch("loop", cond="any_zc")
        a.nop()
        a.nop()
        a.nop()
        a.branch("done")            # found in the enclosing scope


def test_scopes_let_a_macro_with_labels_be_used_twice():
    a = Assembler()
    countdown(a, r0)
    countdown(a, r1)
    a.label("done")
    program = a.assemble(check=False)
    assert program.labels == {"countdown1/loop": 0, "countdown2/loop": 48, "done": 96}
    # each inner branch goes to its own loop: branch at 8 -> 0 and at 56 -> 48
    assert program.words[1] == branch(cond_br=3, rel=1, imm=(-40) & 0xFFFFFFFF)
    assert program.words[7] == branch(cond_br=3, rel=1, imm=(-40) & 0xFFFFFFFF)
    assert program.words[5] == branch(cond_br=15, rel=1, imm=96 - 72)


def test_inner_scope_label_shadows_outer():
    a = Assembler()
    a.label("x")
    a.nop()
    with a.scope():
        a.label("x")
        a.branch("x")               # the inner x at 8, branch at 8: 8 - 40
    assert a.assemble(check=False).words[1] == branch(cond_br=15, rel=1, imm=(-32) & 0xFFFFFFFF)


def test_program_bytes_are_little_endian_low_word_first():
    a = Assembler()
    a.mov(r0, uniform)
    data = a.assemble(check=False).to_bytes()
    assert data == struct.pack("<II", 0x15827d80, 0x10020827)


def test_program_from_words_and_instructions():
    words = [0x10020827_15827d80, NOP_WORD]
    program = Program.from_words(words)
    assert program.words == words
    assert program.instructions[0] == decode(words[0])
    assert program.instructions[0].op_add == OR and program.instructions[0].raddr_a == 32
    assert program.source_map == [None, None] and program.waivers == [frozenset()] * 2
    assert Program.from_bytes(program.to_bytes()).words == words


def test_hex_listing():
    a = Assembler()
    a.label("start")
    a.nop()
    a.label("end")
    program = a.assemble(check=False)
    assert program.hex().splitlines() == ["# start:", "009e7000 100009e7  # 000000", "# end:"]
    assert words_from_hex(program.hex()) == program.words


def test_source_map_points_at_kernel_lines():
    a = Assembler()
    first = here(); a.mov(r0, uniform)              # noqa: E702
    second = here(); a.fadd(r1, r0, r0).fmul(r2, r0, r0)  # noqa: E702
    program = a.assemble(check=False)
    assert program.source_map == [SourceLocation(__file__, first), SourceLocation(__file__, second)]
    assert program.source_map[0].text.endswith("a.mov(r0, uniform)              # noqa: E702")


def test_macro_instructions_map_to_the_macro_call():
    a = Assembler()
    line = here(); a.exit()         # noqa: E702
    assert {loc.line for loc in a.assemble().source_map} == {line}


def test_location_provider_drives_the_source_map():
    lines = iter([10, 11])
    a = Assembler(location_provider=lambda: SourceLocation("k.qasm", next(lines)))
    a.nop()
    a.nop()
    assert [loc.line for loc in a.assemble(check=False).source_map] == [10, 11]


def test_waivers_are_stored_per_instruction_and_merged_on_chaining():
    a = Assembler()
    a.nop(waive="regfile_raw")
    a.add(r0, r1, r2, waive=("rotate_acc",)).fmul(r3, r1, r2, waive="one_peripheral")
    a.nop()
    assert a.assemble(check=False).waivers == [
        frozenset({"regfile_raw"}), frozenset({"rotate_acc", "one_peripheral"}), frozenset()]


def test_assemble_runs_the_hazard_checker():
    def body(a, waive=()):
        a.mov(ra[1], r0)
        a.mov(r1, ra[1], waive=waive)       # reads ra1 right after it was written
        a.exit()

    a = Assembler()
    body(a)
    with pytest.raises(HazardError):
        a.assemble()
    a.assemble(check=False)
    waived = Assembler()
    body(waived, waive="regfile_raw")
    waived.assemble()


def test_bare_read_with_side_effect_and_null_destination():
    a = Assembler()
    a.read(uniform)
    a.mov(asm.null, uniform)
    words = a.assemble(check=False).words
    assert words[0] == alu(raddr_a=32)
    assert words[1] == alu(cond_add=ALWAYS, op_add=OR, raddr_a=32, add_a=6, add_b=6)


def test_registers_by_name():
    assert asm.lookup("ra32") is ra[32] is asm.ra32
    assert asm.lookup("rb63") is rb[63]
    assert asm.lookup("uniform") is uniform
    assert asm.ra32.reads == {"a": 32} and asm.rb48.reads == {"b": 48}
    assert asm.ra37.writes == {"a": 37} and not asm.ra37.reads


def test_every_isa_op_has_a_method():
    for name in list(asm.isa.ADD_OPS) + list(asm.isa.MUL_OPS):
        if name != "nop":
            method = name + "_" if name in ("and", "or", "not") else name
            assert callable(getattr(Assembler, method)), name


def test_disassembly_of_an_assembled_program_reassembles():
    @kernel
    def k(a):
        a.mov(r0, uniform)
        a.label("loop")
        a.fadd(r3, r1, 1.0).fmul(ra[1], r2, r2)
        a.branch("loop", cond="any_zc")
        a.nop()
        a.nop()
        a.nop()
        a.exit()

    program = k.assemble()
    text = program.disassemble()
    assert "fadd r3, r1, 1.0" in text and "loop:" in text
    from asm.parser import assemble_text
    assert assemble_text(text).words == program.words


EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


EXAMPLE_KERNELS = [("hello.py", "hello"), ("vpm_dma.py", "double_plus_one")]


@pytest.mark.parametrize("script, kernel_name", EXAMPLE_KERNELS)
def test_examples_assemble_hazard_checked(script, kernel_name):
    module = runpy.run_path(str(EXAMPLES / script))
    program = module[kernel_name].assemble()
    assert program.instructions[-3].sig == 3        # thrend, then two delay slots


@pytest.mark.parametrize("script, kernel_name", EXAMPLE_KERNELS)
def test_example_text_versions_assemble_to_the_dsl_words(script, kernel_name):
    text_program = assemble_file(EXAMPLES / script.replace(".py", ".s"))    # hazard-checked too
    dsl_program = runpy.run_path(str(EXAMPLES / script))[kernel_name].assemble()
    assert text_program.words == dsl_program.words
    assert text_program.source_map[0].file.endswith(script.replace(".py", ".s"))


@pytest.mark.parametrize("script", [script for script, _ in EXAMPLE_KERNELS])
def test_example_text_versions_are_what_the_scripts_print(script, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", [script])
    runpy.run_path(str(EXAMPLES / script), run_name="__main__")
    assert capsys.readouterr().out == (EXAMPLES / script.replace(".py", ".s")).read_text()


# Property: whatever operands the builder accepts, every mux delivers the operand it was given.
# Few distinct registers and immediates, so that shared reads and conflicts both come up often.
ACCUMULATORS = st.sampled_from([r0, r1, r2, r3, asm.r4, asm.r5])
SOURCES = st.one_of(
    ACCUMULATORS, ACCUMULATORS,
    st.sampled_from([uniform, asm.vpm, asm.element_number, asm.qpu_number, asm.vr_wait, asm.vw_busy]),
    st.builds(lambda i: ra[i], st.integers(0, 2)),
    st.builds(lambda i: rb[i], st.integers(0, 2)),
    st.sampled_from([1, -3, 2.0, 0.5, 0x3F800000, 100]),
)
NAMED_DESTINATIONS = st.sampled_from([r0, r1, asm.null, asm.vw_setup, asm.vr_addr, asm.host_int])
DESTINATIONS = st.one_of(NAMED_DESTINATIONS, NAMED_DESTINATIONS,
                         st.builds(lambda i: ra[i], st.integers(0, 31)),
                         st.builds(lambda i: rb[i], st.integers(0, 31)))


def delivered(ins, mux):
    """What a mux of a decoded instruction reads: ("acc", n), (side, address) or ("imm", code)."""
    if mux < 6:
        return ("acc", mux)
    if mux == 6:
        return ("a", ins.raddr_a)
    return ("imm", ins.raddr_b) if ins.sig == 13 else ("b", ins.raddr_b)


def expected_delivery(operand, got):
    if isinstance(operand, asm.Register):
        if operand.mux is not None:
            return got == ("acc", operand.mux)
        return got[0] in operand.reads and operand.reads[got[0]] == got[1]
    return got[0] == "imm" and asm.isa.small_imm_operand_value(got[1]) == asm.builder.immediate_bits(operand)


@settings(max_examples=300, deadline=None)
@given(add_dst=DESTINATIONS, mul_dst=DESTINATIONS, sources=st.lists(SOURCES, min_size=4, max_size=4))
def test_every_accepted_operand_is_delivered(add_dst, mul_dst, sources):
    a = Assembler()
    try:
        a.add(add_dst, sources[0], sources[1]).fmul(mul_dst, sources[2], sources[3])
    except asm.AssemblerError:
        return
    ins = a.assemble(check=False).instructions[0]
    for mux, operand in zip((ins.add_a, ins.add_b, ins.mul_a, ins.mul_b), sources):
        assert expected_delivery(operand, delivered(ins, mux)), (operand, mux, ins)
    add_side, mul_side = ("a", "b") if ins.ws == 0 else ("b", "a")
    assert add_dst.writes[add_side] == ins.waddr_add and mul_dst.writes[mul_side] == ins.waddr_mul


@pytest.mark.parametrize("script", ["hello.py", "vpm_dma.py"])
def test_examples_run_on_the_emulator(script):
    import vc4nn            # the examples' run() checks the output against numpy
    with vc4nn.open_device("emulator") as device:
        runpy.run_path(str(EXAMPLES / script))["run"](device)
