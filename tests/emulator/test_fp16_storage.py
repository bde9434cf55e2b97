"""Moving float16 data as kernels do (docs/kernels.md "fp16 storage"), against memory images
computed by hand from the bit patterns.

The arithmetic is chosen so that the expected halves follow from the bits alone: doubling a
normal half adds 0x0400 (one to the exponent), negating flips bit 15. Inputs are normal halves
with exponents 1..29, so doubling stays normal and finite.
"""

import numpy as np
import pytest

from asm import kernel, ra1, ra2, ra30, ra31, rb1, uniform, vpm
from vc4nn.emulator import EmulatorDevice

HALVES_PER_ROW = 32
SENTINEL = 0xEEEE


def normal_halves(count, seed):
    rng = np.random.default_rng(seed)
    sign = rng.integers(0, 2, count) << 15
    exponent = rng.integers(1, 30, count) << 10
    return (sign | exponent | rng.integers(0, 1 << 10, count)).astype(np.uint16)


def doubled(halves):
    return (halves + 0x0400).astype(np.uint16)


def negated(halves):
    return halves ^ np.uint16(0x8000)


def run(program, *buffers):
    """Run ``program`` on one QPU with the buffers' addresses as uniforms; the buffers after."""
    with EmulatorDevice() as gpu:
        arrays = [gpu.array(b) for b in buffers]
        gpu.execute(program, 1, [[array.address for array in arrays]])
        return [np.array(array) for array in arrays]


def load_rows(a, rows, **options):
    a.mov(ra30, uniform)
    a.mov(ra31, uniform)
    a.setup_dma_load(rows=rows, rowlen=16, y=0, **options)
    a.start_dma_load(ra30)
    a.wait_dma_load()


def store_rows(a, units, y, depth=16, **options):
    a.setup_dma_store(units=units, depth=depth, y=y, **options)
    a.start_dma_store(ra31)
    a.wait_dma_store()
    a.exit()


# --- two halves per 32-bit word -------------------------------------------------------------

@kernel
def double_low_negate_high(a, rows):
    """Each 32-bit VPM word holds two halves: 16a (bits 15:0) doubled by the ADD ALU, 16b
    (bits 31:16) negated by the MUL ALU, packed back into one register, one VPM write."""
    load_rows(a, rows)
    a.ldi(rb1, -1.0)
    a.setup_vpm_read(num=rows, y=0)
    a.setup_vpm_write(y=rows)
    for _ in range(rows):
        a.mov(ra1, vpm)
        a.nop()
        a.fadd(ra2, ra1.unpack("16a"), ra1.unpack("16a"), pack="16a")
        a.fmul(ra2, ra1.unpack("16b"), rb1, pack="16b")
        a.nop()
        a.mov(vpm, ra2)
    store_rows(a, rows, y=rows)


def test_two_halves_per_word_through_32_bit_dma_and_vpm():
    rows = 3
    halves = normal_halves(rows * HALVES_PER_ROW, seed=1)
    out = np.full(rows * HALVES_PER_ROW, SENTINEL, dtype=np.uint16)
    _, result = run(double_low_negate_high.assemble(rows=rows), halves, out)
    expected = halves.copy()
    expected[0::2] = doubled(halves[0::2])      # memory halves 0, 2, 4...: bits 15:0 of a word
    expected[1::2] = negated(halves[1::2])
    assert np.array_equal(result, expected)


def test_channel_pair_words_give_two_natural_16_channel_vectors():
    """The recommended layout: word i of a 32-channel block holds channel i (16a) and channel
    i + 16 (16b), so both unpacks give channels in lane order. The host interleaves them."""
    channels = normal_halves(2 * HALVES_PER_ROW, seed=2).reshape(2, 2, 16)   # pixel, half, lane
    words = np.ascontiguousarray(channels.transpose(0, 2, 1))               # pixel, lane, half
    out = np.zeros_like(words)
    _, result = run(double_low_negate_high.assemble(rows=2), words, out)
    back = result.transpose(0, 2, 1)
    assert np.array_equal(back[:, 0], doubled(channels[:, 0]))      # channels 0..15
    assert np.array_equal(back[:, 1], negated(channels[:, 1]))      # channels 16..31


# --- 16-bit generic VPM access --------------------------------------------------------------

@kernel
def double_16_bit_vectors(a, laned, write_offset):
    """Row 0 (32 halves) read as two 16-bit vectors; the raw vectors go to rows 2, 3 (32-bit
    writes), the doubled ones back into row 1 with 16-bit writes, which touch only their
    halves. With ``write_offset`` only the second vector is written, at that half offset."""
    load_rows(a, 2)
    a.setup_vpm_read(num=2, y=0, size=16, laned=laned)
    a.mov(ra1, vpm)
    a.mov(ra2, vpm)
    a.setup_vpm_write(y=2)
    a.mov(vpm, ra1)
    a.mov(vpm, ra2)
    a.fadd(ra1, ra1.unpack("16a"), ra1.unpack("16a"), pack="16a")
    a.fadd(ra2, ra2.unpack("16a"), ra2.unpack("16a"), pack="16a")
    if write_offset is None:
        a.setup_vpm_write(y=1, size=16, laned=laned)
        a.mov(vpm, ra1)
    else:
        a.setup_vpm_write(y=1, size=16, laned=laned, offset=write_offset)
    a.mov(vpm, ra2)
    store_rows(a, 3, y=1)


@pytest.mark.parametrize("laned", [False, True])
def test_16_bit_vpm_vectors(laned):
    """Packed: vector k holds halves 16k..16k+15 in lane order. Laned: vector k holds half k
    of every word (the even halves, then the odd ones). Reads zero-extend."""
    halves = normal_halves(2 * HALVES_PER_ROW, seed=3).reshape(2, HALVES_PER_ROW)
    halves[1] = SENTINEL
    out = np.zeros((3, HALVES_PER_ROW), dtype=np.uint16)
    _, result = run(double_16_bit_vectors.assemble(laned=laned, write_offset=None), halves, out)
    raw = result[1:].view(np.uint32)            # rows 2, 3 as 32-bit words
    first, second = (halves[0, 0::2], halves[0, 1::2]) if laned else (halves[0, :16], halves[0, 16:])
    assert np.array_equal(raw[0], first) and np.array_equal(raw[1], second)
    assert np.array_equal(result[0], doubled(halves[0]))


@kernel
def double_unpacking_the_vpm_read(a):
    """The unpack applies to whatever the A port delivers, the VPM read included (our reading,
    unverified on hardware): no move to a register first."""
    load_rows(a, 1)
    a.setup_vpm_read(num=2, y=0, size=16)
    a.fadd(ra1, vpm.unpack("16a"), 0.0, pack="16a")
    a.fadd(ra2, vpm.unpack("16a"), 0.0, pack="16a")
    a.setup_vpm_write(y=1, size=16)
    a.fadd(ra1, ra1.unpack("16a"), ra1.unpack("16a"), pack="16a")
    a.fadd(ra2, ra2.unpack("16a"), ra2.unpack("16a"), pack="16a")
    a.nop()
    a.mov(vpm, ra1)
    a.mov(vpm, ra2)
    store_rows(a, 1, y=1)


def test_16_bit_vpm_read_unpacked_on_the_a_port():
    halves = normal_halves(HALVES_PER_ROW, seed=6)
    _, result = run(double_unpacking_the_vpm_read.assemble(), halves,
                    np.zeros(HALVES_PER_ROW, dtype=np.uint16))
    assert np.array_equal(result, doubled(halves))


@pytest.mark.parametrize("laned, offset, written", [
    (False, 1, slice(16, 32)),      # packed, H = 1: halves 16..31
    (False, 0, slice(0, 16)),
    (True, 1, slice(1, 32, 2)),     # laned, H = 1: the high half of every word
    (True, 0, slice(0, 32, 2)),
])
def test_16_bit_vpm_write_touches_only_its_halves(laned, offset, written):
    halves = normal_halves(2 * HALVES_PER_ROW, seed=4).reshape(2, HALVES_PER_ROW)
    halves[1] = SENTINEL
    program = double_16_bit_vectors.assemble(laned=laned, write_offset=offset)
    _, result = run(program, halves, np.zeros((3, HALVES_PER_ROW), dtype=np.uint16))
    second = halves[0, 1::2] if laned else halves[0, 16:]
    expected = np.full(HALVES_PER_ROW, SENTINEL, dtype=np.uint16)
    expected[written] = doubled(second)
    assert np.array_equal(result[0], expected)


# --- 16-bit DMA with half offsets -----------------------------------------------------------

@kernel
def copy_ragged_rows(a, rows, rowlen, pitch, out_pitch):
    """``rows`` memory rows of ``rowlen`` halves, ``pitch`` halves apart, into VPM column 1
    at H = 1 (one VPM row each), then out again ``out_pitch`` halves apart; the VPM rows are
    also stored whole (32-bit) to the second buffer."""
    a.mov(ra30, uniform)
    a.mov(ra31, uniform)
    a.mov(ra1, uniform)
    a.setup_dma_load(rows=rows, rowlen=rowlen, y=0, x=1, size=16, offset=1, pitch=2 * pitch)
    a.start_dma_load(ra30)
    a.wait_dma_load()
    a.setup_dma_store(units=rows, depth=rowlen, y=0, x=1, size=16, offset=1,
                      stride=2 * (out_pitch - rowlen))
    a.start_dma_store(ra31)
    a.wait_dma_store()
    a.setup_dma_store(units=rows, depth=16, y=0)
    a.start_dma_store(ra1)
    a.wait_dma_store()
    a.exit()


def test_16_bit_dma_rows_of_odd_length_at_odd_half_offsets():
    """MODEW 3 (16-bit, H = 1) from (y, x = 1): a row starts at VPM byte 4 * 1 + 2 * 1 = 6,
    half 3 of its VPM row. Memory rows start at half 3 (byte 6: 2-byte aligned, not 4) of the
    source and at half 5 of the destination; nothing around them is touched."""
    rows, rowlen, pitch, out_pitch = 3, 7, 20, 12
    source = np.arange(0x3C00, 0x3C00 + 64, dtype=np.uint16)
    out = np.full(48, SENTINEL, dtype=np.uint16)
    vpm_image = np.zeros((rows, 16), dtype=np.uint32)

    with EmulatorDevice() as gpu:
        src, dst, vpm_rows = gpu.array(source), gpu.array(out), gpu.array(vpm_image)
        program = copy_ragged_rows.assemble(rows=rows, rowlen=rowlen, pitch=pitch,
                                            out_pitch=out_pitch)
        gpu.execute(program, 1, [[src.address + 6, dst.address + 10, vpm_rows.address]])
        result, vpm_after = np.array(dst), np.array(vpm_rows)

    expected_out = np.full(48, SENTINEL, dtype=np.uint16)
    expected_vpm = np.zeros((rows, 32), dtype=np.uint16)
    for r in range(rows):
        row = source[3 + r * pitch: 3 + r * pitch + rowlen]
        expected_out[5 + r * out_pitch: 5 + r * out_pitch + rowlen] = row
        expected_vpm[r, 3:3 + rowlen] = row
    assert np.array_equal(result, expected_out)
    assert np.array_equal(vpm_after.view(np.uint16).reshape(rows, 32), expected_vpm)


@kernel
def load_two_rows(a, vpitch):
    a.mov(ra30, uniform)
    a.mov(ra31, uniform)
    a.setup_dma_load(rows=2, rowlen=16, y=0, size=16, vpitch=vpitch)
    a.start_dma_load(ra30)
    a.wait_dma_load()
    store_rows(a, 2, y=0)


@pytest.mark.parametrize("vpitch", [None, 1])
def test_16_bit_dma_load_vpitch_steps_half_words(vpitch):
    """VPITCH is added to {Y, H}: the default (2 steps) puts memory row 1 in VPM row 1; an
    explicit VPITCH 1 starts it one half-word after row 0, overlapping it."""
    source = normal_halves(32, seed=5)
    _, result = run(load_two_rows.assemble(vpitch=vpitch), source,
                    np.full(64, SENTINEL, dtype=np.uint16))
    expected = np.zeros(64, dtype=np.uint16)
    if vpitch is None:
        expected[0:16], expected[32:48] = source[:16], source[16:]
    else:
        expected[0], expected[1:17] = source[0], source[16:]
    assert np.array_equal(result, expected)
