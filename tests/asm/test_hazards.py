"""Tests of the static hazard checker (asm/hazards.py) against the rules of facts section 2.

Programs are written as raw instruction fields with the numbers of the fact sheet (section 1),
spelled out here independently of asm.isa, so a wrong ISA table makes these tests fail too.
Every rule has a violating program (rule name, both instructions and their source lines) and a
compliant neighbour; the hardware-reading choices are pinned at their boundary distance.
"""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asm import (element_number, hazards, kernel, r0, r1, r2, r3, r4, r5, r5rep, ra1, ra2,
                 sfu_exp, sfu_recip, tmu0_s, tmu_noswap, unif_addr, uniform)
from asm.encoding import Instruction, decode
from asm.errors import HazardError, SourceLocation
from asm.program import Program

# --- fact sheet section 1 numbers ----------------------------------------------------------
NOP = 39
SIG = {"none": 1, "thread_switch": 2, "thrend": 3, "last_thread_switch": 6, "load_color": 8,
       "load_color_end": 9, "ldtmu0": 10, "ldtmu1": 11, "load_alpha_mask": 12, "small_imm": 13,
       "load_imm": 14, "branch": 15}
W = {"r0": 32, "r1": 33, "r2": 34, "r3": 35, "tmu_noswap": 36, "r5": 37, "host_int": 38,
     "unif_addr": 40, "tlb_z": 44, "vpm": 48, "vr_setup": 49, "vr_addr": 50,
     "mutex_release": 51, "sfu_recip": 52, "sfu_exp": 54, "tmu0_s": 56, "tmu0_t": 57,
     "tmu1_s": 60}
R = {"uniform": 32, "varying": 35, "element_number": 38, "vpm": 48, "vr_busy": 49,
     "vr_wait": 50, "mutex_acquire": 51}
COND = {"never": 0, "always": 1, "zs": 2, "zc": 3, "ns": 4, "nc": 5, "cs": 6, "cc": 7}
BRANCH_ALWAYS, BRANCH_ANY_ZC = 15, 3
ADD, OR = 12, 21                    # op_add
FMUL, V8MIN = 1, 4                  # op_mul
R4, R5, MUX_A, MUX_B = 4, 5, 6, 7
ROTATE_R5, ROTATE_1 = 48, 49        # small-immediate codes
SEMAPHORE_MODE = 4


def add(waddr=NOP, a=0, b=0, cond="always", **fields):
    """ADD ALU `add waddr, mux a, mux b`."""
    return Instruction(op_add=ADD, waddr_add=waddr, cond_add=COND[cond], add_a=a, add_b=b,
                       **fields)


def mul(waddr=NOP, a=0, b=0, cond="always", **fields):
    """MUL ALU `fmul waddr, mux a, mux b`."""
    return Instruction(op_mul=FMUL, waddr_mul=waddr, cond_mul=COND[cond], mul_a=a, mul_b=b,
                       **fields)


def both(add_waddr, mul_waddr, add_cond="always", mul_cond="always", **fields):
    """An instruction where both ALUs write."""
    return Instruction(op_add=OR, waddr_add=add_waddr, cond_add=COND[add_cond], op_mul=V8MIN,
                       waddr_mul=mul_waddr, cond_mul=COND[mul_cond], **fields)


def read_a(raddr, **fields):
    """`or r0, ra<raddr>, ra<raddr>` (reads regfile A address raddr through mux A)."""
    return add(W["r0"], MUX_A, MUX_A, raddr_a=raddr, **fields)


def read_b(raddr, **fields):
    return add(W["r0"], MUX_B, MUX_B, raddr_b=raddr, **fields)


def sig(name, **fields):
    return Instruction(sig=SIG[name], **fields)


def ldi(waddr, value=0, **fields):
    return Instruction(sig=SIG["load_imm"], waddr_add=waddr, cond_add=COND["always"],
                       immediate=value, **fields)


def branch(offset=0, cond=BRANCH_ALWAYS, **fields):
    """Relative branch to (branch + 4 + offset) instructions."""
    return Instruction(sig=SIG["branch"], cond_br=cond, rel=1,
                       immediate=(offset * 8) & 0xFFFFFFFF, **fields)


def rotate(code, a=0, b=0):
    """`fmul r0, mux a, mux b` with its output rotated (small immediate code 48-63)."""
    return Instruction(sig=SIG["small_imm"], raddr_b=code, op_mul=FMUL, waddr_mul=W["r0"],
                       cond_mul=COND["always"], mul_a=a, mul_b=b)


def nops(n):
    return [Instruction() for _ in range(n)]


END = [sig("thrend"), Instruction(), Instruction()]
FILE = "kernel_file.py"


class FakeProgram:
    """Just what the checker needs; source line of instruction i is 100 + i."""

    def __init__(self, instructions, waivers=None):
        self.instructions = list(instructions)
        self.source_map = [SourceLocation(FILE, 100 + i) for i in range(len(self.instructions))]
        self.waivers = waivers or []


def found(instructions, rule=None, **kwargs):
    """(rule, offending index, other index) of each violation, optionally of one rule."""
    return [(v.rule, v.index, v.other_index)
            for v in hazards.violations(FakeProgram(instructions), **kwargs)
            if rule is None or v.rule == rule]


def assert_clean(instructions, **kwargs):
    assert found(instructions, **kwargs) == []
    hazards.check(FakeProgram(instructions), **kwargs)


def assert_only(instructions, rule, index, other, **kwargs):
    """The program breaks exactly `rule`, at `index` against `other`; the error says so."""
    assert found(instructions, **kwargs) == [(rule, index, other)]
    with pytest.raises(HazardError) as info:
        hazards.check(FakeProgram(instructions), **kwargs)
    error = info.value
    assert error.rule == rule
    assert error.location == SourceLocation(FILE, 100 + index)
    assert f"at {FILE}:{100 + index} (PC {index * 8:#x})" in str(error)
    if other is None:
        assert error.other_location is None
        assert error.pcs == (index * 8,)
    else:
        assert error.other_location == SourceLocation(FILE, 100 + other)
        assert error.pcs == (index * 8, other * 8)
        assert f"conflicts with {FILE}:{100 + other} (PC {other * 8:#x})" in str(error)
    return error


# --- regfile write -> read --------------------------------------------------------------------

def test_regfile_read_right_after_write():
    error = assert_only([add(5), read_a(5)] + END, "regfile_raw", 1, 0)
    assert str(error).startswith(f"{FILE}:101: [regfile_raw] read of ra5 ")


def test_regfile_read_one_instruction_later_is_fine():
    assert_clean([add(5), Instruction(), read_a(5)] + END)


def test_accumulator_read_right_after_write_is_fine():
    assert_clean([add(W["r1"]), add(W["r2"], 1, 1)] + END)


@pytest.mark.parametrize("ws, alu, side_written", [
    (0, add, "a"), (0, mul, "b"), (1, add, "b"), (1, mul, "a")])
def test_write_swap_decides_the_side_written(ws, alu, side_written):
    writer = alu(7, ws=ws)
    hit, miss = (read_a, read_b) if side_written == "a" else (read_b, read_a)
    assert found([writer, hit(7)] + END) == [("regfile_raw", 1, 0)]
    assert_clean([writer, miss(7)] + END)


def test_unused_read_port_and_small_immediate_are_not_regfile_reads():
    # raddr_a = 5 but no mux takes it; raddr_b = 5 is the small immediate 5 under sig 13.
    assert_clean([add(5), add(W["r0"], 0, 0, raddr_a=5)] + END)
    assert_clean([add(5, ws=1), add(W["r0"], MUX_B, MUX_B, sig=SIG["small_imm"], raddr_b=5)]
                 + END)


def test_write_with_condition_never_writes_nothing():
    assert_clean([add(5, cond="never"), read_a(5)] + END)


def test_conditional_write_still_counts():
    assert found([add(5, cond="zs"), read_a(5)] + END) == [("regfile_raw", 1, 0)]


def test_load_immediate_and_semaphore_write_like_alu_ops():
    assert_only([ldi(3, 42), read_a(3)] + END, "regfile_raw", 1, 0)
    semaphore = ldi(3, 0x1, ldi_mode=SEMAPHORE_MODE)
    assert_only([semaphore, read_a(3)] + END, "regfile_raw", 1, 0)
    assert_clean([ldi(3, 42), Instruction(), read_a(3)] + END)


def test_branch_link_write_is_a_regfile_write():
    # link into ra7 (ADD side, ws = 0); the first delay slot reads it.
    linked = branch(0, waddr_add=7)
    assert_only([linked, read_a(7)] + nops(2) + END, "regfile_raw", 1, 0)


def test_register_added_branch_target_reads_regfile_a():
    reg_branch = Instruction(sig=SIG["branch"], cond_br=BRANCH_ALWAYS, rel=1, reg=1, raddr_a=2)
    assert found([add(2), reg_branch] + nops(3), "regfile_raw") == [("regfile_raw", 1, 0)]


def test_last_delay_slot_write_then_read_at_branch_target():
    # 0: branch to 6; 1-3 delay slots, slot 3 writes ra1; 4-5 skipped; 6 reads ra1.
    program = [branch(2)] + nops(2) + [add(1)] + nops(2) + [read_a(1)] + END
    assert found(program) == [("regfile_raw", 6, 3)]


def test_unconditional_branch_skips_the_instruction_after_its_slots():
    # 4 is never executed right after 3: only the subroutine entry at 4 reads ra1.
    program = [branch(3)] + nops(2) + [add(1)] + [read_a(1)] + nops(2) + END
    assert found(program) == []


def test_conditional_branch_checks_both_paths():
    program = [branch(3, cond=BRANCH_ANY_ZC)] + nops(2) + [add(1), read_a(1)] + nops(2) \
        + [read_a(1)] + END
    assert found(program) == [("regfile_raw", 4, 3), ("regfile_raw", 7, 3)]


def test_backward_loop_branch_target():
    # 0: loop head reads ra1; 1: conditional branch back to 0; slot 3 writes ra1.
    program = [read_a(1), branch(-5, cond=BRANCH_ANY_ZC)] + nops(2) + [add(1)] + END
    assert found(program) == [("regfile_raw", 0, 4)]


def test_absolute_branch_target_followed_only_with_a_code_address():
    base = 0x1000
    jump = Instruction(sig=SIG["branch"], cond_br=BRANCH_ALWAYS, rel=0, immediate=base + 6 * 8)
    program = [jump] + nops(2) + [add(1)] + nops(2) + [read_a(1)] + END
    assert found(program) == []     # target unknown statically: the walk stops at the branch
    assert found(program, code_address=base) == [("regfile_raw", 6, 3)]


# --- SFU and r4 -------------------------------------------------------------------------------

@pytest.mark.parametrize("distance", [1, 2])
def test_r4_read_too_soon_after_sfu_write(distance):
    program = [add(W["sfu_recip"])] + nops(distance - 1) + [add(W["r0"], R4, R4)] + END
    assert_only(program, "sfu_r4_read", distance, 0)


def test_r4_readable_three_instructions_after_sfu_write():
    assert_clean([add(W["sfu_recip"])] + nops(2) + [add(W["r0"], R4, R4)] + END)


def test_r4_unpack_counts_as_an_r4_read():
    unpacked = mul(W["r0"], 0, 0, pm=1, unpack=4)
    assert_only([mul(W["sfu_exp"]), unpacked] + nops(1) + END, "sfu_r4_read", 1, 0)


@pytest.mark.parametrize("writer", [
    sig("ldtmu0"), sig("ldtmu1"), sig("load_color"), sig("load_alpha_mask"),
    add(W["sfu_recip"]), ldi(W["sfu_exp"], 0)])
def test_other_r4_writer_while_sfu_result_pending(writer):
    assert_only([add(W["sfu_recip"]), Instruction(), writer] + nops(2) + END,
                "sfu_r4_overlap", 2, 0)


def test_r4_writer_after_sfu_result_is_ready():
    assert_clean([add(W["sfu_recip"])] + nops(2) + [sig("ldtmu0")] + END)


def test_ldtmu_result_readable_by_the_next_instruction():
    assert_clean([sig("ldtmu0"), add(W["r0"], R4, R4)] + END)


# --- branches ---------------------------------------------------------------------------------

@pytest.mark.parametrize("slot", [1, 2, 3])
def test_branch_in_a_delay_slot(slot):
    # facts 5.5: we follow Linux, so even the last slot (vc4asm allows it) is rejected.
    program = [branch(4 - slot)] + nops(slot - 1) + [branch(0)] + nops(3) + END
    violations = found(program)
    assert ("branch_delay_slot", slot, 0) in violations
    assert {v[0] for v in violations} == {"branch_delay_slot"}


def test_branches_four_apart_are_fine():
    assert_clean([branch(0)] + nops(3) + [branch(0)] + nops(3) + END)


# --- thread switch ----------------------------------------------------------------------------

@pytest.mark.parametrize("first, second, slot", [
    ("thread_switch", "thread_switch", 1), ("thread_switch", "last_thread_switch", 2),
    ("last_thread_switch", "thread_switch", 2), ("thread_switch", "thrend", 2)])
def test_switch_or_end_in_thread_switch_delay_slots(first, second, slot):
    program = [sig(first)] + nops(slot - 1) + [sig(second)] + nops(4 - slot) + END
    assert ("thread_switch_slot", slot, 0) in found(program)


def test_thread_switches_three_apart_are_fine():
    assert_clean([sig("thread_switch")] + nops(2) + [sig("thread_switch")] + nops(2) + END)


# --- program end ------------------------------------------------------------------------------

def test_thrend_instruction_must_not_write_the_regfile():
    assert_only([Instruction(), add(4, sig=SIG["thrend"])] + nops(2), "thrend_regfile_write",
                1, None)
    assert_clean([Instruction(), add(W["host_int"], sig=SIG["thrend"])] + nops(2))


@pytest.mark.parametrize("slot, access", [
    (0, read_a(R["uniform"])), (1, read_b(R["varying"])), (2, read_a(R["vpm"])),
    (1, read_b(R["vr_busy"])), (2, read_a(R["vr_wait"])), (1, add(W["vpm"])),
    (2, add(W["vr_setup"])), (1, mul(W["vr_setup"])), (2, add(W["vr_addr"])),
    (1, add(W["r0"], 0, 0, raddr_a=14)), (2, add(W["r0"], 0, 0, raddr_b=14)),
    (1, mul(14)), (2, add(14, ws=1))])
def test_last_three_instructions_must_not_touch_uniforms_vpm_or_address_14(slot, access):
    program = [Instruction()] + [sig("thrend"), Instruction(), Instruction()]
    program[1 + slot] = access.replace(sig=SIG["thrend"]) if slot == 0 else access
    assert ("thrend_slots_access", 1 + slot, None if slot == 0 else 1) in found(program)


def test_uniform_and_vpm_access_before_the_last_three_is_fine():
    assert_clean([read_a(R["uniform"]), add(W["vpm"]), read_a(13)] + END)


def test_thrend_slot_error_names_both_lines():
    program = [Instruction(), sig("thrend"), read_a(R["uniform"]), Instruction()]
    assert_only(program, "thrend_slots_access", 2, 1)


def test_falling_off_the_end_is_a_violation():
    assert_only([add(W["r0"])] * 3, "program_end", 2, None)


@pytest.mark.parametrize("slots", [0, 1])
def test_thrend_needs_its_two_delay_slots(slots):
    program = [Instruction(), sig("thrend")] + nops(slots)
    assert_only(program, "program_end", len(program) - 1, None)


def test_empty_program_has_no_end():
    assert [v.rule for v in hazards.violations(FakeProgram([]))] == ["program_end"]


def test_branch_target_outside_the_program():
    assert_only([branch(10)] + nops(3) + END, "program_end", 3, 0)


def test_endless_loop_does_not_fall_off():
    assert_clean([Instruction(), branch(-5)] + nops(3))


def test_code_after_the_end_is_checked_as_its_own_entry():
    # A subroutine placed after the exit that falls off the end.
    assert found(END + [add(W["r0"])]) == [("program_end", 3, None)]


# --- uniforms address -------------------------------------------------------------------------

@pytest.mark.parametrize("writer", [add(W["unif_addr"]), mul(W["unif_addr"])])
@pytest.mark.parametrize("distance", [1, 2])
def test_uniform_read_too_soon_after_uniforms_address_write(writer, distance):
    # ADD writes A-side 40 (unif_addr), MUL the B-side 40 (unif_addr_rel): both count.
    program = [writer] + nops(distance - 1) + [read_b(R["uniform"])] + END
    assert_only(program, "unif_addr", distance, 0)


def test_uniform_read_three_after_uniforms_address_write_is_fine():
    assert_clean([add(W["unif_addr"])] + nops(2) + [read_a(R["uniform"])] + END)


# --- tmu_noswap -------------------------------------------------------------------------------

@pytest.mark.parametrize("distance", [1, 2, 3])
def test_tmu_write_too_soon_after_tmu_noswap(distance):
    # facts 5.6: we follow the validators, so distance 3 (the guide's example) is rejected.
    program = [add(W["tmu_noswap"])] + nops(distance - 1) + [mul(W["tmu1_s"])] + nops(4) + END
    assert_only(program, "tmu_noswap", distance, 0)


def test_tmu_write_four_after_tmu_noswap_is_fine():
    assert_clean([add(W["tmu_noswap"])] + nops(3) + [add(W["tmu0_s"])] + END)


# --- rotation ---------------------------------------------------------------------------------

def test_rotation_right_after_a_write_to_its_accumulator():
    assert_only([add(W["r1"]), rotate(ROTATE_1, 1, 2)] + END, "rotate_acc", 1, 0)
    assert_only([add(W["r2"]), rotate(ROTATE_1, 1, 2)] + END, "rotate_acc", 1, 0)


def test_rotation_of_other_accumulators_or_later_is_fine():
    assert_clean([add(W["r3"]), rotate(ROTATE_1, 1, 2)] + END)
    assert_clean([add(W["r1"]), Instruction(), rotate(ROTATE_1, 1, 2)] + END)


def test_rotation_by_r5_right_after_an_r5_write():
    assert_only([mul(W["r5"]), rotate(ROTATE_R5, 0, 1)] + END, "rotate_r5", 1, 0)


def test_rotation_by_a_constant_after_an_r5_write_is_fine():
    assert_clean([mul(W["r5"]), rotate(ROTATE_1, 0, 1)] + END)
    assert_clean([mul(W["r5"]), Instruction(), rotate(ROTATE_R5, 0, 1)] + END)


@pytest.mark.parametrize("a, b", [(MUX_A, 0), (0, R4), (R5, 1)])
def test_rotation_of_a_non_accumulator_source(a, b):
    # facts 5.12: we reject quad-local rotation (waivable), see docs/hardware-choices.md.
    assert_only([Instruction(), rotate(ROTATE_1, a, b)] + END, "rotate_source", 1, None)


def test_rotation_with_small_immediate_operand_is_fine():
    # mux B of a rotating instruction is the same value in every element.
    assert_clean([rotate(ROTATE_1, 0, MUX_B)] + END)


def test_small_immediate_rotate_code_without_mul_op_is_no_rotation():
    assert_clean([add(W["r1"]), add(W["r0"], 1, MUX_B, sig=SIG["small_imm"], raddr_b=ROTATE_1)]
                 + END)


# --- one peripheral per instruction -----------------------------------------------------------

@pytest.mark.parametrize("instruction", [
    both(W["tmu0_s"], W["sfu_recip"]),
    both(W["tmu0_s"], W["tmu0_t"]),
    add(W["sfu_recip"], sig=SIG["ldtmu0"]),
    add(W["tmu0_s"], sig=SIG["load_color"]),
    add(W["tlb_z"], sig=SIG["ldtmu1"]),
    add(W["tmu1_s"], raddr_a=R["mutex_acquire"]),
    ldi(W["sfu_exp"], ldi_mode=SEMAPHORE_MODE),
    Instruction(raddr_a=R["mutex_acquire"], raddr_b=R["mutex_acquire"]),
])
def test_more_than_one_peripheral_access(instruction):
    assert_only([Instruction(), instruction] + nops(4) + END, "one_peripheral", 1, None)


def test_one_peripheral_with_ordinary_io_is_fine():
    assert_clean([both(W["tmu0_s"], W["vpm"]), add(W["sfu_recip"], raddr_a=R["uniform"])]
                 + nops(4) + END)


# --- both ALUs write the same register --------------------------------------------------------

@pytest.mark.parametrize("add_cond, mul_cond", [
    ("always", "always"), ("zs", "zs"), ("zs", "ns"), ("always", "zc"), ("cs", "nc")])
def test_both_alus_write_the_same_accumulator(add_cond, mul_cond):
    assert_only([both(W["r0"], W["r0"], add_cond, mul_cond)] + END, "same_destination", 0, None)


@pytest.mark.parametrize("add_cond, mul_cond", [
    ("zs", "zc"), ("zc", "zs"), ("ns", "nc"), ("nc", "ns"), ("cs", "cc"), ("cc", "cs")])
def test_exactly_opposite_conditions_are_fine(add_cond, mul_cond):
    assert_clean([both(W["r2"], W["r2"], add_cond, mul_cond)] + END)


def test_r5_written_from_both_sides_is_one_register():
    assert_only([both(W["r5"], W["r5"])] + END, "same_destination", 0, None)


def test_peripheral_written_by_both_alus_even_with_opposite_conditions():
    # facts 5.7: a conditional TMU/VPM write still fires, so opposite conditions do not help.
    assert_only([both(W["vpm"], W["vpm"], "zs", "zc")] + END, "same_destination", 0, None)
    assert_only([both(W["host_int"], W["host_int"])] + END, "same_destination", 0, None)


def test_same_address_on_the_two_sides_is_two_registers():
    # ws sends the ALUs to opposite sides: ra5/rb5, vr_setup/vw_setup are different registers.
    assert_clean([both(5, 5), both(W["vr_setup"], W["vr_setup"])] + nops(2) + END)


# --- waivers ----------------------------------------------------------------------------------

@pytest.mark.parametrize("waived_at", [0, 1])
def test_waiver_on_either_instruction_skips_the_violation(waived_at):
    waivers = [()] * 5
    waivers[waived_at] = ("regfile_raw",)
    hazards.check(FakeProgram([add(5), read_a(5)] + END, waivers))


def test_waiver_for_another_rule_does_not_skip():
    waivers = [("sfu_r4_read",), "unif_addr"] + [()] * 3
    with pytest.raises(HazardError) as info:
        hazards.check(FakeProgram([add(5), read_a(5)] + END, waivers))
    assert info.value.rule == "regfile_raw"


def test_waiver_on_a_third_instruction_does_not_skip():
    waivers = [(), (), ("regfile_raw",)] + [()] * 3
    assert [v.rule for v in hazards.violations(
        FakeProgram([add(5), read_a(5), Instruction()] + END, waivers))] == ["regfile_raw"]


def test_single_instruction_rule_waived_on_its_instruction():
    waivers = [(), {"rotate_source"}] + [()] * 3
    hazards.check(FakeProgram([Instruction(), rotate(ROTATE_1, MUX_A, 0)] + END, waivers))


def test_unknown_waiver_name_is_an_error_naming_the_instruction():
    waivers = [(), ("regfile_rawr",)] + [()] * 3
    with pytest.raises(HazardError) as info:
        hazards.violations(FakeProgram(nops(2) + END, waivers))
    assert info.value.location == SourceLocation(FILE, 101)
    assert "'regfile_rawr'" in str(info.value) and "PC 0x8" in str(info.value)


# --- programs without source information ------------------------------------------------------

class BareProgram:
    def __init__(self, instructions):
        self.instructions = instructions


def test_program_without_source_map_or_waivers():
    violations = hazards.violations(BareProgram([add(5), read_a(5)] + END))
    assert [(v.rule, v.pc, v.other_pc, v.location) for v in violations] == \
        [("regfile_raw", 8, 0, None)]
    assert violations[0].message.endswith("at PC 0x8 conflicts with PC 0x0")


def test_program_built_from_instruction_words():
    program = Program.from_instructions([add(W["sfu_recip"]), add(W["r0"], R4, R4)] + END)
    with pytest.raises(HazardError) as info:
        hazards.check(program)
    assert info.value.rule == "sfu_r4_read" and info.value.pcs == (8, 0)


def test_every_rule_has_a_description():
    assert all(isinstance(text, str) and text for text in hazards.RULES.values())
    assert {v.rule for v in hazards.violations(FakeProgram([]))} <= set(hazards.RULES)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, (1 << 64) - 1), max_size=12))
def test_any_word_sequence_is_checked_without_crashing(words):
    violations = hazards.violations(BareProgram([decode(w) for w in words]))
    assert all(v.rule in hazards.RULES for v in violations)
    assert all(0 <= v.index < len(words) for v in violations if v.index is not None)


# --- DSL kernels: errors point at the lines of the offending calls ---------------------------
# Lines are found through their "# @name" marker comments, not through the DSL's source map.

def _marked_lines():
    with open(__file__) as source:
        return {match.group(1): number for number, text in enumerate(source, 1)
                for match in [re.search(r"# @(\w+)\s*$", text)] if match}


MARK = _marked_lines()


def assert_kernel_error(body, rule, offender, other):
    with pytest.raises(HazardError) as info:
        kernel(body).assemble()
    error = info.value
    assert error.rule == rule
    assert (error.location.file, error.location.line) == (__file__, MARK[offender])
    if other is None:
        assert error.other_location is None
    else:
        assert (error.other_location.file, error.other_location.line) == (__file__, MARK[other])
        assert f"conflicts with {__file__}:{MARK[other]} (PC " in str(error)
    return error


def test_dsl_regfile_raw():
    def body(a):
        a.mov(ra1, uniform)  # @raw_write
        a.add(r0, ra1, 1)  # @raw_read
        a.exit()
    error = assert_kernel_error(body, "regfile_raw", "raw_read", "raw_write")
    assert error.pcs == (8, 0)
    assert str(error).startswith(f"{__file__}:{MARK['raw_read']}: [regfile_raw] read of ra1 ")


def test_dsl_regfile_raw_waived_on_the_reading_call():
    def body(a):
        a.mov(ra1, uniform)
        a.add(r0, ra1, 1, waive="regfile_raw")
        a.exit()
    assert len(kernel(body).assemble()) == 6


def test_dsl_unknown_waiver_names_the_call():
    def body(a):
        a.mov(r0, uniform, waive="regfile_rwa")  # @bad_waiver
        a.exit()
    with pytest.raises(HazardError) as info:
        kernel(body).assemble()
    assert (info.value.location.file, info.value.location.line) == (__file__, MARK["bad_waiver"])
    assert "regfile_rwa" in str(info.value)


def test_dsl_sfu_r4_read():
    def body(a):
        a.mov(sfu_recip, r0)  # @sfu_write
        a.nop()
        a.fmul(r1, r4, r4)  # @r4_read
        a.exit()
    assert_kernel_error(body, "sfu_r4_read", "r4_read", "sfu_write")


def test_dsl_sfu_r4_overlap():
    def body(a):
        a.mov(sfu_exp, r0)  # @sfu_pending
        a.nop(sig="ldtmu0")  # @ldtmu_overlap
        a.exit()
    assert_kernel_error(body, "sfu_r4_overlap", "ldtmu_overlap", "sfu_pending")


def test_dsl_branch_in_delay_slot():
    def body(a):
        a.branch("end", cond="any_zc")  # @first_branch
        a.nop()
        a.nop()
        a.branch("end")  # @second_branch
        a.nop()
        a.nop()
        a.nop()
        a.label("end")
        a.exit()
    assert_kernel_error(body, "branch_delay_slot", "second_branch", "first_branch")


def test_dsl_thread_switch_slot():
    def body(a):
        a.nop(sig="thread_switch")  # @switch
        a.nop(sig="last_thread_switch")  # @switch_in_slot
        a.nop()
        a.nop()
        a.exit()
    assert_kernel_error(body, "thread_switch_slot", "switch_in_slot", "switch")


def test_dsl_thrend_regfile_write():
    def body(a):
        a.mov(ra1, r0, sig="thrend")  # @thrend_write
        a.nop()
        a.nop()
    assert_kernel_error(body, "thrend_regfile_write", "thrend_write", None)


def test_dsl_thrend_slots_access():
    def body(a):
        a.nop(sig="thrend")  # @thrend
        a.read(uniform)  # @late_uniform
        a.nop()
    assert_kernel_error(body, "thrend_slots_access", "late_uniform", "thrend")


def test_dsl_program_end():
    def body(a):
        a.mov(r0, uniform)
        a.mov(r1, r0)  # @last_call
    assert_kernel_error(body, "program_end", "last_call", None)


def test_dsl_unif_addr():
    def body(a):
        a.mov(unif_addr, r0)  # @unif_addr_write
        a.mov(r1, uniform)  # @early_uniform
        a.exit()
    assert_kernel_error(body, "unif_addr", "early_uniform", "unif_addr_write")


def test_dsl_tmu_noswap():
    def body(a):
        a.mov(tmu_noswap, 1)  # @noswap
        a.nop()
        a.nop()
        a.mov(tmu0_s, r0)  # @early_tmu
        a.nop(sig="ldtmu0")
        a.exit()
    assert_kernel_error(body, "tmu_noswap", "early_tmu", "noswap")


def test_dsl_rotate_acc():
    def body(a):
        a.mov(r1, uniform)  # @acc_write
        a.fmul(r0, r1, r2, rotate=3)  # @rotate_acc
        a.exit()
    assert_kernel_error(body, "rotate_acc", "rotate_acc", "acc_write")


def test_dsl_rotate_r5():
    def body(a):
        a.mov(r5rep, r0)  # @r5_write
        a.fmul(r0, r1, r2, rotate=r5)  # @rotate_r5
        a.exit()
    assert_kernel_error(body, "rotate_r5", "rotate_r5", "r5_write")


def test_dsl_rotate_source_and_its_waiver():
    def body(a, waive=()):
        a.fmul(r0, ra1, r2, rotate=3, waive=waive)  # @rotate_ra
        a.exit()
    assert_kernel_error(body, "rotate_source", "rotate_ra", None)
    kernel(body).assemble(waive="rotate_source")


def test_dsl_one_peripheral():
    def body(a):
        a.mov(tmu0_s, r0).mov(sfu_recip, r1)  # @two_peripherals
        a.nop(sig="ldtmu0")
        a.nop()
        a.exit()
    assert_kernel_error(body, "one_peripheral", "two_peripherals", None)


def test_dsl_same_destination():
    def body(a):
        a.mov(r0, r1, cond="zs").mov(r0, r2, cond="ns")  # @same_dest
        a.exit()
    assert_kernel_error(body, "same_destination", "same_dest", None)


def test_dsl_compliant_kernel_assembles():
    def body(a):
        a.mov(ra1, uniform)
        a.mov(sfu_recip, uniform)
        a.ldi(r1, 42)
        a.mov(r2, element_number)
        a.add(r1, r1, ra1)
        a.fmul(r3, r4, r2)
        a.fadd(r0, r1, r1, cond="zs").mov(r0, r2, cond="zc")
        a.fmul(r2, r0, r1, rotate=2, waive="rotate_acc")
        a.label("loop")
        a.sub(r1, r1, 1, sf=True)
        a.branch("loop", cond="any_zc")
        a.nop()
        a.nop()
        a.mov(ra2, r1)
        a.mov(r0, ra1)
        a.exit()
    program = kernel(body).assemble()
    assert hazards.violations(program) == []
