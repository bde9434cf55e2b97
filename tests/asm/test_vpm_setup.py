"""VPM / DMA setup words against hand-derived values (facts section 3 field tables)."""

import pytest

from asm import (AssemblerError, Assembler, ra, uniform, vdr_pitch, vdr_setup, vdw_setup,
                 vdw_stride, vpm_read_setup, vpm_write_setup)

from .reference_words import ALWAYS, MUX_A, MUX_B, OR, alu, ldi

VR_SETUP, VW_SETUP, VR_ADDR, VW_ADDR = 49, 49, 50, 50     # facts section 1 register map


@pytest.mark.parametrize("word, expected", [
    # generic read: NUM 23:20 (16 -> 0), STRIDE 17:12, HORIZ 11, LANED 10, SIZE 9:8 (32-bit = 2), ADDR
    (vpm_read_setup(num=16, y=0), 0x00001a00),
    (vpm_read_setup(num=1, y=5), 0x00101a05),
    # vertical 32-bit: ADDR = {Y[5:4], X[3:0]} = {01, 0011}
    (vpm_read_setup(num=4, y=16, x=3, horizontal=False), 0x00401213),
    # horizontal 16-bit, laned: ADDR = {Y, H} = 5 * 2 + 1
    (vpm_read_setup(num=2, y=5, size=16, offset=1, laned=True), 0x00201d0b),
    # vertical 8-bit, stride 64 -> 0: ADDR = {Y[5:4], X, B} = {10, 0010, 11}
    (vpm_read_setup(num=1, y=32, x=2, size=8, offset=3, horizontal=False, stride=64), 0x0010008b),
    (vpm_write_setup(y=63, stride=2), 0x00002a3f),
    (vpm_write_setup(y=0, x=15, horizontal=False, size=16, offset=1), 0x0000111f),
])
def test_generic_vpm_setup(word, expected):
    assert word == expected


@pytest.mark.parametrize("word, expected", [
    # VDW: id 10, UNITS 29:23, DEPTH 22:16, LANED 15, HORIZ 14, VPMBASE 13:3 = {Y, X}, MODEW 2:0
    (vdw_setup(units=16, depth=16, y=0), 0x88104000),
    # units 128 -> 0; VPMBASE = 127 * 16 + 15; MODEW 8-bit + byte 2 = 6
    (vdw_setup(units=128, depth=1, y=127, x=15, horizontal=False, size=8, offset=2), 0x80013ffe),
    # depth 128 -> 0; 16-bit + half 1 = 3
    (vdw_setup(units=1, depth=128, y=2, size=16, offset=1, laned=True), 0x8080c103),
    # stride word: id 11, BLOCKMODE 16, STRIDE 15:0
    (vdw_stride(0xfffc), 0xc000fffc),
    (vdw_stride(64, blockmode=True), 0xc0010040),
])
def test_vdw_setup(word, expected):
    assert word == expected


def test_vdw_stride_is_16_bits_wide():
    # hardware choice (facts 5.14): the errata's 16 bits, not the guide's 13
    assert vdw_stride(0xffff) == 0xc000ffff
    with pytest.raises(AssemblerError, match="stride=65536 is out of range 0..65535"):
        vdw_stride(0x10000)


@pytest.mark.parametrize("word, expected", [
    # VDR: bit 31, MODEW 30:28, MPITCH 27:24 (pitch 8 * 2**n), ROWLEN 23:20, NROWS 19:16,
    # VPITCH 15:12, VERT 11, ADDRXY 10:0 = {Y, X}
    (vdr_setup(rows=16, rowlen=16, y=0, pitch=64), 0x83001000),
    (vdr_setup(rows=1, rowlen=1, y=0, pitch=16), 0x81110000 | 0x1000),
    (vdr_setup(rows=1, rowlen=1, y=0, pitch=8 << 15), 0x8f110000 | 0x1000),
    # 8-bit + byte 1 = MODEW 5; extended pitch (MPITCH 0); vpitch 16 -> 0; vertical; Y=100, X=4
    (vdr_setup(rows=2, rowlen=8, y=100, x=4, pitch=None, vpitch=16, horizontal=False, size=8,
               offset=1), 0xd0820e44),
    # extended pitch word: id 1001 in 31:28, MPITCHB 12:0
    (vdr_pitch(100), 0x90000064),
    (vdr_pitch(8191), 0x90001fff),
    # MPITCHB is 14 bits (facts §5.18): py-videocore's 3072-float rows, 12288 bytes apart
    (vdr_pitch(12288), 0x90003000),
    (vdr_pitch(16383), 0x90003fff),
])
def test_vdr_setup(word, expected):
    assert word == expected


@pytest.mark.parametrize("call, message", [
    (lambda: vpm_read_setup(num=0, y=0), "num=0 is out of range 1..16"),
    (lambda: vpm_read_setup(num=17, y=0), "num=17 is out of range 1..16"),
    (lambda: vpm_read_setup(num=1, y=64), "y=64 is out of range 0..63"),
    (lambda: vpm_read_setup(num=1, y=0, stride=65), "stride=65 is out of range 1..64"),
    (lambda: vpm_read_setup(num=1, y=8, horizontal=False), "multiple of 16"),
    (lambda: vpm_read_setup(num=1, y=0, x=1), "horizontal VPM access covers whole rows"),
    (lambda: vpm_write_setup(y=0, size=16, offset=2), "offset=2 is out of range 0..1"),
    (lambda: vpm_write_setup(y=0, size=12), "size=12"),
    (lambda: vdw_setup(units=129, depth=1, y=0), "units=129 is out of range 1..128"),
    (lambda: vdw_setup(units=1, depth=0, y=0), "depth=0 is out of range 1..128"),
    (lambda: vdw_setup(units=1, depth=1, y=128), "y=128 is out of range 0..127"),
    (lambda: vdw_setup(units=1, depth=1, y=0, x=16), "x=16 is out of range 0..15"),
    (lambda: vdr_setup(rows=17, rowlen=1, y=0, pitch=64), "rows=17 is out of range 1..16"),
    (lambda: vdr_setup(rows=1, rowlen=1, y=0, pitch=48), "pitch=48"),
    (lambda: vdr_setup(rows=1, rowlen=1, y=0, pitch=8), "pitch=8"),
    (lambda: vdr_pitch(16384), "pitch=16384 is out of range 0..16383"),
    (lambda: vdr_pitch(-1), "pitch=-1 is out of range 0..16383"),
])
def test_range_errors(call, message):
    with pytest.raises(AssemblerError) as info:
        call()
    assert message in info.value.message


def words_of(emit):
    a = Assembler()
    emit(a)
    return a.assemble(check=False).words


def test_dma_load_macro_power_of_two_pitch():
    # 4 rows of 16 words, contiguous: pitch 64 = 8 * 2**3
    assert words_of(lambda a: a.setup_dma_load(rows=4, rowlen=16, y=0)) == [
        ldi(cond_add=ALWAYS, waddr_add=VR_SETUP, imm=0x83041000)]


def test_dma_load_macro_default_pitch_is_the_row_length_in_bytes():
    # 16 elements: ROWLEN 0; 16-bit: MODEW 2 and pitch 32 = 8 * 2**2; 2 rows, VPITCH 2 (by
    # default each row goes to the next VPM row: two {Y, H} steps)
    assert words_of(lambda a: a.setup_dma_load(rows=2, rowlen=16, y=0, size=16)) == [
        ldi(cond_add=ALWAYS, waddr_add=VR_SETUP, imm=0xA2022000)]
    assert words_of(lambda a: a.setup_dma_load(rows=16, rowlen=16, y=0)) == [
        ldi(cond_add=ALWAYS, waddr_add=VR_SETUP, imm=0x83001000)]


def test_dma_load_macro_extended_pitch():
    # pitch 40 bytes does not fit MPITCH: extended word first, then MPITCH = 0
    assert words_of(lambda a: a.setup_dma_load(rows=4, rowlen=10, y=0)) == [
        ldi(cond_add=ALWAYS, waddr_add=VR_SETUP, imm=0x90000028),
        ldi(cond_add=ALWAYS, waddr_add=VR_SETUP, imm=0x80a41000)]


def test_dma_store_macro_writes_setup_and_stride():
    # vw_setup exists only on the B side: ws=1
    assert words_of(lambda a: a.setup_dma_store(units=2, depth=16, y=8)) == [
        ldi(ws=1, cond_add=ALWAYS, waddr_add=VW_SETUP, imm=0x81104400),
        ldi(ws=1, cond_add=ALWAYS, waddr_add=VW_SETUP, imm=0xc0000000)]
    assert len(words_of(lambda a: a.setup_dma_store(units=2, depth=16, y=8, stride=None))) == 1


def test_vpm_generic_macros():
    assert words_of(lambda a: (a.setup_vpm_read(num=16, y=0), a.setup_vpm_write(y=63, stride=2))) == [
        ldi(cond_add=ALWAYS, waddr_add=VR_SETUP, imm=0x00001a00),
        ldi(ws=1, cond_add=ALWAYS, waddr_add=VW_SETUP, imm=0x00002a3f)]


def test_dma_start_and_wait_macros():
    assert words_of(lambda a: (a.start_dma_load(uniform), a.start_dma_store(ra[3]),
                               a.wait_dma_load(), a.wait_dma_store())) == [
        alu(cond_add=ALWAYS, waddr_add=VR_ADDR, op_add=OR, raddr_a=32, add_a=MUX_A, add_b=MUX_A),
        alu(ws=1, cond_add=ALWAYS, waddr_add=VW_ADDR, op_add=OR, raddr_a=3, add_a=MUX_A, add_b=MUX_A),
        alu(raddr_a=50),        # read vr_wait
        alu(raddr_b=50),        # read vw_wait
    ]


def test_sync_macros():
    assert words_of(lambda a: (a.mutex_acquire(), a.mutex_release(), a.host_interrupt())) == [
        alu(raddr_a=51),
        alu(sig=13, cond_add=ALWAYS, waddr_add=51, op_add=OR, raddr_b=1, add_a=MUX_B, add_b=MUX_B),
        alu(sig=13, cond_add=ALWAYS, waddr_add=38, op_add=OR, raddr_b=1, add_a=MUX_B, add_b=MUX_B)]


def test_remembered_setup_words_keep_their_checks():
    """Setup words are remembered (uniform builders ask for the same ones again and again); a
    remembered good call never answers for a bad one that compares equal (True == 1), and a bad
    call still fails with the caller's line, however often it is made."""
    assert vdr_setup(rows=1, rowlen=16, y=0, pitch=64) == vdr_setup(rows=1, rowlen=16, y=0,
                                                                     pitch=64)
    for _ in range(2):
        with pytest.raises(AssemblerError, match="rows=True is not an int"):
            vdr_setup(rows=True, rowlen=16, y=0, pitch=64)
        with pytest.raises(AssemblerError) as info:
            vdw_setup(units=1, depth=1, y=[0])          # unhashable: not remembered, checked
        assert info.value.location is not None and "test_vpm_setup.py" in str(info.value)
    assert vdw_setup(1, 1, 0) == vdw_setup(units=1, depth=1, y=0)
