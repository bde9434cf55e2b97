"""QPU semantics end to end: programs written with the DSL (or raw words where the DSL refuses
an encoding on purpose), run on the emulator, compared with values derived by hand from the
fact sheet and with numpy."""

import numpy as np
import pytest

from asm import (element_number, host_int, kernel, qpu_number, r0, r1, r2, r3, r4, r5, r5quad,
                 r5rep, ra, ra1, ra2, ra3, ra10, ra11, ra31, rb, rb1, rb2, rb3, sfu_exp, sfu_log,
                 sfu_recip, sfu_recipsqrt, tmu0_s, unif_addr, unif_addr_rel, uniform)
from vc4nn.emulator import EmulatorDevice

from .conftest import as_float, run_program

ELEM = np.arange(16, dtype=np.uint32)

# Bit positions of an ALU instruction (facts §1), for words the DSL will not write.
ALU_BITS = {"sig": 60, "unpack": 57, "pm": 56, "pack": 52, "cond_add": 49, "cond_mul": 46,
            "sf": 45, "ws": 44, "waddr_add": 38, "waddr_mul": 32, "op_mul": 29, "op_add": 24,
            "raddr_a": 18, "raddr_b": 12, "add_a": 9, "add_b": 6, "mul_a": 3, "mul_b": 0}
ALU_NOP = dict(sig=1, waddr_add=39, waddr_mul=39, raddr_a=39, raddr_b=39)


def alu_word(**fields):
    values = {**ALU_NOP, **fields}
    return sum(v << ALU_BITS[k] for k, v in values.items())


def load_vector(a, dst):
    """dst = the 16 words at the address in the next uniform (through TMU0; uses r0, r1)."""
    a.mov(r0, element_number)
    a.shl(r0, r0, 2)
    a.add(r0, r0, uniform)
    a.mov(tmu0_s, r0)
    a.nop(sig="ldtmu0")
    a.mov(dst, r4)


def vector_buffers(device, *vectors):
    return [device.array(np.asarray(v, dtype=np.uint32)) for v in vectors]


def run_with_vectors(run_body, body, outputs, vectors, **options):
    """Run ``body(a)`` after loading ``vectors`` into ra10, ra11, ...; keep the device alive
    while the vector buffers are used."""
    device = EmulatorDevice(**options)

    def full(a):
        for i in range(len(vectors)):
            load_vector(a, ra[10 + i])
        a.nop()
        body(a)
    return run_body(full, outputs, uniforms=vector_buffers(device, *vectors), device=device)


# --- reads ----------------------------------------------------------------------------------

def test_element_number_qpu_number_and_uniforms(run_body):
    def body(a):
        a.mov(r1, element_number)
        a.mov(r2, qpu_number)
        a.mov(r3, uniform)
        a.add(r3, r3, uniform)
    out, result = run_body(body, [r1, r2, r3], uniforms=[[5, 6], [7, 9], [1, 1]], num_qpus=3)
    for q in range(3):
        assert out[q, 0].tolist() == list(range(16))
        assert out[q, 1].tolist() == [q] * 16
    assert out[:, 2, 0].tolist() == [11, 16, 2]
    assert result.host_interrupts == 3


def test_ra39_and_rb39_return_the_last_value_read_from_that_file(run_body):
    def body(a):
        a.ldi(ra1, 1234)
        a.ldi(rb1, 5678)
        a.nop()
        a.mov(r1, ra1).mov(r2, rb1)
        a.mov(r1, ra[39]).mov(r2, rb[39])
    out, _ = run_body(body, [r1, r2])
    assert out[0, 0, 0] == 1234 and out[0, 1, 0] == 5678


def test_uniforms_address_absolute_and_relative(run_body):
    device = EmulatorDevice()
    table = device.array(np.array([100, 200, 300], dtype=np.uint32))

    def body(a):
        a.mov(unif_addr, uniform)            # jump to the table
        a.nop()
        a.nop()
        a.mov(r1, uniform)                   # 100
        a.mov(r2, uniform).mov(unif_addr_rel, -1)   # 200, then step back one uniform
        a.nop()
        a.nop()
        a.mov(r3, uniform)                   # 200 again
    out, _ = run_body(body, [r1, r2, r3], uniforms=[table], device=device)
    assert out[0, :, 0].tolist() == [100, 200, 200]


# --- ALU ops through the QPU (plumbing: muxes, ports, writes) --------------------------------

def test_add_and_mul_ops_through_the_qpu(run_body):
    x = np.array([1.5, -2.0, 3.25, 1e-40] + [0.5] * 12, dtype=np.float32).view(np.uint32)
    y = (ELEM * 7 + 3).astype(np.uint32)

    def body(a):
        a.fadd(r2, ra10, ra10).fmul(r3, ra10, ra10)
        a.shl(ra2, ra11, 3).mul24(rb2, ra11, ra11)
        a.itof(ra3, ra11)
        a.clz(rb3, ra11)
    out, _ = run_with_vectors(run_body, body, [r2, r3, ra2, rb2, ra3, rb3], [x, y])
    fx = x.view(np.float32)
    expected_sum = np.where(np.abs(fx) < 1e-38, 0, fx + fx).astype(np.float32)
    assert np.array_equal(as_float(out[0, 0]), expected_sum)
    assert np.array_equal(as_float(out[0, 1]), np.where(np.abs(fx) < 1e-38, 0, fx * fx))
    assert out[0, 2].tolist() == [(int(v) << 3) & 0xFFFFFFFF for v in y]
    assert out[0, 3].tolist() == [int(v) * int(v) for v in y]
    assert as_float(out[0, 4]).tolist() == [float(v) for v in y]
    assert out[0, 5].tolist() == [32 - int(v).bit_length() for v in y]


def test_unary_ops_read_mux_a(run_body):
    # not with different sources in the two muxes: the result comes from mux a (isa.py).
    def body(a):
        a.ldi(r1, 0x0F0F0F0F)
        a.ldi(r2, 0x12345678)
        a.raw(alu_word(op_add=23, cond_add=1, waddr_add=35, add_a=1, add_b=2))   # not r3, r1, r2
    out, _ = run_body(body, [r3])
    assert out[0, 0, 0] == 0xF0F0F0F0


def test_load_immediates(run_body):
    def body(a):
        a.ldi(r1, 0xDEADBEEF)
        a.ldi(r2, [1, 0, -1, -2] * 4)
        a.ldi(r3, [0, 1, 2, 3] * 4)
    out, _ = run_body(body, [r1, r2, r3])
    assert out[0, 0].tolist() == [0xDEADBEEF] * 16
    assert out[0, 1].view(np.int32).tolist() == [1, 0, -1, -2] * 4
    assert out[0, 2].tolist() == [0, 1, 2, 3] * 4


def test_per_element_load_immediate_bits_by_hand(run_body):
    # Mode 1 (signed): element i gets (bit 16+i, bit i). 0x0003_0005: element 0 -> 0b11 = -1,
    # element 1 -> 0b10 = -2, element 2 -> 0b01 = 1, the rest 0.
    word = (14 << 60) | (1 << 57) | (1 << 49) | (33 << 38) | (39 << 32) | 0x00030005
    out, _ = run_body(lambda a: a.raw(word), [r1])
    assert out[0, 0].view(np.int32).tolist() == [-1, -2, 1] + [0] * 13


# --- conditions and flags -------------------------------------------------------------------

@pytest.mark.parametrize("cond, expected", [
    ("zs", ELEM == 8), ("zc", ELEM != 8), ("ns", ELEM < 8), ("nc", ELEM >= 8),
    ("cs", ELEM < 8), ("cc", ELEM >= 8), ("always", ELEM >= 0), ("never", ELEM < 0)])
def test_write_conditions_against_flags(run_body, cond, expected):
    def body(a):
        a.mov(r1, element_number)
        a.ldi(r2, 8)
        a.sub(r3, r1, r2, sf=True)      # Z: elem == 8; N and C (borrow): elem < 8
        a.mov(r3, 0)
        a.mov(r3, 1, cond=cond)
    out, _ = run_body(body, [r3])
    assert out[0, 0].tolist() == expected.astype(int).tolist()


def test_mul_sets_flags_when_add_is_nop(run_body):
    x = np.array([-1.0, 2.0, 0.0, -3.0] * 4, dtype=np.float32).view(np.uint32)

    def body(a):
        a.fmul(r2, ra10, 1.0, sf=True)
        a.mov(r3, 0)
        a.mov(r3, 1, cond="ns")
        a.mov(r2, 0)
        a.mov(r2, 1, cond="zs")
    out, _ = run_with_vectors(run_body, body, [r3, r2], [x])
    assert out[0, 0].tolist() == [1, 0, 0, 1] * 4
    assert out[0, 1].tolist() == [0, 0, 1, 0] * 4


def test_add_sets_flags_when_both_alus_have_ops(run_body):
    def body(a):
        a.mov(r1, element_number)
        a.sub(r2, r1, r1, sf=True).fmul(r3, r1, r1)     # ADD result 0 everywhere
        a.mov(r3, 0)
        a.mov(r3, 1, cond="zs")
    out, _ = run_body(body, [r3])
    assert out[0, 0].tolist() == [1] * 16


def test_flags_update_only_where_the_condition_holds(run_body):
    # facts §5.2 (errata): flags change only in elements where the flag-setting ALU writes.
    def body(a):
        a.mov(r1, element_number)
        a.and_(r2, r1, 1, sf=True)           # Z set in even elements
        a.sub(r2, r2, 2, cond="zc", sf=True)  # odd elements: 1 - 2 = -1 -> N set, Z clear
        a.mov(r3, 0)
        a.mov(r3, 1, cond="zs")
        a.mov(r2, 0)
        a.mov(r2, 1, cond="ns")
    out, _ = run_body(body, [r3, r2])
    assert out[0, 0].tolist() == [1, 0] * 8
    assert out[0, 1].tolist() == [0, 1] * 8


def test_carry_of_add(run_body):
    def body(a):
        a.ldi(r1, 0xFFFFFFF0)
        a.mov(r2, element_number)
        a.add(r3, r1, r2, sf=True)
        a.add(r3, r3, r2)
        a.mov(r3, 0)
        a.mov(r3, 1, cond="cs")
    out, _ = run_body(body, [r3])
    assert out[0, 0].tolist() == [0] * 16      # 0xFFFFFFF0 + 15 does not carry
    out, _ = run_body(lambda a: (a.ldi(r1, 0xFFFFFFF8), a.mov(r2, element_number),
                                 a.add(r3, r1, r2, sf=True), a.mov(r3, 0),
                                 a.mov(r3, 1, cond="cs")), [r3])
    assert out[0, 0].tolist() == [0] * 8 + [1] * 8


# --- pack and unpack ------------------------------------------------------------------------

@pytest.mark.parametrize("pack, value, expected", [
    ("16a", 0x0001ABCD, 0x1122ABCD),
    ("16b", 0x0001ABCD, 0xABCD4455),
    ("8888", 0x000001F7, 0xF7F7F7F7),
    ("8a", 0x000001F7, 0x112244F7),
    ("8b", 0x000001F7, 0x1122F755),
    ("8c", 0x000001F7, 0x11F74455),
    ("8d", 0x000001F7, 0xF7224455),
    ("16as", 70000, 0x11227FFF),
    ("16bs", 0xFFFE0000, 0x80004455),     # -131072 saturates to -32768
    ("8as", 300, 0x112244FF),
    ("8bs", 0xFFFFFFFB, 0x11220055),      # -5 saturates to 0
    ("8888s", 0x100, 0xFFFFFFFF),
])
def test_regfile_a_int_pack(run_body, pack, value, expected):
    def body(a):
        a.ldi(ra1, 0x11224455)
        a.ldi(r1, value)
        a.mov(ra1, r1, pack=pack)
        a.nop()
        a.mov(r2, ra1)
    out, _ = run_body(body, [r2])
    assert out[0, 0, 0] == expected


def test_pack_32s_saturates_the_exact_sum(run_body):
    def body(a):
        a.ldi(r1, 0x7FFFFFFF)
        a.add(ra1, r1, 1, pack="32s")
        a.add(r3, r1, 1)
        a.mov(r2, ra1)
    out, _ = run_body(body, [r2, r3])
    assert out[0, 0, 0] == 0x7FFFFFFF and out[0, 1, 0] == 0x80000000


def test_regfile_a_float_pack_converts_to_float16(run_body):
    def body(a):
        a.ldi(ra1, 0x11224455)
        a.ldi(r1, 1.5)
        a.fadd(ra1, r1, 0.0, pack="16b")     # float16(1.5) = 0x3E00
        a.ldi(ra2, 0)
        a.ldi(r1, 1e6)
        a.fadd(ra2, r1, 0.0, pack="16as")    # saturation is for ints: Inf = 0x7C00
        a.mov(r2, ra1)
        a.mov(r3, ra2)
    out, _ = run_body(body, [r2, r3])
    assert out[0, 0, 0] == 0x3E004455 and out[0, 1, 0] == 0x00007C00


@pytest.mark.parametrize("pack, expected", [("8888c", 0x80808080), ("8ac", 0x11223380),
                                            ("8dc", 0x80223344)])
def test_mul_colour_pack(run_body, pack, expected):
    def body(a):
        a.ldi(r1, 0x11223344)
        a.ldi(r2, 0.5)
        a.fmul(r1, r2, 1.0, pack=pack)       # rint(0.5 * 255) = 128 (to even)
    out, _ = run_body(body, [r1])
    assert out[0, 0, 0] == expected


def test_mul_colour_pack_clamps_to_0_1(run_body):
    def body(a):
        a.ldi(r1, 0)
        a.ldi(r2, -3.0)
        a.fmul(r1, r2, 1.0, pack="8888c")
        a.ldi(r3, 0)
        a.ldi(r2, 7.0)
        a.fmul(r3, r2, 1.0, pack="8888c")
    out, _ = run_body(body, [r1, r3])
    assert out[0, 0, 0] == 0 and out[0, 1, 0] == 0xFFFFFFFF


def test_mul_colour_pack_of_a_nan_is_zero(run_body):
    # v8max of 0xFFFFFFFF gives the bits of a NaN; the colour pack reads them as a float.
    def body(a):
        a.ldi(r1, 0x11223344)
        a.ldi(r2, 0xFFFFFFFF)
        a.v8max(r1, r2, r2, pack="8ac")
    out, _ = run_body(body, [r1])
    assert out[0, 0, 0] == 0x11223300


@pytest.mark.parametrize("mode, int_result, float_result", [
    ("16a", 0xFFFFBC00, -1.0),             # low half 0xBC00: int16 -17408, float16 -1.0
    ("16b", 0x00003C00, 1.0),              # high half 0x3C00: 15360, float16 1.0
    ("8a", 0x00, 0.0),
    ("8b", 0xBC, 0xBC / 255),
    ("8c", 0x00, 0.0),
    ("8d", 0x3C, 0x3C / 255),
    ("8d_rep", 0x3C3C3C3C, np.uint32(0x3C3C3C3C).view(np.float32)),
])
def test_regfile_a_unpack_int_and_float(run_body, mode, int_result, float_result):
    def body(a):
        a.ldi(ra1, 0x3C00BC00)
        a.nop()
        a.or_(r1, ra1.unpack(mode), 0)       # int consumer
        a.fadd(r2, ra1.unpack(mode), 0.0)    # float consumer
    out, _ = run_body(body, [r1, r2])
    if mode == "16a":
        int_result = np.uint32(np.int32(-17408).view(np.uint32))
    assert out[0, 0, 0] == int_result
    assert as_float(out[0, 1])[0] == np.float32(float_result)


def test_r4_unpack_with_pm1(run_body):
    def body(a):
        a.mov(sfu_exp, 0.0)                  # r4 = 2^0 = 1.0 = 0x3F800000
        a.nop()
        a.nop()
        a.fadd(r1, r4.unpack("8d"), 0.0)     # byte 3 = 0x3F -> 63 / 255
        a.fadd(r2, r4.unpack("16b"), 0.0)    # high half 0x3F80 as float16 = 1.875
    out, _ = run_body(body, [r1, r2])
    assert as_float(out[0, 0])[0] == np.float32(63) / np.float32(255)
    assert as_float(out[0, 1])[0] == 1.875


# --- small immediates and rotation ----------------------------------------------------------

def test_small_immediate_ints_and_floats(run_body):
    def body(a):
        a.mov(r1, -16)
        a.mov(r2, 0.00390625)
        a.mov(r3, 128.0)
    out, _ = run_body(body, [r1, r2, r3])
    assert out[0, 0, 0] == 0xFFFFFFF0
    assert as_float(out[0, 1])[0] == 2.0 ** -8 and as_float(out[0, 2])[0] == 128.0


def test_rotation_codes_also_give_minus_16_to_minus_1_on_mux_b(run_body):
    # facts §1 errata: small immediate 49 rotates the MUL output by 1 and gives -15 to any
    # operand using mux 7. "add r2, r1, <imm 49>" adds -15.
    def body(a):
        a.ldi(r1, 100)
        a.raw(alu_word(sig=13, op_add=12, cond_add=1, waddr_add=34, raddr_b=49, add_a=1,
                       add_b=7))
    out, _ = run_body(body, [r2])
    assert out[0, 0, 0] == 85


@pytest.mark.parametrize("n", [1, 3, 8, 15])
def test_full_rotation_of_accumulators(run_body, n):
    def body(a):
        a.mov(r1, element_number)
        a.nop()
        a.v8min(r2, r1, r1, rotate=n)
    out, _ = run_body(body, [r2])
    assert out[0, 0].tolist() == np.roll(ELEM, n).tolist()


def test_rotation_by_r5(run_body):
    def body(a):
        a.mov(r1, element_number)
        a.ldi(r5rep, 5 + 16)                 # rotation uses bits 3:0 of r5 element 0
        a.nop()
        a.v8min(r2, r1, r1, rotate=r5)
    out, _ = run_body(body, [r2])
    assert out[0, 0].tolist() == np.roll(ELEM, 5).tolist()


def test_rotation_of_a_regfile_source_stays_in_each_quad(run_body):
    # facts §5.12 (errata): sources other than r0-r3 rotate within each quad by n & 3.
    def body(a):
        a.mov(ra1, element_number)
        a.nop()
        a.v8min(r2, ra1, ra1, rotate=5, waive="rotate_source")
    out, _ = run_body(body, [r2])
    expected = [(i & ~3) | ((i - 5) & 3) for i in range(16)]
    assert out[0, 0].tolist() == expected


def test_r5_writes_quad_replicate_and_broadcast(run_body):
    def body(a):
        a.mov(r1, element_number)
        a.shl(r1, r1, 1)
        a.mov(r5quad, r1)
        a.mov(r2, r5)
        a.mov(r5rep, r1)
        a.mov(r3, r5)
    out, _ = run_body(body, [r2, r3])
    assert out[0, 0].tolist() == [0] * 4 + [8] * 4 + [16] * 4 + [24] * 4
    assert out[0, 1].tolist() == [0] * 16


def test_mul_nop_with_a_destination_writes_the_previous_mul_result(run_body):
    # facts §5.17: op_mul 0 with a write address returns the MUL ALU's previous result.
    def body(a):
        a.ldi(r1, 6)
        a.mul24(r2, r1, r1)
        a.raw(alu_word(cond_mul=1, waddr_mul=35))       # nop ; "nop" r3
    out, _ = run_body(body, [r3])
    assert out[0, 0, 0] == 36


# --- branches -------------------------------------------------------------------------------

def test_branch_runs_three_delay_slots_then_jumps(run_body):
    def body(a):
        a.mov(r1, 0)
        a.branch("target")
        a.add(r1, r1, 1)
        a.add(r1, r1, 2)
        a.add(r1, r1, 4)
        a.add(r1, r1, 8)        # skipped
        a.label("target")
    out, _ = run_body(body, [r1])
    assert out[0, 0, 0] == 7


def branch_over_a_write(a, cond):
    """r3 = 0; a ``cond`` branch over three delay slots and an ``ldi r3, 1``."""
    a.ldi(r3, 0)
    a.branch("skip", cond=cond)
    a.nop()
    a.nop()
    a.nop()
    a.ldi(r3, 1)
    a.label("skip")


def branch_taken(run_body, body):
    out, _ = run_body(body, [r3])
    return out[0, 0, 0] == 0


@pytest.mark.parametrize("cond, lanes_set, taken", [
    ("all_zs", 16, True), ("all_zs", 3, False), ("any_zs", 3, True), ("any_zs", 0, False),
    ("all_zc", 0, True), ("all_zc", 1, False), ("any_zc", 15, True), ("any_zc", 16, False),
])
def test_branch_conditions_on_z(run_body, cond, lanes_set, taken):
    def body(a):
        a.mov(r1, element_number)
        a.ldi(r2, lanes_set)
        a.sub(r2, r1, r2, sf=True)      # N set in the first lanes_set elements
        a.mov(r2, 0)
        a.mov(r2, 1, cond="ns")
        a.xor(r2, r2, 1)
        a.or_(r2, r2, r2, sf=True)       # Z set in the first lanes_set elements
        branch_over_a_write(a, cond)
    assert branch_taken(run_body, body) == taken


@pytest.mark.parametrize("cond, taken", [("all_ns", False), ("any_ns", True), ("all_nc", False),
                                         ("any_nc", True), ("all_cs", False), ("any_cs", True),
                                         ("all_cc", False), ("any_cc", True)])
def test_branch_conditions_on_n_and_c(run_body, cond, taken):
    def body(a):
        a.mov(r1, element_number)
        a.sub(r2, r1, 4, sf=True)        # N and C (borrow) in elements 0..3
        branch_over_a_write(a, cond)
    assert branch_taken(run_body, body) == taken


def test_branch_link_and_register_return(run_body):
    def body(a):
        a.ldi(r1, 0)
        a.branch("sub", link=ra2)
        a.nop()
        a.nop()
        a.nop()
        a.add(r1, r1, 10)                # runs after the return
        a.branch("end")
        a.nop()
        a.nop()
        a.nop()
        a.label("sub")
        a.add(r1, r1, 1)
        a.branch(0, absolute=True, reg=ra2)
        a.nop()
        a.nop()
        a.nop()
        a.label("end")
    out, _ = run_body(body, [r1])
    assert out[0, 0, 0] == 11


def test_branch_register_is_read_from_element_15(run_body):
    # facts §5.3: we read element 15. ra3 = 8 * element: element 15 adds 120 bytes = 15
    # instructions, element 0 would add nothing.
    def body(a):
        a.mov(r1, element_number)
        a.shl(ra3, r1, 3)
        a.ldi(r3, 0)
        a.branch("base", reg=ra3)
        a.nop()
        a.nop()
        a.nop()
        a.label("base")
        for _ in range(15):
            a.add(r3, r3, 1)
    out, _ = run_body(body, [r3], check=False)
    assert out[0, 0, 0] == 0


def test_branch_with_odd_raddr_a_sets_flags_only_when_taken(run_body):
    # facts §5.4: bit 45 is raddr_a bit 0 and "sf". A relative "always" branch with raddr_a = 1
    # (reg = 0) sets flags from the link address (non-zero: Z clear), a not-taken one does not.
    def branch_word(cond):
        return (15 << 60) | (cond << 52) | (1 << 51) | (1 << 45) | (39 << 38) | (39 << 32)

    def body(cond):
        def b(a):
            a.mov(r1, 0, sf=True)           # Z set everywhere
            a.raw(branch_word(cond))         # branch +0 (to the instruction after the slots)
            a.nop()
            a.nop()
            a.nop()
            a.mov(r2, 0)
            a.mov(r2, 1, cond="zs")
        return b
    taken, _ = run_body(body(15), [r2])
    not_taken, _ = run_body(body(1), [r2])   # "all Z clear": false
    assert taken[0, 0].tolist() == [0] * 16
    assert not_taken[0, 0].tolist() == [1] * 16


# --- thread end, host interrupts ------------------------------------------------------------

def test_thread_end_runs_two_delay_slots(run_body):
    @kernel
    def program(a):
        a.mov(ra31, uniform)
        a.nop(sig="thrend")
        a.mov(host_int, 1)
        a.mov(host_int, 1)
        a.mov(host_int, 1)               # after the delay slots: never runs
    _, result = run_program(program.assemble(check=False), 0, num_qpus=1)
    assert result.host_interrupts == 2
    assert result.qpus[0].instructions == 4


# --- SFU ------------------------------------------------------------------------------------

@pytest.mark.parametrize("register, function", [
    (sfu_recip, lambda x: 1 / x), (sfu_recipsqrt, lambda x: 1 / np.sqrt(np.abs(x))),
    (sfu_exp, np.exp2), (sfu_log, lambda x: np.log2(np.abs(x)))])
def test_sfu_functions_to_about_13_bits(run_body, register, function):
    x = np.array([0.1, 0.5, 1.0, 1.5, 2.0, 3.0, 7.25, 10.0, 100.0, -20.0, -2.5, 0.01, 33.0,
                  0.75, 5.5, 9.0], dtype=np.float32)

    def body(a):
        a.mov(register, ra10)
        a.nop()
        a.nop()
        a.mov(r2, r4)
    out, _ = run_with_vectors(run_body, body, [r2], [x.view(np.uint32)])
    got = as_float(out[0, 0]).astype(np.float64)
    want = function(x.astype(np.float64))
    assert np.allclose(got, want, rtol=2.0 ** -14, atol=0)
    assert not np.array_equal(got, want.astype(np.float32))     # precision is limited


def test_sfu_special_values(run_body):
    x = np.array([0.0, -0.0, np.inf, 1e-40] + [1.0] * 12, dtype=np.float32)

    def body(a):
        a.mov(sfu_recip, ra10)
        a.nop()
        a.nop()
        a.mov(r2, r4)
        a.mov(sfu_log, ra10)
        a.nop()
        a.nop()
        a.mov(r3, r4)
    out, _ = run_with_vectors(run_body, body, [r2, r3], [x.view(np.uint32)])
    assert as_float(out[0, 0])[:4].tolist() == [np.inf, -np.inf, 0.0, np.inf]
    assert as_float(out[0, 1])[:4].tolist() == [-np.inf, -np.inf, np.inf, -np.inf]


# --- choices pinned (docs/hardware-choices.md "Emulator core") --------------------------------

def test_conditional_peripheral_writes_still_fire(run_body):
    # facts §5.7: a conditional write to an I/O register fires whatever the flags.
    def body(a):
        a.mov(r1, 1, sf=True)                # Z clear everywhere
        a.mov(host_int, 1, cond="zs")
    _, result = run_body(body, [r1])
    assert result.host_interrupts == 2       # this one and the exit's


def test_add_nop_with_a_destination_writes_nothing(run_body):
    def body(a):
        a.ldi(r1, 77)
        a.raw(alu_word(cond_add=1, waddr_add=33))       # op_add 0 "writing" r1
    out, _ = run_body(body, [r1])
    assert out[0, 0, 0] == 77


def test_zero_flag_looks_at_the_bits(run_body):
    # -0.0 = 0x80000000: Z clear, N set.
    def body(a):
        a.ldi(r1, -1.0)
        a.fmul(r2, r1, 0.0, sf=True)
        a.mov(r3, 0)
        a.mov(r3, 1, cond="zs")
        a.mov(r2, 0)
        a.mov(r2, 1, cond="ns")
    out, _ = run_body(body, [r3, r2])
    assert out[0, 0].tolist() == [0] * 16 and out[0, 1].tolist() == [1] * 16


def test_load_immediate_sets_flags_from_its_value(run_body):
    def body(a):
        a.ldi(r1, [0, 1, -1, -2] * 4, sf=True)
        a.mov(r2, 0)
        a.mov(r2, 1, cond="zs")
        a.mov(r3, 0)
        a.mov(r3, 1, cond="ns")
    out, _ = run_body(body, [r2, r3])
    assert out[0, 0].tolist() == [1, 0, 0, 0] * 4
    assert out[0, 1].tolist() == [0, 0, 1, 1] * 4


def test_eight_bit_pack_of_a_float_result_takes_its_bits(run_body):
    def body(a):
        a.ldi(ra1, 0x11223344)
        a.ldi(r1, 1.0)
        a.fadd(ra1, r1, 0.0, pack="8d")      # 0x3F800000: low byte 0x00 into byte 3
        a.nop()
        a.mov(r2, ra1)
    out, _ = run_body(body, [r2])
    assert out[0, 0, 0] == 0x00223344


def test_thread_switch_signals_do_nothing(run_body):
    def body(a):
        a.ldi(r1, 3)
        a.nop(sig="thread_switch")
        a.add(r1, r1, 1)
        a.nop()
        a.nop()
        a.nop(sig="last_thread_switch")
        a.nop()
        a.nop()
    out, _ = run_body(body, [r1])
    assert out[0, 0, 0] == 4
