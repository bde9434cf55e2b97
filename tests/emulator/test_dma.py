"""DMA loads (VDR) and stores (VDW) against hand-computed numpy references.

The transposing cases reproduce py-videocore's hardware tests (tests/test_dma.py there): a
vertical load with VPITCH 16 and a vertical store of single columns, both of which passed on a Pi.
Sub-word widths pin the reading recorded in docs/hardware-choices.md ("Emulator units").
"""

import math

import numpy as np
import pytest

from vc4nn.emulator.checks import Checks, CheckWarning
from vc4nn.emulator.errors import CheckError, MemoryFault

from .unit_setup import STRICT, Units, generic_read, generic_write, vdr, vdr_pitch, vdw, vdw_stride


def load(units, setup, address, qpu=0, now=0, pitch=None):
    if pitch is not None:
        units.vpm.write_vr_setup(qpu, vdr_pitch(pitch), now)
    units.vpm.write_vr_setup(qpu, setup, now)
    t = units.vpm.write_vr_addr(qpu, address, now)
    return units.vpm.read_vr_wait(qpu, t)[1]


def store(units, setup, address, qpu=0, now=0, stride=0, blockmode=False):
    units.vpm.write_vw_setup(qpu, setup, now)
    units.vpm.write_vw_setup(qpu, vdw_stride(stride, blockmode), now)
    t = units.vpm.write_vw_addr(qpu, address, now)
    return units.vpm.read_vw_wait(qpu, t)[1]


def pattern_vpm(units, rows=64):
    units.vpm_rows(rows)[:] = (np.arange(rows * 16, dtype=np.uint32).reshape(rows, 16) * 0x01030507
                               + 0x00100200)
    return units.vpm_rows(rows).copy()


# -- loads ---------------------------------------------------------------------------------------

def test_load_strided_2d_region():
    units = Units()
    m = np.arange(16 * 32, dtype=np.uint32).reshape(16, 32) + 1000
    base, _ = units.buffer(m)
    # 8 rows x 8 words from m[2, 4], pitch 128 bytes = 8 << MPITCH 4, into VPM (y=4, x=4)
    load(units, vdr(8, 8, y=4, x=4, mpitch=4), base + (2 * 32 + 4) * 4)
    expected = np.zeros((64, 16), np.uint32)
    expected[4:12, 4:12] = m[2:10, 4:12]
    assert np.array_equal(units.vpm_rows(), expected)


def test_load_with_extended_pitch_and_counts_of_16():
    units = Units()
    m = np.arange(16 * 24, dtype=np.uint32).reshape(16, 24) * 3
    base, _ = units.buffer(m)
    load(units, vdr(16, 16, y=20, mpitch=0), base, pitch=96)      # ROWLEN 0 = NROWS 0 = 16
    assert np.array_equal(units.vpm_rows()[20:36], m[:, :16])


def test_vertical_load_with_vpitch_16_transposes():
    """py-videocore test_vertical_32bit_load: 16 loads of 4 rows x 16 words, VPITCH 0 (= 16)."""
    units = Units()
    x = np.arange(16 * 64, dtype=np.uint32).reshape(16, 64)
    base, _ = units.buffer(x)
    for column in range(16):
        units.vpm.write_vr_setup(0, vdr(4, 16, y=0, x=column, mpitch=3, vpitch=16, vertical=True), 0)
        units.vpm.write_vr_addr(0, base + column * 256, 0)
    units.vpm.read_vr_wait(0, 0)
    assert np.array_equal(units.vpm_rows(), x.T)


def test_load_16_bit_rows_with_half_word_offset():
    """MODEW 3 (16-bit, H = 1): row r goes to {Y, H} + r * VPITCH, from byte 4X + 2H."""
    units = Units()
    halves = np.arange(1, 9, dtype=np.uint16) * 0x1111
    base, _ = units.buffer(halves)
    load(units, vdr(2, 4, y=3, x=2, modew=3, mpitch=0, vpitch=2), base, pitch=8)
    vbytes = units.vpm.bytes.reshape(-1, 64)
    raw = halves.view(np.uint8)
    assert np.array_equal(vbytes[3, 10:18], raw[0:8]) and np.array_equal(vbytes[4, 10:18], raw[8:16])
    assert vbytes[3, :10].sum() == 0 and vbytes[3, 18:].sum() == 0


def test_load_8_bit_rows_with_byte_offset_and_sub_row_vpitch():
    units = Units()
    data = np.arange(1, 41, dtype=np.uint8)
    base, _ = units.buffer(data)
    # MODEW 7 (8-bit, B = 3), VPITCH 4: {Y, B} advances by a whole row per memory row
    load(units, vdr(2, 5, y=1, x=3, modew=7, mpitch=0, vpitch=4), base, pitch=16)
    vbytes = units.vpm.bytes.reshape(-1, 64)
    assert vbytes[1, 15:20].tolist() == [1, 2, 3, 4, 5]
    assert vbytes[2, 15:20].tolist() == [17, 18, 19, 20, 21]
    # VPITCH 1 adds to B: the second row starts one byte later and overwrites the first's tail
    units = Units()
    base, _ = units.buffer(data)
    load(units, vdr(2, 4, y=0, x=0, modew=4, mpitch=0, vpitch=1), base, pitch=16)
    assert units.vpm.bytes[:6].tolist() == [1, 17, 18, 19, 20, 0]


# -- stores --------------------------------------------------------------------------------------

def test_store_rows_to_strided_memory():
    units = Units()
    rows = pattern_vpm(units)
    mem = np.zeros((8, 20), np.uint32)
    base, raw = units.buffer(mem)
    # 8 rows of 12 words from (y=0, x=2); stride = bytes from the end of a row to the next
    store(units, vdw(8, 12, y=0, x=2), base, stride=(20 - 12) * 4)
    got = raw[:mem.nbytes].view("<u4").reshape(8, 20)
    assert np.array_equal(got[:, :12], rows[0:8, 2:14]) and not got[:, 12:].any()


def test_vdw_setup_outlives_generic_write_setups():
    """The VDW setup and the generic write setup are different setups of vw_setup (its ID
    field, 31:30): writing one leaves the other, so a kernel writes the VDW setup once for many
    stores through a staging row (the panel kernel's store loop; docs/hardware-choices.md, "VPM
    and DMA setup fields")."""
    units = Units()
    rows = pattern_vpm(units)
    base, raw = units.buffer(np.zeros((3, 16), np.uint32))
    units.vpm.write_vw_setup(0, vdw(1, 16, y=7), 0)
    units.vpm.write_vw_setup(0, vdw_stride(0), 0)
    t = 0
    for i in range(3):
        units.vpm.write_vw_setup(0, generic_write(7 << 4), t)      # a generic setup between
        t = units.vpm.read_vw_wait(0, units.vpm.write_vw_addr(0, base + 64 * i, t))[1]
    assert np.array_equal(raw[:192].view("<u4").reshape(3, 16), np.tile(rows[7], (3, 1)))


def test_vertical_store_of_single_columns_transposes():
    """py-videocore test_vertical_32bit_store: UNITS 1, DEPTH 16, one column at a time."""
    units = Units()
    rows = pattern_vpm(units)
    base, raw = units.buffer(np.zeros((16, 64), np.uint32))
    for x in range(16):
        for y in range(0, 64, 16):
            store(units, vdw(1, 16, y=y, x=x, horizontal=False), base + (x * 64 + y) * 4)
    assert np.array_equal(raw[:4096].view("<u4").reshape(16, 64), rows.T)


def test_vertical_store_of_several_columns_with_stride():
    units = Units()
    rows = pattern_vpm(units)
    base, raw = units.buffer(np.zeros((3, 10), np.uint32))
    store(units, vdw(3, 6, y=5, x=7, horizontal=False), base, stride=16)
    got = raw[:120].view("<u4").reshape(3, 10)
    assert np.array_equal(got[:, :6], rows[5:11, 7:10].T) and not got[:, 6:].any()


def test_store_16_and_8_bit_from_sub_word_offsets():
    units = Units()
    pattern_vpm(units)
    vbytes = units.vpm.bytes.reshape(-1, 64).copy()
    base, raw = units.buffer(np.zeros(64, np.uint8))
    store(units, vdw(1, 3, y=5, x=1, modew=3), base)                  # 16-bit, H = 1
    assert raw[:8].tolist() == vbytes[5, 6:12].tolist() + [0, 0]
    store(units, vdw(2, 7, y=2, x=3, modew=6), base + 16, stride=1)    # 8-bit, B = 2
    assert raw[16:31].tolist() == vbytes[2, 14:21].tolist() + [0] + vbytes[3, 14:21].tolist()


def test_vertical_16_bit_store_takes_both_halves_of_a_word_before_the_next_row():
    """Our reading (docs/hardware-choices.md "DMA is packed"): a vertical 16-bit memory row
    runs down its column 4 bytes per VPM row, halves 0 and 1 of (Y, X), then of (Y + 1, X); the
    depthwise kernel's channel-major fp16 result stages pixel pairs on it."""
    units = Units()
    pattern_vpm(units)
    vbytes = units.vpm.bytes.reshape(-1, 64).copy()
    base, raw = units.buffer(np.zeros(32, np.uint8))
    store(units, vdw(2, 3, y=5, x=7, modew=2, horizontal=False), base, stride=4)   # 3 halves

    def column(x):
        return vbytes[5, 4 * x:4 * x + 4].tolist() + vbytes[6, 4 * x:4 * x + 2].tolist()

    assert raw[:20].tolist() == column(7) + [0] * 4 + column(8) + [0] * 4


def test_store_blockmode_takes_rows_from_a_linear_vpm_stream():
    units = Units()
    rows = pattern_vpm(units)
    base, raw = units.buffer(np.zeros(48, np.uint32))
    store(units, vdw(4, 8, y=1), base, stride=16, blockmode=True)
    got = raw[:192].view("<u4").reshape(4, 12)
    assert np.array_equal(got[:, :8], rows[1:3].reshape(4, 8)) and not got[:, 8:].any()


def test_units_and_depth_zero_mean_128():
    units = Units(checks=Checks(vpm_out_of_range="off"))
    units.vpm.words.reshape(128, 16)[:, 0] = np.arange(128, dtype=np.uint32) + 7
    base, raw = units.buffer(np.zeros(128, np.uint32))
    store(units, vdw(1, 0, y=0, x=0, horizontal=False), base)
    assert raw[:512].view("<u4").tolist() == list(range(7, 135))
    base, raw = units.buffer(np.zeros((128, 1), np.uint32))
    store(units, vdw(0, 1, y=0, x=0), base)
    assert raw[:512].view("<u4").tolist() == list(range(7, 135))
    strict = Units(checks=Checks(default="error"))
    base, _ = strict.buffer(np.zeros(128, np.uint32))
    with pytest.raises(CheckError) as info:
        store(strict, vdw(1, 0, y=0, horizontal=False), base)
    assert info.value.rule == "vpm_out_of_range"


def test_generic_writes_then_store_then_load_round_trip():
    units = Units()
    base, raw = units.buffer(np.zeros((4, 16), np.uint32))
    units.vpm.write_vw_setup(0, generic_write(8), 0)
    for i in range(4):
        units.vpm.write(0, np.arange(16, dtype=np.uint32) * (i + 1), 0)
    store(units, vdw(4, 16, y=8), base)
    expected = np.arange(16, dtype=np.uint32)[None, :] * np.arange(1, 5, dtype=np.uint32)[:, None]
    assert np.array_equal(raw[:256].view("<u4").reshape(4, 16), expected)
    load(units, vdr(4, 16, y=40, mpitch=3), base)
    units.vpm.write_vr_setup(0, generic_read(4, 40), 0)
    assert np.array_equal(np.stack([units.vpm.read(0, 10_000)[0] for _ in range(4)]), expected)


# -- timing --------------------------------------------------------------------------------------

def test_load_time_from_published_bandwidth_and_latency():
    units = Units()                                    # pi_zero: 300 MHz
    base, _ = units.buffer(np.zeros((16, 16), np.uint32))
    units.vpm.write_vr_setup(0, vdr(16, 16, y=0, mpitch=3), 0)
    assert units.vpm.write_vr_addr(0, base, 0) == 0    # starting a load does not stall
    transfer = math.ceil(16 * 64 / 700e6 * 300e6)      # facts §4: ~700 MB/s for full rows
    done = transfer + 24                               # + 6 instructions of latency
    assert units.vpm.read_vr_busy(0, done - 1)[0].tolist() == [1] * 16
    assert units.vpm.read_vr_wait(0, 8)[1] == done
    assert units.vpm.read_vr_busy(0, done + 4)[0].tolist() == [0] * 16


def test_second_load_waits_for_the_first():
    units = Units()
    base, _ = units.buffer(np.zeros((16, 16), np.uint32))
    units.vpm.write_vr_setup(0, vdr(16, 16, y=0, mpitch=3), 0)
    units.vpm.write_vr_addr(0, base, 0)
    first_done = units.vpm._load[0].complete
    units.vpm.write_vr_setup(0, vdr(16, 16, y=16, mpitch=3), 4)
    assert units.vpm.write_vr_addr(0, base, 8) == first_done


def test_twelve_qpus_contend_for_the_memory_bus():
    """QPU 0 loads 16 rows, then QPUs 1..11 one row each, all at clock 0: they queue."""
    units = Units()
    base, _ = units.buffer(np.zeros((16, 16), np.uint32))
    ends = []
    for qpu in range(12):
        setup = vdr(16, 16, y=0, mpitch=3) if qpu == 0 else vdr(1, 16, y=16 + qpu, mpitch=3)
        units.vpm.write_vr_setup(qpu, setup, 0)
        units.vpm.write_vr_addr(qpu, base, 0)
        ends.append(units.vpm.read_vr_wait(qpu, 0)[1])
    occupancy = math.ceil(16 * 64 / 700e6 * 300e6)
    single_row = math.ceil(64 / 700e6 * 300e6)
    assert ends == [occupancy + k * single_row + 24 for k in range(12)]


# -- checks --------------------------------------------------------------------------------------

def test_generic_access_racing_an_unwaited_load():
    units = Units()
    base, _ = units.buffer(np.zeros((16, 16), np.uint32))
    units.vpm.write_vr_setup(0, vdr(16, 16, y=0, mpitch=3), 0)
    units.vpm.write_vr_addr(0, base, 0)
    units.vpm.write_vr_setup(1, generic_read(1, 20), 0)
    units.vpm.read(1, 5000)                               # row 20: not covered by the load
    units.vpm.write_vr_setup(1, generic_read(1, 3), 0)
    with pytest.raises(CheckError) as info:
        units.vpm.read(1, 5000)                           # even late: nobody waited for the load
    assert info.value.rule == "vpm_dma_race" and info.value.qpu == 1
    units.vpm.read_vr_wait(0, 0)
    units.vpm.write_vr_setup(1, generic_read(1, 3), 0)
    units.vpm.read(1, 5000)


def test_store_races_only_with_writers():
    units = Units()
    base, _ = units.buffer(np.zeros((16, 16), np.uint32))
    units.vpm.write_vw_setup(0, vdw(16, 16, y=0), 0)
    units.vpm.write_vw_addr(0, base, 0)
    units.vpm.write_vr_setup(0, generic_read(1, 0), 0)
    units.vpm.read(0, 0)                                  # reading what a store reads is fine
    units.vpm.write_vw_setup(0, generic_write(15), 0)
    with pytest.raises(CheckError) as info:
        units.vpm.write(0, np.zeros(16, np.uint32), 0)
    assert info.value.rule == "vpm_dma_race"


def test_faults_name_the_dma_unit_and_address():
    units = Units()
    units.vpm.write_vr_setup(0, vdr(1, 16, y=0, mpitch=3), 0)
    with pytest.raises(MemoryFault) as info:
        units.vpm.write_vr_addr(0, 0x40, 0)
    assert info.value.unit == "dma_load" and info.value.address == 0x40 and info.value.qpu == 0
    units.vpm.write_vw_setup(5, vdw(1, 16, y=0), 0)
    with pytest.raises(MemoryFault) as info:
        units.vpm.write_vw_addr(5, 0x80, 0)
    assert info.value.unit == "dma_store" and info.value.address == 0x80 and info.value.qpu == 5


def test_store_not_waited_for_at_the_end():
    for checks in (STRICT, Checks()):
        units = Units(checks=checks.copy())
        base, _ = units.buffer(np.zeros(16, np.uint32))
        units.vpm.write_vw_setup(3, vdw(1, 16, y=0), 0)
        units.vpm.write_vw_addr(3, base, 0)
        if checks is STRICT:
            with pytest.raises(CheckError) as info:
                units.vpm.finish([3])
            assert info.value.rule == "dma_in_flight_at_end" and info.value.qpu == 3
        else:       # the host's wait normally outlasts the store: a warning by default
            with pytest.warns(CheckWarning, match="dma_in_flight_at_end"):
                units.vpm.finish([3])


@pytest.mark.parametrize("setup, address_offset, rule", [
    (vdw(1, 16, y=0), 2, "dma_alignment"),
    (vdw(1, 16, y=0, laned=True), 0, "dma_unsupported"),
    (vdw(1, 16, y=0, modew=1), 0, "vpm_setup_invalid"),
    (vdw(2, 16, y=0, x=15, horizontal=False), 0, "vpm_out_of_range"),
    (vdw(1, 16, y=70), 0, "vpm_out_of_range"),
    (vdw(1, 16, y=0, x=4), 0, "vpm_out_of_range"),        # 16 words from x=4 overrun the row
])
def test_store_setups_the_checks_reject(setup, address_offset, rule):
    units = Units(checks=STRICT.copy())
    base, _ = units.buffer(np.zeros(64, np.uint32))
    units.vpm.write_vw_setup(0, setup, 0)
    with pytest.raises(CheckError) as info:
        units.vpm.write_vw_addr(0, base + address_offset, 0)
    assert info.value.rule == rule


# -- end to end: kernels written with the DSL, run by the EmulatorDevice -------------------------

def _kernels():
    from asm import kernel, r0, ra, uniform, vpm

    @kernel
    def double_block(a):
        """8x8 words from a 16x24 matrix (pitch 96 bytes: extended pitch word) -> VPM (y=2,
        x=4) -> doubled through generic access into rows 20.. -> 8x8 block of a 12x20 matrix."""
        a.mov(ra[0], uniform)
        a.mov(ra[1], uniform)
        a.setup_dma_load(rows=8, rowlen=8, y=2, x=4, pitch=96)
        a.start_dma_load(ra[0])
        a.wait_dma_load()
        a.setup_vpm_read(num=8, y=2)
        a.setup_vpm_write(y=20)
        for _ in range(8):
            a.mov(r0, vpm)
            a.add(vpm, r0, r0)
        a.setup_dma_store(units=8, depth=8, y=20, x=4, stride=(20 - 8) * 4)
        a.start_dma_store(ra[1])
        a.wait_dma_store()
        a.exit()

    @kernel
    def transpose16(a):
        """16x16 words: DMA into rows 16..31, read rows, write them as VPM columns, store."""
        a.mov(ra[0], uniform)
        a.mov(ra[1], uniform)
        a.setup_dma_load(rows=16, rowlen=16, y=16)
        a.start_dma_load(ra[0])
        a.wait_dma_load()
        a.setup_vpm_read(num=16, y=16)
        a.setup_vpm_write(y=0, x=0, horizontal=False)
        for _ in range(16):
            a.mov(r0, vpm)
            a.mov(vpm, r0)
        a.setup_dma_store(units=16, depth=16, y=0)
        a.start_dma_store(ra[1])
        a.wait_dma_store()
        a.exit()

    @kernel
    def racy_read(a):
        """Reads the VPM rows of a DMA load before waiting for it."""
        a.mov(ra[0], uniform)
        a.setup_dma_load(rows=1, rowlen=16, y=0)
        a.start_dma_load(ra[0])
        a.setup_vpm_read(num=1, y=0)
        a.mov(r0, vpm)
        a.wait_dma_load()
        a.exit()

    return double_block, transpose16, racy_read


def test_kernel_strided_load_generic_access_strided_store(device):
    double_block, _, _ = _kernels()
    src = device.array(np.arange(16 * 24, dtype=np.uint32).reshape(16, 24) * 5)
    dst = device.alloc((12, 20), np.uint32)
    device.execute(double_block.assemble(), 1, [[src[3:, 7:].address, dst[2:, 1:].address]])
    expected = np.zeros((12, 20), np.uint32)
    expected[2:10, 1:9] = 2 * np.asarray(src)[3:11, 7:15]
    assert np.array_equal(dst, expected)


def test_kernel_transposes_through_vertical_vpm_writes(device):
    _, transpose16, _ = _kernels()
    src = device.array(np.arange(256, dtype=np.uint32).reshape(16, 16) + 7)
    dst = device.alloc((16, 16), np.uint32)
    device.execute(transpose16.assemble(), 1, [[src.address, dst.address]])
    assert np.array_equal(dst, np.asarray(src).T)


def test_kernel_reading_an_unwaited_load_is_a_race():
    from vc4nn.emulator import EmulatorDevice
    _, _, racy_read = _kernels()
    with EmulatorDevice() as device:
        src = device.array(np.zeros(16, np.uint32))
        with pytest.raises(CheckError) as info:
            device.execute(racy_read.assemble(), 1, [[src.address]])
    assert info.value.rule == "vpm_dma_race" and info.value.qpu == 0 and info.value.pc is not None


# -- the extended pitch (MPITCHB) is 14 bits wide (facts §5.18) ---------------------------------

@pytest.mark.parametrize("row_floats", [3072, 2500])      # py-videocore's published B rows; another
def test_load_rows_of_a_wide_matrix_through_the_14_bit_pitch(row_floats):
    units = Units()
    m = np.random.default_rng(row_floats).random((16, row_floats), dtype=np.float32)
    base, _ = units.buffer(m)
    pitch = row_floats * 4                                  # 12288 / 10000 bytes: past 13 bits
    load(units, vdr(16, 16, y=0, mpitch=0), base + 4 * 100, pitch=pitch)
    assert np.array_equal(units.vpm_rows(16).view(np.float32), m[:, 100:116])
    assert not units.checks.warnings


def test_a_pitch_the_hardware_does_not_honour_stops_the_run():
    units = Units()
    with pytest.raises(CheckError) as info:                 # 4096 floats: qmkl's failing case
        units.vpm.write_vr_setup(0, vdr_pitch(16384), 0)
    assert info.value.rule == "dma_pitch_out_of_range" and "16384" in str(info.value)


@pytest.mark.parametrize("word, what", [
    (generic_read(1, 0) | 1 << 26, "generic VPM read setup"),
    (generic_write(0) | 1 << 20, "generic VPM write setup"),
    (vdw_stride(0) | 1 << 20, "DMA store stride setup"),
])
def test_unused_setup_bits_warn(word, what):
    units = Units()
    register = units.vpm.write_vr_setup if "read" in what else units.vpm.write_vw_setup
    with pytest.warns(CheckWarning, match="vpm_setup_unused_bits"):
        register(0, word, 0)
    assert what in units.checks.warnings[0]
    clean = Units()
    register = clean.vpm.write_vr_setup if "read" in what else clean.vpm.write_vw_setup
    register(0, word & ~(1 << 26 | 1 << 20), 0)
    assert not clean.checks.warnings


def test_generic_access_past_row_63_is_reported():
    units = Units()
    units.vpm.write_vw_setup(0, generic_write(70), 0)        # ADDR 70: horizontal row 70
    with pytest.warns(CheckWarning, match="vpm_out_of_range"):
        units.vpm.write(0, np.arange(16, dtype=np.uint32), 0)
    units.vpm.write_vw_setup(0, generic_write(63), 0)
    units.vpm.write(0, np.arange(16, dtype=np.uint32), 0)
    assert len(units.checks.warnings) == 1


def test_kernel_loads_py_videocore_sized_rows(device):
    """A DSL kernel loads a 16x16 block of a (16, 3072) float matrix: the DSL emits the 14-bit
    extended pitch word (12288 bytes) and the rows land as numpy slices them."""
    from asm import kernel, r0, ra, uniform, vpm

    @kernel
    def block(a):
        a.mov(ra[0], uniform)
        a.mov(ra[1], uniform)
        a.setup_dma_load(rows=16, rowlen=16, y=0, pitch=3072 * 4)
        a.start_dma_load(ra[0])
        a.wait_dma_load()
        a.setup_dma_store(units=16, depth=16, y=0)
        a.start_dma_store(ra[1])
        a.wait_dma_store()
        a.exit()

    src = device.array(np.random.default_rng(1).random((16, 3072), dtype=np.float32))
    dst = device.alloc((16, 16), np.float32)
    device.execute(block.assemble(), 1, [[src[:, 2048:].address, dst.address]])
    assert np.array_equal(dst, np.asarray(src)[:, 2048:2064])


def test_a_run_reports_the_clocks_the_memory_bus_was_busy():
    """transpose16 moves 16 full rows in and 16 out; the bus also fills the program's
    instruction lines and the uniforms' line (64 bytes at 1184 MB/s each)."""
    from vc4nn.emulator import EmulatorDevice
    _, transpose16, _ = _kernels()
    device = EmulatorDevice(board="pi_zero")                 # 300 MHz
    program = transpose16.assemble()
    src = device.array(np.arange(256, dtype=np.uint32).reshape(16, 16))
    dst = device.alloc((16, 16), np.uint32)
    run = device.execute(program, 1, [[src.address, dst.address]])
    loads = math.ceil(16 * 64 / 700e6 * 300e6)              # facts §4: ~700 MB/s, full rows
    stores = 16 * (9.96e-9 + 64 / 1184e6) * 300e6             # docs/cycle-model.md store rows
    lines = -(-len(program) * 8 // 64) + 1
    fill = 64 / 1184e6 * 300e6
    assert loads + stores <= run.bus_busy_clocks <= loads + stores + lines * (fill + 1)
    assert run.bus_busy_clocks < run.cycles
    both = run.followed_by(run)
    assert both.bus_busy_clocks == 2 * run.bus_busy_clocks
