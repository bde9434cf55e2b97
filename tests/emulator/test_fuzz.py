"""Random instruction words and uniforms: a run either returns a RunResult or raises one of
vc4nn's own typed errors, never a raw Python exception (and never the catch-all error the
machine makes of one)."""

import dataclasses
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


# VPM traffic: setup words with every field drawn (the DMA engines', the generic ones', and
# now and then a reserved code or an unused bit), written by a load immediate to vr_setup
# (ws = 0) or vw_setup (ws = 1); DMA starts from a uniform (the buffer plus an offset); the
# waits, busy flags and generic reads and writes.
def _setup_word(table, ident, **fields):
    drawn = {name: st.integers(0, (1 << table[name][1]) - 1) for name in table if name != "id"}
    drawn.update(fields)
    return st.fixed_dictionaries(drawn).map(
        lambda f: isa.field_put(ident, table["id"])
        | sum(isa.field_put(v, table[name]) for name, v in f.items()))


_small = {"rowlen": st.integers(0, 4), "nrows": st.integers(0, 4), "units": st.integers(1, 8),
          "depth": st.integers(1, 16)}
setup_words = st.one_of(
    _setup_word(isa.VDR_SETUP, isa.VDR_SETUP_ID, rowlen=_small["rowlen"], nrows=_small["nrows"]),
    _setup_word(isa.VDR_SETUP, isa.VDR_SETUP_ID),
    _setup_word(isa.VDR_EXTENDED, isa.VDR_EXTENDED_ID, mpitchb=st.integers(0, 256)),
    st.integers(0, 0x0FFFFFFF).map(lambda w: isa.VDR_EXTENDED_ID << 28 | w),
    _setup_word(isa.VDW_SETUP, isa.VDW_SETUP_ID, units=_small["units"], depth=_small["depth"],
                laned=st.sampled_from([0, 0, 0, 1]), modew=st.sampled_from([0, 2, 3, 4, 5, 1])),
    _setup_word(isa.VDW_SETUP, isa.VDW_SETUP_ID),
    _setup_word(isa.VDW_STRIDE, isa.VDW_STRIDE_ID, stride=st.integers(0, 128),
                blockmode=st.sampled_from([0, 0, 1])),
    _setup_word(isa.VPM_GENERIC_READ, isa.VPM_GENERIC_ID, size=st.sampled_from([0, 1, 2, 2, 3])),
    _setup_word(isa.VPM_GENERIC_WRITE, isa.VPM_GENERIC_ID, size=st.sampled_from([0, 1, 2, 2])),
    st.integers(0, 0xFFFFFFFF))
_VPM_IO = {name: isa.WRITE_BY_NAME["a"][name] for name in ("vpm", "vr_setup", "vr_addr")}
_ALWAYS = isa.CONDITIONS["always"]
setup_writes = st.builds(
    Instruction, sig=st.just(isa.SIG_LOAD_IMM), immediate=setup_words, ws=st.integers(0, 1),
    waddr_add=st.just(_VPM_IO["vr_setup"]), cond_add=st.just(_ALWAYS))
# or vr_addr/vw_addr, uniform, uniform (the mul ALU writes the B side when ws = 0)
dma_starts = st.builds(
    Instruction, sig=st.just(isa.SIGNALS["none"]), op_add=st.just(isa.ADD_OPS["or"].code),
    raddr_a=st.just(isa.READ_BY_NAME["a"]["uniform"]), add_a=st.just(isa.MUX_A),
    add_b=st.just(isa.MUX_A), ws=st.integers(0, 1), waddr_add=st.just(_VPM_IO["vr_addr"]),
    cond_add=st.just(_ALWAYS))
_VPM_READS = [isa.READ_BY_NAME["a"][name] for name in ("vpm", "vr_busy", "vr_wait")]
vpm_traffic = st.builds(
    Instruction, sig=st.just(isa.SIGNALS["none"]), op_add=st.just(isa.ADD_OPS["add"].code),
    raddr_a=st.sampled_from(_VPM_READS + [0, 1]), raddr_b=st.sampled_from(_VPM_READS + [0, 1]),
    add_a=st.sampled_from([isa.MUX_A, isa.MUX_B, 0]), add_b=st.sampled_from([isa.MUX_A, 1]),
    ws=st.integers(0, 1), waddr_add=st.sampled_from([_VPM_IO["vpm"], 0, 1]),
    cond_add=st.just(_ALWAYS))
vpm_word = st.one_of(setup_writes, setup_writes, dma_starts, vpm_traffic).map(encode)

programs = st.lists(st.one_of(any_word, plausible_word, plausible_word, vpm_word), min_size=1,
                    max_size=12)


# Whole VPM transfers, so that most DMAs get past their setup checks into the buffer: a DMA
# load (setup, maybe an extended pitch, start, maybe a wait), a store (a generic write setup,
# vectors written, the store's setup and stride, start, maybe a wait) or generic reads.
def _setup_write(side, word):
    return word.map(lambda w: Instruction(sig=isa.SIG_LOAD_IMM, immediate=w, ws=side,
                                          waddr_add=_VPM_IO["vr_setup"], cond_add=_ALWAYS))


def _start(side):
    return dma_starts.map(lambda i: dataclasses.replace(i, ws=side))


def _waits(side):
    read = isa.READ_BY_NAME["a"]["vr_wait"]
    return st.lists(st.just(Instruction(sig=isa.SIGNALS["none"], raddr_a=read if side == 0 else 39,
                                        raddr_b=read if side == 1 else 39)), max_size=1)


_vpm_writes = st.lists(st.just(Instruction(
    sig=isa.SIGNALS["none"], op_add=isa.ADD_OPS["add"].code,
    raddr_a=isa.READ_BY_NAME["a"]["element_number"], raddr_b=isa.READ_BY_NAME["b"]["uniform"],
    add_a=isa.MUX_A, add_b=isa.MUX_B,
    waddr_add=_VPM_IO["vpm"], cond_add=_ALWAYS)), max_size=4)
_vpm_reads = st.lists(st.just(Instruction(
    sig=isa.SIGNALS["none"], op_add=isa.ADD_OPS["or"].code, raddr_a=_VPM_IO["vpm"],
    add_a=isa.MUX_A, add_b=isa.MUX_A, waddr_add=0, cond_add=_ALWAYS)), min_size=1, max_size=4)
_load_setup = _setup_word(isa.VDR_SETUP, isa.VDR_SETUP_ID, rowlen=st.integers(0, 15),
                          nrows=st.integers(1, 4), mpitch=st.integers(0, 5))
_store_setup = _setup_word(isa.VDW_SETUP, isa.VDW_SETUP_ID, units=st.integers(1, 4),
                           depth=st.integers(1, 16), laned=st.just(0),
                           modew=st.sampled_from([0, 2, 3, 4, 5, 6, 7]))
_transfers = st.one_of(
    st.tuples(_setup_write(0, _load_setup),
              st.lists(_setup_write(0, _setup_word(isa.VDR_EXTENDED, isa.VDR_EXTENDED_ID,
                                                   mpitchb=st.integers(0, 512))), max_size=1),
              _start(0), _waits(0)),
    st.tuples(_setup_write(1, _setup_word(isa.VPM_GENERIC_WRITE, isa.VPM_GENERIC_ID,
                                          size=st.sampled_from([0, 1, 2]))), _vpm_writes,
              _setup_write(1, _store_setup),
              st.lists(_setup_write(1, _setup_word(isa.VDW_STRIDE, isa.VDW_STRIDE_ID,
                                                   stride=st.integers(0, 64),
                                                   blockmode=st.sampled_from([0, 0, 1]))),
                       max_size=1), _start(1), _waits(1)),
    st.tuples(_setup_write(0, _setup_word(isa.VPM_GENERIC_READ, isa.VPM_GENERIC_ID,
                                          size=st.sampled_from([0, 1, 2]),
                                          num=st.integers(1, 4))), _vpm_reads))


def _flatten(parts):
    """Instruction words from nested lists and tuples of Instructions and words."""
    if isinstance(parts, (list, tuple)):
        return [word for part in parts for word in _flatten(part)]
    return [parts if isinstance(parts, int) else encode(parts)]


dma_programs = st.lists(st.one_of(_transfers, _transfers, st.lists(plausible_word, max_size=2)),
                        min_size=1, max_size=5).map(_flatten)
# "buffer": the scratch buffer's address; ("buffer", n): n bytes into it
buffer_addresses = st.one_of(st.just("buffer"),
                             st.tuples(st.just("buffer"), st.integers(0, 4096)))
uniform_values = st.lists(st.one_of(st.integers(min_value=0, max_value=0xFFFFFFFF),
                                    buffer_addresses), min_size=0, max_size=6)


def uniform_value(value, scratch):
    """A uniform of the lists above, with the scratch buffer's address filled in."""
    if value == "buffer":
        return scratch.address
    if isinstance(value, tuple):
        return scratch.address + value[1]
    return value


def run_random(words, uniforms, num_qpus, mode):
    with EmulatorDevice(checks=mode, max_instructions=3000) as dev:
        scratch = dev.alloc(4096, np.uint8)
        code = np.array(list(words) + EXIT, dtype=np.uint64)
        per_qpu = [[uniform_value(u, scratch) for u in uniforms] or None] * num_qpus
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
