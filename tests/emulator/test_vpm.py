"""Generic QPU access to the VPM against a reference written per case from facts §3.

The reference spells out, for every size and orientation, which (row, word, byte) of the VPM
each element uses, following the ADDR forms of facts §3 and the packed/laned reading recorded in
docs/hardware-choices.md ("Emulator units"): laned = each word split into lanes, one element per
word; packed = a sub-vector of consecutive sub-words from consecutive words.
"""

import itertools

import numpy as np
import pytest

from vc4nn.emulator.checks import Checks
from vc4nn.emulator.errors import CheckError

from .unit_setup import Units, generic_read, generic_write


def reference_positions(horizontal, laned, size, addr):
    """For each element, the list of (row, word, byte) of its bytes, low byte first."""
    out = []
    for i in range(16):
        if horizontal and size == 32:
            cells = [(addr & 63, i, b) for b in range(4)]
        elif horizontal and size == 16:
            y, h = (addr >> 1) & 63, addr & 1
            if laned:
                cells = [(y, i, 2 * h), (y, i, 2 * h + 1)]
            else:
                cells = [(y, 8 * h + i // 2, 2 * (i % 2)), (y, 8 * h + i // 2, 2 * (i % 2) + 1)]
        elif horizontal:
            y, b = (addr >> 2) & 63, addr & 3
            cells = [(y, i, b)] if laned else [(y, 4 * b + i // 4, i % 4)]
        elif size == 32:
            y0, x = 16 * ((addr >> 4) & 3), addr & 15
            cells = [(y0 + i, x, b) for b in range(4)]
        elif size == 16:
            y0, x, h = 16 * ((addr >> 5) & 3), (addr >> 1) & 15, addr & 1
            if laned:
                cells = [(y0 + i, x, 2 * h), (y0 + i, x, 2 * h + 1)]
            else:
                cells = [(y0 + 8 * h + i // 2, x, 2 * (i % 2)), (y0 + 8 * h + i // 2, x, 2 * (i % 2) + 1)]
        else:
            y0, x, b = 16 * ((addr >> 6) & 3), (addr >> 2) & 15, addr & 3
            cells = [(y0 + i, x, b)] if laned else [(y0 + 4 * b + i // 4, x, i % 4)]
        out.append(cells)
    return out


def filled_units():
    units = Units()
    units.vpm.bytes[:] = (np.arange(units.vpm.bytes.size) * 7 + 3) % 251
    return units


MODES = [(h, laned, size) for h, laned, size in itertools.product((True, False), (False, True), (8, 16, 32))
         if not (laned and size == 32)]
ADDRS = [0, 1, 2, 3, 5, 37, 106, 255]


@pytest.mark.parametrize("horizontal, laned, size", MODES)
@pytest.mark.parametrize("addr", ADDRS)
def test_generic_read_matches_reference(horizontal, laned, size, addr):
    units = filled_units()
    cube = units.vpm.bytes.reshape(-1, 16, 4).copy()
    units.vpm.write_vr_setup(0, generic_read(1, addr, size, horizontal, laned), 0)
    values, _ = units.vpm.read(0, 100)
    expected = [sum(int(cube[r, w, b]) << (8 * k) for k, (r, w, b) in enumerate(cells))
                for cells in reference_positions(horizontal, laned, size, addr)]
    assert values.dtype == np.uint32
    assert values.tolist() == expected          # sub-word reads are zero-extended


@pytest.mark.parametrize("horizontal, laned, size", MODES)
@pytest.mark.parametrize("addr", ADDRS)
def test_generic_write_touches_exactly_the_reference_bytes(horizontal, laned, size, addr):
    units = filled_units()
    before = units.vpm.bytes.reshape(-1, 16, 4).copy()
    values = (np.arange(16, dtype=np.uint32) * 0x01010101 + 0x80402010).astype(np.uint32)
    units.vpm.write_vw_setup(0, generic_write(addr, size, horizontal, laned), 0)
    units.vpm.write(0, values, 0)
    expected = before.copy()
    for i, cells in enumerate(reference_positions(horizontal, laned, size, addr)):
        for k, (r, w, b) in enumerate(cells):
            expected[r, w, b] = (int(values[i]) >> (8 * k)) & 0xFF
    assert np.array_equal(units.vpm.bytes.reshape(-1, 16, 4), expected)


def test_hand_decoded_examples():
    """Three addresses decoded by hand from facts §3."""
    units = Units()
    rows = units.vpm_rows()
    rows[:] = np.arange(64 * 16, dtype=np.uint32).reshape(64, 16) * 0x00010001 + 0x03020100
    # horizontal 8-bit laned, ADDR = {Y=3, B=2} = 14: byte 2 of each word of row 3
    units.vpm.write_vr_setup(0, generic_read(1, 14, 8, True, True), 0)
    assert units.vpm.read(0, 0)[0].tolist() == [(int(v) >> 16) & 0xFF for v in rows[3]]
    # vertical 32-bit, ADDR = {Y[5:4]=2, X=5} = 0x25: column 5 of rows 32..47
    units.vpm.write_vr_setup(0, generic_read(1, 0x25, 32, False), 0)
    assert units.vpm.read(0, 0)[0].tolist() == rows[32:48, 5].tolist()
    # vertical 16-bit laned, ADDR = {Y[5:4]=1, X=5, H=1} = 43: high halves of column 5, rows 16..31
    units.vpm.write_vr_setup(0, generic_read(1, 43, 16, False, True), 0)
    assert units.vpm.read(0, 0)[0].tolist() == [int(v) >> 16 for v in rows[16:32, 5]]


def test_stride_advances_address_after_each_access():
    units = filled_units()
    rows = units.vpm_rows().copy()
    units.vpm.write_vr_setup(0, generic_read(4, 2, stride=3), 0)
    got = [units.vpm.read(0, 0)[0] for _ in range(4)]
    assert np.array_equal(np.stack(got), rows[[2, 5, 8, 11]])


def test_stride_zero_means_64_and_wraps_to_the_same_row():
    units = filled_units()
    rows = units.vpm_rows().copy()
    units.vpm.write_vr_setup(0, generic_read(2, 9, stride=64), 0)
    assert np.array_equal(units.vpm.read(0, 0)[0], rows[9])
    assert np.array_equal(units.vpm.read(0, 0)[0], rows[9])


def test_vertical_stride_walks_columns_then_the_next_16_rows():
    units = Units()
    units.vpm.write_vw_setup(0, generic_write(0x0E, 32, horizontal=False), 0)   # {Y[5:4]=0, X=14}
    for i in range(3):
        units.vpm.write(0, np.full(16, 100 + i, dtype=np.uint32), 0)
    rows = units.vpm_rows()
    assert (rows[0:16, 14] == 100).all() and (rows[0:16, 15] == 101).all()
    assert (rows[16:32, 0] == 102).all()        # ADDR 0x0F + 1 = 0x10: {Y[5:4]=1, X=0}


def test_writes_advance_horizontally_row_by_row():
    units = Units()
    units.vpm.write_vw_setup(0, generic_write(4, stride=2), 0)
    for i in range(3):
        units.vpm.write(0, np.arange(16, dtype=np.uint32) + 16 * i, 0)
    rows = units.vpm_rows()
    for i, y in enumerate((4, 6, 8)):
        assert rows[y].tolist() == list(range(16 * i, 16 * i + 16))
    assert not rows[[5, 7]].any()


def test_num_zero_means_16_and_reading_past_it_is_an_error():
    units = filled_units()
    units.vpm.write_vr_setup(3, generic_read(16, 0), 0)
    for _ in range(16):
        units.vpm.read(3, 0)
    with pytest.raises(CheckError) as info:
        units.vpm.read(3, 0)
    assert info.value.rule == "vpm_read_past_setup" and info.value.qpu == 3


def test_two_read_setups_queue_and_a_third_overflows():
    units = filled_units()
    rows = units.vpm_rows().copy()
    units.vpm.write_vr_setup(0, generic_read(2, 1), 0)
    units.vpm.write_vr_setup(0, generic_read(1, 7), 0)
    got = [units.vpm.read(0, 0)[0] for _ in range(3)]
    assert np.array_equal(np.stack(got), rows[[1, 2, 7]])
    units.vpm.write_vr_setup(0, generic_read(1, 0), 0)
    units.vpm.write_vr_setup(0, generic_read(1, 0), 0)
    with pytest.raises(CheckError) as info:
        units.vpm.write_vr_setup(0, generic_read(1, 0), 0)
    assert info.value.rule == "vpm_read_queue_overflow"


def test_first_read_waits_for_the_read_fifo():
    units = filled_units()
    latency = units.timing.vpm_read_latency
    assert latency == 20                                 # facts §4: ~5 instructions x 4 clocks
    units.vpm.write_vr_setup(0, generic_read(2, 0), 100)
    assert units.vpm.read(0, 104)[1] == 100 + latency
    assert units.vpm.read(0, 300)[1] == 300


def test_access_without_setup_and_reserved_size():
    units = Units()
    for call in (lambda: units.vpm.read(0, 0), lambda: units.vpm.write(0, np.zeros(16, np.uint32), 0)):
        with pytest.raises(CheckError) as info:
            call()
        assert info.value.rule == "vpm_missing_setup"
    with pytest.raises(CheckError) as info:
        units.vpm.write_vr_setup(0, 3 << 8 | 1 << 20, 0)
    assert info.value.rule == "vpm_setup_invalid"


def test_only_element_0_of_a_setup_counts_and_setups_are_per_qpu():
    units = filled_units()
    rows = units.vpm_rows().copy()
    setup = np.full(16, generic_read(1, 9), dtype=np.uint32)
    setup[0] = generic_read(1, 5)
    units.vpm.write_vr_setup(0, setup, 0)
    units.vpm.write_vr_setup(1, generic_read(1, 6), 0)
    assert np.array_equal(units.vpm.read(1, 0)[0], rows[6])
    assert np.array_equal(units.vpm.read(0, 0)[0], rows[5])


def test_vpm_is_shared_between_qpus():
    units = Units()
    units.vpm.write_vw_setup(4, generic_write(10), 0)
    units.vpm.write(4, np.arange(16, dtype=np.uint32) * 3, 0)
    units.vpm.write_vr_setup(9, generic_read(1, 10), 0)
    assert units.vpm.read(9, 0)[0].tolist() == [3 * i for i in range(16)]


def test_unread_vectors_at_end_are_reported():
    units = Units(checks=Checks(vpm_read_pending_at_end="error"))
    units.vpm.write_vr_setup(2, generic_read(3, 0), 0)
    units.vpm.read(2, 0)
    with pytest.raises(CheckError) as info:
        units.vpm.finish([2])
    assert info.value.rule == "vpm_read_pending_at_end" and "2 VPM vectors" in str(info.value)
