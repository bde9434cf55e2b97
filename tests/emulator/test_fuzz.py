"""Random instruction words and uniforms: a run either returns a RunResult or raises one of
vc4nn's own typed errors, never a raw Python exception (and never the catch-all error the
machine makes of one)."""

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asm import isa
from asm.encoding import Instruction, encode
from vc4nn.device import RunResult
from vc4nn.emulator import EmulatorDevice
from vc4nn.emulator.errors import EmulatorError
from vc4nn.errors import Vc4nnError

# host_int write, thrend, two nops (facts §1 encodings): the programs end like a.exit().
EXIT = [0xE000_0000_0000_0001 | (1 << 49) | (38 << 38) | (39 << 32),
        0x3000_0000_0000_0000 | (39 << 38) | (39 << 32) | (39 << 18) | (39 << 12),
        0x1000_0000_0000_0000 | (39 << 38) | (39 << 32) | (39 << 18) | (39 << 12),
        0x1000_0000_0000_0000 | (39 << 38) | (39 << 32) | (39 << 18) | (39 << 12)]

any_word = st.integers(min_value=0, max_value=(1 << 64) - 1)


# Field values a compute program can use, so that most words get past decoding.
_WRITES = [a for a in range(64) if a < 32 or isa.WRITE["a"].get(a) not in (
    "quad_x", "ms_flags", "tlb_stencil", "tlb_z", "tlb_color_ms", "tlb_color_all",
    "tlb_alpha_mask")]
_READS = [a for a in range(64) if a < 32 or isa.READ["a"].get(a) in (
    "uniform", "element_number", "nop", "vpm", "vr_busy", "vr_wait", "mutex_acquire")]
_ALU_SIGNALS = [isa.SIGNALS[s] for s in ("none", "none", "thrend", "ldtmu0", "ldtmu1",
                                         "small_imm")]
_common = dict(
    pack=st.integers(0, 15), cond_add=st.integers(0, 7), cond_mul=st.integers(0, 7),
    sf=st.integers(0, 1), ws=st.integers(0, 1), waddr_add=st.sampled_from(_WRITES),
    waddr_mul=st.sampled_from(_WRITES))
alu_words = st.builds(
    Instruction, sig=st.sampled_from(_ALU_SIGNALS), unpack=st.integers(0, 7),
    pm=st.just(0), op_add=st.sampled_from(sorted(isa.ADD_OPS_BY_CODE)),
    op_mul=st.integers(0, 7), raddr_a=st.sampled_from(_READS), raddr_b=st.sampled_from(_READS),
    add_a=st.integers(0, 7), add_b=st.integers(0, 7), mul_a=st.integers(0, 7),
    mul_b=st.integers(0, 7), **_common)
load_imm_words = st.builds(
    Instruction, sig=st.just(isa.SIG_LOAD_IMM),
    ldi_mode=st.sampled_from(sorted(isa.LOAD_IMM_MODE_NAMES)),
    immediate=st.integers(0, 0xFFFFFFFF), **_common)
branch_words = st.builds(
    Instruction, sig=st.just(isa.SIG_BRANCH), cond_br=st.sampled_from(sorted(
        isa.BRANCH_CONDITION_NAMES)), rel=st.integers(0, 1), reg=st.integers(0, 1),
    raddr_a=st.integers(0, 31), immediate=st.integers(-64, 64).map(lambda v: (8 * v) & 0xFFFFFFFF),
    ws=st.integers(0, 1), waddr_add=st.sampled_from(_WRITES), waddr_mul=st.sampled_from(_WRITES))
plausible_word = st.one_of(alu_words, alu_words, load_imm_words, branch_words).map(encode)
programs = st.lists(st.one_of(any_word, plausible_word, plausible_word), min_size=1,
                    max_size=12)
uniform_values = st.lists(st.one_of(st.integers(min_value=0, max_value=0xFFFFFFFF),
                                    st.just("buffer")), min_size=0, max_size=6)


def run_random(words, uniforms, num_qpus, mode):
    with EmulatorDevice(checks=mode, max_instructions=3000) as dev:
        scratch = dev.alloc(4096, np.uint8)
        code = np.array(list(words) + EXIT, dtype=np.uint64)
        per_qpu = [[scratch.address if u == "buffer" else u for u in uniforms] or None] * num_qpus
        return dev.execute(code, num_qpus, per_qpu, timeout=0.01)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(words=programs, uniforms=uniform_values, num_qpus=st.integers(min_value=1, max_value=3),
       mode=st.sampled_from(["error", "warn", "off"]))
def test_random_programs_end_normally_or_in_a_typed_error(words, uniforms, num_qpus, mode):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            result = run_random(words, uniforms, num_qpus, mode)
        except Vc4nnError as error:
            if isinstance(error, EmulatorError) and error.qpu is not None:
                assert 0 <= error.qpu < num_qpus
            # The machine turns any Python failure into an EmulatorError; one that had to be
            # turned is an emulator bug (or a case it does not name yet).
            assert error.__cause__ is None, repr(error.__cause__)
            return
    assert isinstance(result, RunResult)


@pytest.mark.slow
@settings(max_examples=5000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(words=programs, uniforms=uniform_values, num_qpus=st.integers(min_value=1, max_value=12),
       mode=st.sampled_from(["error", "warn", "off"]))
def test_many_random_programs(words, uniforms, num_qpus, mode):
    test_random_programs_end_normally_or_in_a_typed_error.hypothesis.inner_test(
        words, uniforms, num_qpus, mode)
