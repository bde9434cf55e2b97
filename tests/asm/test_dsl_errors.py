"""Every operand conflict raises AssemblerError naming this file, the line of the offending
call, and what conflicts."""

import numpy as np
import pytest

import asm
from asm import (AssemblerError, Assembler, kernel, lookup, r0, r1, r2, r3, r4, ra, rb, uniform,
                 vpm_read_setup)


def error_of(call, line=None):
    """Run ``call`` (a lambda written on the offending line, unless ``line`` says where that
    is); return the error and that line."""
    with pytest.raises(AssemblerError) as info:
        call()
    return info.value, line or call.__code__.co_firstlineno


def called_at(call):
    """Run ``call`` (a lambda); return the line it is written on."""
    call()
    return call.__code__.co_firstlineno


def assert_error(call, *fragments, line=None):
    """``call`` raises an AssemblerError at its line whose message has every fragment."""
    error, line = error_of(call, line)
    assert error.location is not None, error
    assert (error.location.file, error.location.line) == (__file__, line)
    assert f"{__file__}:{line}" in str(error)
    for fragment in fragments:
        assert fragment in error.message, error.message
    return error


def assert_call_error(call, a, *fragments):
    """As assert_error for ``call(a)``, a parametrized lambda: the error is at its line."""
    return assert_error(lambda: call(a), *fragments, line=call.__code__.co_firstlineno)


@pytest.fixture
def a():
    return Assembler()


def test_two_regfile_a_reads(a):
    assert_error(lambda: a.add(r0, ra[1], ra[2]), "two different regfile A reads", "ra1", "ra2")


def test_two_regfile_b_reads(a):
    assert_error(lambda: a.fadd(r0, rb[1], r1).fmul(r2, rb[2], r1), "two different regfile B reads",
                 "rb1", "rb2")


def test_two_sided_register_with_both_ports_taken(a):
    assert_error(lambda: a.add(r0, ra[1], rb[2]).fmul(r1, uniform, r1), "uniform", "ra1", "rb2")


def test_small_immediate_and_regfile_b_read(a):
    assert_error(lambda: a.add(r0, rb[1], 1), "small immediate 1", "regfile-B read rb1")


def test_two_different_small_immediates(a):
    assert_error(lambda: a.add(r0, 1, 2), "two different small immediates 1 and 2")


def test_rotation_and_small_immediate(a):
    assert_error(lambda: a.fmul(r0, r1, 2, rotate=3), "two different small immediates rotate=3 and 2")


@pytest.mark.parametrize("value", [16, -17, 3.0, 0.3, -1.0])
def test_not_a_small_immediate(a, value):
    assert_error(lambda: a.add(r0, r1, value), f"{value!r} is not representable as a small immediate",
                 "ldi")


def test_immediate_out_of_32_bits(a):
    assert_error(lambda: a.ldi(r0, 1 << 32), "does not fit in 32 bits")


def test_per_element_value_out_of_range(a):
    assert_error(lambda: a.ldi(r0, [0, 1, 2, -1] * 4), "per-element ldi (signed) takes values -2..1")


def test_pack_on_the_wrong_side(a):
    assert_error(lambda: a.add(rb[1], r0, r1, pack="16a"), "pack 16a (pm=0)", "rb1")


def test_colour_pack_on_add(a):
    assert_error(lambda: a.fadd(r0, r1, r2, pack="8888c"), "colour pack", "ADD op cannot use it")


def test_pm_conflict_pack_and_unpack(a):
    assert_error(lambda: a.fmul(r0, ra[1].unpack("16a"), r1, pack="8888c"), "pm conflict",
                 "MUL colour pack needs pm=1", "regfile-A unpack needs pm=0")


def test_pm_conflict_two_unpacks(a):
    assert_error(lambda: a.fadd(r0, ra[1].unpack("16a"), r4.unpack("8a")), "pm conflict")


def test_two_packs(a):
    assert_error(lambda: a.add(ra[1], r0, r1, pack="16a").fmul(r2, r0, r1, pack="8888c"), "two packs")


def test_two_signals(a):
    assert_error(lambda: a.add(r0, r1, r2, sig="ldtmu0").fmul(r3, r1, r2, sig="ldtmu1"), "two signals",
                 "ldtmu0", "ldtmu1")


def test_signal_with_small_immediate(a):
    assert_error(lambda: a.add(r0, r1, 1, sig="ldtmu0"), "signal ldtmu0 cannot ride with 1")


def test_signal_with_ldi(a):
    assert_error(lambda: a.ldi(r0, 5, sig="thrend"), "signal thrend cannot ride with a load immediate")


def test_signal_with_branch(a):
    assert_error(lambda: a.branch("x", sig="thrend"), "signal thrend cannot ride with a branch")


@pytest.mark.parametrize("operand", [rb[1], r1, uniform])
def test_unpack_on_a_non_a_non_r4_operand(a, operand):
    # uniform can be read through A, so only the B-only and accumulator cases fail
    if operand is uniform:
        a.fadd(r0, uniform.unpack("16a"), r1)
        return
    assert_error(lambda: a.fadd(r0, operand.unpack("16a"), r1), "unpack applies only to regfile-A reads")


def test_unpack_mismatch_on_one_regfile_read(a):
    assert_error(lambda: a.fadd(r0, ra[1].unpack("16a"), ra[1]), "different unpack")


def test_both_alus_write_the_same_side(a):
    assert_error(lambda: a.add(ra[1], r0, r1).fmul(ra[2], r0, r1), "cannot route the writes",
                 "ADD writes ra1 (through regfile A)", "MUL writes ra2 (through regfile A)")


def test_inconsistent_forced_ws(a):
    assert_error(lambda: a.mov(ra[1], r0, ws=1), "ws=1 is inconsistent", "ra1")


def test_rotation_on_an_add_op(a):
    assert_error(lambda: a.add(r0, r1, r2, rotate=2), "only the MUL ALU result can be rotated")


def test_rotation_amount(a):
    assert_error(lambda: a.fmul(r0, r1, r2, rotate=16), "rotate=16", "1..15")


def test_sf_on_mul_with_an_add_op(a):
    assert_error(lambda: a.add(r0, r1, r2).fmul(r3, r1, r2, sf=True), "flags come from the ADD result")


def test_alu_already_used(a):
    assert_error(lambda: a.add(r0, r1, r2).sub(r3, r1, r2), "ADD (add) already used")


def test_write_to_a_read_only_register(a):
    assert_error(lambda: a.mov(uniform, r1), "uniform cannot be written")
    assert_error(lambda: a.mov(r4, r1), "r4 cannot be written")


def test_r5_write_needs_a_side(a):
    assert_error(lambda: a.mov(asm.r5, r1), "r5quad or r5rep")


def test_read_of_a_write_only_register(a):
    assert_error(lambda: a.mov(r0, asm.vr_setup), "vr_setup cannot be read")


def test_wrong_operand_count(a):
    assert_error(lambda: a.fadd(r0, r1), "fadd takes a destination and 2 source(s)")


def test_undefined_label(a):
    a.label("loop")
    branch_line = called_at(lambda: a.branch("lopo"))
    with pytest.raises(AssemblerError) as info:
        a.assemble(check=False)
    assert (info.value.location.file, info.value.location.line) == (__file__, branch_line)
    assert "undefined label 'lopo'" in info.value.message and "did you mean loop" in info.value.message


def test_label_in_another_scope_is_not_visible(a):
    with a.scope():
        a.label("inner")
    line = called_at(lambda: a.branch("inner"))
    with pytest.raises(AssemblerError) as info:
        a.assemble(check=False)
    assert info.value.location.line == line and "undefined label 'inner'" in info.value.message


def test_duplicate_label(a):
    a.label("x")
    assert_error(lambda: a.label("x"), "duplicate label 'x'", f"{__file__}:")


def test_branch_target_out_of_range(a):
    assert_error(lambda: a.branch(1 << 32, absolute=True), "branch target out of range")


def test_branch_target_misaligned(a):
    assert_error(lambda: a.branch(12), "not a multiple of 8")


def test_branch_register_must_be_regfile_a(a):
    assert_error(lambda: a.branch("x", reg=rb[1]), "ra0..ra31")


def test_unknown_op_suggests(a):
    assert_error(lambda: a.fadd2(r0, r1, r2), "unknown op or method 'fadd2'", "fadd")


def test_unknown_op_on_a_handle_suggests(a):
    handle = a.nop()
    assert_error(lambda: handle.fmull(r0, r1, r2), "fmul")


def test_unknown_condition_suggests(a):
    assert_error(lambda: a.mov(r0, r1, cond="zz"), "unknown condition 'zz'", "zs")


def test_unknown_branch_condition_suggests(a):
    assert_error(lambda: a.branch("x", cond="any_z"), "unknown branch condition", "any_zs")


def test_unknown_signal_suggests(a):
    assert_error(lambda: a.nop(sig="ldtmu3"), "unknown signal 'ldtmu3'", "ldtmu0")


def test_unknown_pack_and_unpack_names(a):
    assert_error(lambda: a.add(ra[1], r0, r1, pack="16c"), "unknown pack mode '16c'")
    with pytest.raises(AssemblerError, match="unknown unpack mode '8e'"):
        ra[1].unpack("8e")


def test_unknown_register_name_suggests():
    with pytest.raises(AssemblerError, match="did you mean uniform"):
        lookup("unifrom")


def test_vpm_setup_error_in_a_macro_points_at_the_macro_call(a):
    assert_error(lambda: a.setup_vpm_read(num=17, y=0), "num=17 is out of range 1..16")
    with pytest.raises(AssemblerError, match="y=64 is out of range 0..63"):
        vpm_read_setup(1, y=64)


def test_kernel_errors_point_into_the_kernel_body():
    @kernel
    def broken(a):
        a.mov(r0, uniform)
        a.add(r0, ra[1], ra[2])
    with pytest.raises(AssemblerError) as info:
        broken.assemble()
    assert info.value.location.line == broken.__wrapped__.__code__.co_firstlineno + 3  # from @kernel
    assert info.value.location.text == "a.add(r0, ra[1], ra[2])"


def test_location_provider_is_used(a):
    text_location = asm.SourceLocation("kernel.qasm", 7)
    b = Assembler(location_provider=lambda: text_location)
    with pytest.raises(AssemblerError) as info:
        b.add(r0, ra[1], ra[2])
    assert info.value.location == text_location and str(info.value).startswith("kernel.qasm:7: ")


def test_undefined_label_without_any_labels(a):
    a.branch("x")
    with pytest.raises(AssemblerError, match="undefined label 'x'; none are defined"):
        a.assemble(check=False)


def test_an_error_leaves_the_program_unchanged(a):
    handle = a.add(r0, ra[1], r2)
    word = a.assemble(check=False).words
    with pytest.raises(AssemblerError):
        handle.fmul(r3, ra[2], r1)
    with pytest.raises(AssemblerError):
        a.add(r0, ra[1], ra[2])
    with pytest.raises(AssemblerError):
        a.ldi(r0, 1 << 40)
    with pytest.raises(AssemblerError):
        handle.fmul(r3, r1, r2, waive=3)        # a bad waiver is found before the op is added
    assert a.assemble(check=False).words == word


# --- bad calls: Python would raise TypeError, a kernel author gets an AssemblerError ------------

def test_misspelt_keyword_suggests_the_right_one(a):
    assert_error(lambda: a.fadd(r0, r1, r2, cnd="zs"), "fadd: unknown keyword argument 'cnd'",
                 "did you mean cond?")
    assert_error(lambda: a.fadd(r0, r1, r2).fmul(r3, r1, r2, rotat=2), "fmul: unknown keyword",
                 "did you mean rotate?")
    assert_error(lambda: a.branch("x", conditon="any_zs"), "did you mean cond?")
    assert_error(lambda: a.nop(sgi="thrend"), "did you mean sig?")


def test_misspelt_keyword_of_a_macro_option(a):
    assert_error(lambda: a.setup_vpm_read(num=1, y=0, sizee=16), "vpm_read_setup: unknown keyword "
                 "argument 'sizee'", "did you mean size?")


@pytest.mark.parametrize("call, fragment", [
    (lambda a: a.fadd(), "fadd: missing a required argument: 'dst'"),
    (lambda a: a.ldi(r0), "ldi: missing a required argument: 'value'"),
    (lambda a: a.sema_acquire(), "sema_acquire: missing a required argument: 'number'"),
    (lambda a: a.exit(True, 3), "exit: too many positional arguments"),
    (lambda a: a.setup_vpm_read(num=1), "setup_vpm_read: missing a required argument: 'y'"),
    (lambda a: a.nop().fmul(), "fmul: missing a required argument: 'dst'"),
])
def test_missing_or_extra_arguments(a, call, fragment):
    error = assert_call_error(call, a, fragment, "it is called as")
    assert "self" not in error.message


@pytest.mark.parametrize("call, fragment", [
    (lambda a: a.fadd(r0, r1, r2, r3), "fadd takes a destination and 2 source(s), got 3"),
    (lambda a: a.not_(r0, r1, r2), "not takes a destination and 1 source(s), got 2"),
    (lambda a: a.mov(r0, r1, r2), "mov takes a destination and 1 source(s), got 2"),
    (lambda a: a.nop().mov(r0), "mov takes a destination and 1 source(s), got 0"),
])
def test_wrong_number_of_operands(a, call, fragment):
    assert_call_error(call, a, fragment)


@pytest.mark.parametrize("operand", [np.arange(16, dtype=np.uint32), None, object(), 1j, True])
def test_non_register_sources(a, operand):
    assert_error(lambda: a.fadd(r0, operand, r2), "is neither a register nor a number")


@pytest.mark.parametrize("operand", [np.zeros(3), None, 5, 1.0])
def test_non_register_destinations(a, operand):
    assert_error(lambda: a.fadd(operand, r1, r2), "is not a register")
    assert_error(lambda: a.ldi(operand, 5), "ldi: destination", "is not a register")


def test_register_names_as_strings_say_what_to_write(a):
    assert_error(lambda: a.mov(r0, "uniform"), "source 'uniform' (a string: the register is asm.uniform")
    assert_error(lambda: a.ldi("r0", 5), "destination 'r0' (a string")
    assert_error(lambda: a.start_dma_load(None), "mov: source None")


@pytest.mark.parametrize("value", [1 << 32, -(1 << 31) - 1])
def test_ldi_ints_outside_32_bits(a, value):
    assert_error(lambda: a.ldi(r0, value), f"{value} does not fit in 32 bits", "-2147483648..4294967295")


@pytest.mark.parametrize("value", [float("nan"), np.float32("nan")])
def test_nan_is_refused_with_a_way_out(a, value):
    assert_error(lambda: a.ldi(r0, value), "NaN has many float32 bit patterns", "0x7fc00000")
    assert_error(lambda: a.fadd(r0, r1, value), "NaN")


@pytest.mark.parametrize("name", [3, None, b"loop", ""])
def test_label_and_scope_names_must_be_strings(a, name):
    assert_error(lambda: a.label(name), "must be a non-empty string")
    assert_error(lambda: a.scope(name), "scope name", "must be a non-empty string")


@pytest.mark.parametrize("call, fragment", [
    (lambda a: a.mov(r0, r1, sf="no"), "sf='no': give True or False"),
    (lambda a: a.ldi(r0, 1, sf=2), "sf=2: give True or False"),
    (lambda a: a.branch(0, absolute="yes"), "absolute='yes'"),
    (lambda a: a.setup_vpm_write(y=0, horizontal="no"), "horizontal='no'"),
    (lambda a: a.mov(ra[1], r1, pack=["16a"]), "unknown pack mode ['16a']"),
    (lambda a: a.fmul(r0, r1, r2, rotate=np.array([1, 2])), "rotation is by 1..15"),
    (lambda a: a.mov(r0, r1, ws=np.array([0, 1])), "write swap is 0 or 1"),
    (lambda a: a.mov(r0, r1, waive=3), "waive=3: give a rule name"),
    (lambda a: a.mutex_acquire(r1), "waive=r1: give a rule name"),
    (lambda a: a.sema_acquire(True), "semaphore number True"),
    (lambda a: a.sema_acquire(1, cond="zs"), "cond='zs' without a destination"),
    (lambda a: a.ldi((), 7, cond="never"), "cond='never' without a destination"),
    (lambda a: a.setup_dma_load(rows=1, rowlen="16", y=0), "rowlen='16' is not an int"),
    (lambda a: a.setup_vpm_read(num=1, y=16, x=1.5, horizontal=False), "x=1.5 is not an int"),
])
def test_bad_option_values(a, call, fragment):
    assert_call_error(call, a, fragment)


def test_errors_outside_an_assembler_call_name_the_caller_line():
    assert_error(lambda: ra[1.5], "ra[1.5]: register file addresses are 0..63")
    assert_error(lambda: rb["3"], "rb['3']")
    assert_error(lambda: ra[1].unpack("8e"), "unknown unpack mode '8e'")
    assert_error(lambda: vpm_read_setup(1, y=64), "y=64 is out of range 0..63")
    assert_error(lambda: vpm_read_setup(1, y=0, stide=2), "did you mean stride")
    assert_error(lambda: lookup("unifrom"), "did you mean uniform")


def test_numpy_ints_index_register_files():
    assert ra[np.int64(3)] is ra[3]


def test_a_type_error_from_inside_is_not_disguised(a, monkeypatch):
    # Only a call that does not fit the signature becomes an argument error.
    def broken(*args, **kwargs):
        raise TypeError("internal")
    monkeypatch.setattr(asm.builder, "build_load_imm", broken)
    with pytest.raises(TypeError, match="internal"):
        a.ldi(r0, 5)


def test_reads_fit_is_the_read_port_rule():
    """One read address per regfile, and a small immediate takes regfile B's (the reference
    guide's raddr_a / raddr_b): the answers generators get before pairing operations."""
    from asm import ra, rb, r1
    from asm.builder import reads_fit
    assert reads_fit([ra[1], rb[2], r1])
    assert reads_fit([ra[1], ra[1]])                 # one address, read twice
    assert not reads_fit([ra[1], ra[2]])
    assert not reads_fit([rb[1], rb[3]])
    assert not reads_fit([rb[1], 1])                 # the immediate needs raddr_b
    assert reads_fit([ra[1], 1, 1])
    assert not reads_fit([ra[1], 1, 2])              # one small-immediate field
