"""TMU direct lookups: per-element words, order, swap, FIFO limits, cache timing, stale reads."""

import numpy as np
import pytest

from vc4nn.emulator.checks import Checks, CheckWarning
from vc4nn.emulator.errors import CheckError, MemoryFault

from .unit_setup import Units, vdw, vdw_stride

HIT, MISS = 36, 80      # facts §4 (WIKI): 9 and 20 instructions x 4 clocks
L2 = 58                 # timing.py assumption: an L2 hit midway, 14.5 instructions x 4 clocks


def table(units, n=256):
    data = (np.arange(n, dtype=np.uint32) * 2654435761) & 0xFFFFFFFF
    base, _ = units.buffer(data.astype(np.uint32))
    return base, data.astype(np.uint32)


def test_each_element_reads_the_word_at_its_address():
    units = Units()
    base, data = table(units)
    index = np.array([5, 0, 255, 17, 17, 3, 100, 64, 1, 2, 9, 8, 7, 200, 150, 31])
    units.tmu.write(0, 0, "s", (base + 4 * index).astype(np.uint32), 0)
    values, _ = units.tmu.load(0, 0, 0)
    assert values.tolist() == data[index].tolist()


def test_alias_bits_and_low_address_bits_are_ignored():
    units = Units()
    base, data = table(units)
    plain = base & 0x3FFFFFFF
    addresses = np.array([plain | 0x40000000, plain | 0x80000000, plain + 4 + 3, plain + 9] * 4,
                         dtype=np.uint32)
    units.tmu.write(0, 1, "s", addresses, 0)
    assert units.tmu.load(0, 1, 0)[0].tolist() == [data[0], data[0], data[1], data[2]] * 4


def test_results_come_back_in_order_per_unit():
    units = Units()
    base, data = table(units)
    for k in range(3):
        units.tmu.write(1, 0, "s", np.full(16, base + 4 * k, np.uint32), 0)
    units.tmu.write(1, 1, "s", np.full(16, base + 40, np.uint32), 0)
    assert units.tmu.load(1, 1, 0)[0][0] == data[10]
    assert [int(units.tmu.load(1, 0, 0)[0][0]) for _ in range(3)] == data[:3].tolist()


def test_qpus_2_and_3_of_each_slice_swap_units_unless_noswap():
    units = Units()
    assert [units.tmu.physical_unit(q, 0) for q in range(12)] == [0, 0, 1, 1] * 3
    assert [units.tmu.physical_unit(q, 1) for q in range(12)] == [1, 1, 0, 0] * 3
    units.tmu.set_noswap(6, np.full(16, 1, np.uint32))
    assert units.tmu.physical_unit(6, 0) == 0
    units.tmu.reset(6)
    assert units.tmu.physical_unit(6, 0) == 1


def test_swap_shows_in_which_cache_serves_the_request():
    """QPU 0 warms TMU0 of slice 0. QPU 1 (tmu0 -> TMU0) hits; QPU 2 (tmu0 -> TMU1) misses its
    TMU cache and finds the line in the shared L2, unless it wrote tmu_noswap."""
    units = Units()
    base, _ = table(units)
    addresses = np.full(16, base, np.uint32)
    units.tmu.write(0, 0, "s", addresses, 0)
    units.tmu.write(1, 0, "s", addresses, 1000)
    units.tmu.write(2, 0, "s", addresses, 2000)
    assert units.tmu.load(0, 0, 0)[1] == MISS
    assert units.tmu.load(1, 0, 0)[1] == 1000 + HIT
    assert units.tmu.load(2, 0, 0)[1] == 2000 + L2
    units.tmu.set_noswap(3, 1)
    units.tmu.write(3, 0, "s", addresses, 3000)
    assert units.tmu.load(3, 0, 0)[1] == 3000 + HIT


def test_cache_lines_are_64_bytes_and_the_cache_is_direct_mapped():
    """ADD cache table: 4 KB, 64 B lines, no associativity ('sequence counts': one read 4 KB
    away evicts a line)."""
    units = Units()
    base, _ = table(units, 4096)
    def ready(offset, now):
        units.tmu.write(0, 0, "s", np.full(16, base + offset, np.uint32), now)
        return units.tmu.load(0, 0, 0)[1] - now
    assert ready(60, 0) == MISS
    assert ready(4, 100) == HIT              # same 64-byte line
    assert ready(64, 200) == MISS            # next line
    assert ready(4096, 300) == MISS          # 4 KB away: same place in the cache
    assert ready(0, 400) == L2               # evicted from the TMU cache, still in the L2
    assert ready(64, 500) == HIT             # the other place was not touched
    assert ready(4096, 600) == L2


def test_a_request_waits_for_its_slowest_line():
    units = Units()
    base, _ = table(units, 4096)
    units.tmu.write(0, 0, "s", np.full(16, base, np.uint32), 0)
    units.tmu.load(0, 0, 0)
    addresses = np.array([base] * 8 + [base + 128] * 8, np.uint32)     # one hit, one miss
    units.tmu.write(0, 0, "s", addresses, 1000)
    assert units.tmu.load(0, 0, 0)[1] == 1000 + MISS


VC_L2_HIT = 58          # timing.py assumption vc_l2_hit_latency
L2_SETS, LINE = 32768 // (64 * 4), 64       # V3D L2: 32 KB, 4 ways, 64-byte lines


@pytest.mark.parametrize("alias, served_by_vc_l2", [
    (0x4, True),                    # L1-non-allocating: allocated in the VideoCore L2
    (0xC, False),                   # direct: uncached, a V3D L2 miss goes to SDRAM
])
def test_a_tmu_fill_keeps_the_bus_alias_of_its_address(alias, served_by_vc_l2):
    """QPU 0 reads a line; four other lines of its V3D L2 set evict it there; QPU 4 (another
    slice, so another TMU cache) reads it again: the VideoCore L2 serves it only when the
    address's alias is cached there (vc4nn.hardware)."""
    units = Units()
    base, _ = table(units)
    address = (base & 0x3FFFFFFF) | alias << 28
    units.tmu.write(0, 0, "s", np.full(16, address, np.uint32), 0)
    for k in range(1, 5):
        units.bus.read_line(1000 * k, (base & 0x3FFFFFFF) + LINE * L2_SETS * k, LINE, MISS)
    units.tmu.write(4, 0, "s", np.full(16, address, np.uint32), 10000)
    ready = units.tmu.load(4, 0, 0)[1]
    assert units.bus.vc_l2_hits == int(served_by_vc_l2)
    assert ready == 10000 + (VC_L2_HIT if served_by_vc_l2 else MISS)


def test_fifo_overflow_and_empty_load_are_errors():
    units = Units()
    base, _ = table(units)
    for _ in range(4):          # facts §5.13: 4 reliable direct requests
        units.tmu.write(0, 0, "s", np.full(16, base, np.uint32), 0)
    with pytest.warns(CheckWarning, match="tmu_fifo_unreliable"):     # 5..8: the errata's
        for _ in range(4):                                            # "unreliable", a warning
            units.tmu.write(0, 0, "s", np.full(16, base, np.uint32), 0)
    with pytest.raises(CheckError) as info:          # the guide's FIFO holds 8
        units.tmu.write(0, 1, "s", np.full(16, base, np.uint32), 0)
    assert info.value.rule == "tmu_fifo_overflow" and info.value.qpu == 0
    for _ in range(8):
        units.tmu.load(0, 0, 0)
    with pytest.raises(CheckError) as info:
        units.tmu.load(0, 0, 0)
    assert info.value.rule == "ldtmu_empty"


def test_texture_coordinates_are_rejected():
    units = Units()
    with pytest.raises(CheckError) as info:
        units.tmu.write(0, 0, "t", np.zeros(16, np.uint32), 0)
    assert info.value.rule == "tmu_texture_unsupported"


def test_fault_names_the_tmu_and_the_element_address():
    units = Units()
    base, _ = table(units)
    addresses = np.full(16, base, np.uint32)
    addresses[7] = 0x20
    with pytest.raises(MemoryFault) as info:
        units.tmu.write(4, 0, "s", addresses, 0)
    assert info.value.unit == "tmu" and info.value.address == 0x20 and info.value.qpu == 4


def _store_words_16_to_19(units, base):
    units.vpm.write_vw_setup(0, vdw(1, 4, y=0), 0)
    units.vpm.write_vw_setup(0, vdw_stride(0), 0)
    units.vpm.write_vw_addr(0, base + 64, 0)                 # words 16..19: the table's line 1


def read(units, qpu, address):
    units.tmu.write(qpu, 0, "s", np.full(16, address, np.uint32), 0)
    return units.tmu.load(qpu, 0, 0)[0]


def test_a_line_cached_before_a_dma_store_is_a_stale_read():
    units = Units()
    base, _ = table(units)
    read(units, 1, base + 64)                                # line 1 into QPU 1's TMU0 cache
    _store_words_16_to_19(units, base)
    read(units, 1, base + 60)                                # word 15, line 0: never written
    read(units, 1, base + 80)                                # word 20: in the line, not written
    with pytest.raises(CheckError) as info:
        read(units, 1, base + 76)                            # word 19: the cached copy is old
    assert info.value.rule == "tmu_stale_read"


def test_the_l2_keeps_the_old_line_for_the_other_slices():
    units = Units()
    base, _ = table(units)
    read(units, 1, base + 64)                                # slice 0 fills line 1 in the L2
    _store_words_16_to_19(units, base)
    with pytest.raises(CheckError) as info:
        read(units, 5, base + 64)                            # slice 1 misses its TMU, hits the L2
    assert info.value.rule == "tmu_stale_read" and info.value.qpu == 5


def test_a_first_read_after_a_dma_store_fetches_the_new_data():
    units = Units()
    base, _ = table(units)
    read(units, 1, base)                                     # line 0 only
    _store_words_16_to_19(units, base)
    assert read(units, 1, base + 76)[0] == units.vpm.words[3]          # VPM word (0, 3)
    assert not units.checks.warnings


def test_results_left_at_the_end_are_reported():
    units = Units(checks=Checks(tmu_outstanding_at_end="error"))
    base, _ = table(units)
    units.tmu.write(5, 1, "s", np.full(16, base, np.uint32), 0)
    with pytest.raises(CheckError) as info:
        units.tmu.finish([5])
    assert info.value.rule == "tmu_outstanding_at_end" and info.value.qpu == 5
    units.tmu.finish([5])           # finish cleared the FIFO


# -- end to end ----------------------------------------------------------------------------------

def _gather_kernel():
    from asm import element_number, kernel, r0, r1, r4, ra, tmu0_s, uniform, vpm, vw_setup

    @kernel
    def gather_column(a, stale=False, reread=False):
        """Uniforms: column base address, out address, then the VPM write, VDW and VDW stride
        setups. Lane i reads base + 64 * i (a column of a 16x16 matrix) through tmu0; the row
        goes out by DMA. ``reread``: read the output row after the store (fresh data, since
        no cache holds it); ``stale``: read it before the store too, then after (stale)."""
        a.mov(r0, uniform)
        a.mov(ra[1], uniform)
        a.mov(vw_setup, uniform)
        a.mov(r1, element_number)
        a.shl(r1, r1, 6)
        a.add(tmu0_s, r0, r1)
        a.nop(sig="ldtmu0")
        a.mov(vpm, r4)
        if stale:
            a.mov(r0, ra[1])
            a.add(tmu0_s, r0, 0)                 # the output row's line into the TMU cache
            a.nop(sig="ldtmu0")
        a.mov(vw_setup, uniform)
        a.mov(vw_setup, uniform)
        a.start_dma_store(ra[1])
        a.wait_dma_store()
        if stale or reread:
            a.mov(r0, ra[1])
            a.add(tmu0_s, r0, 0)                 # reads what the store just wrote
            a.nop(sig="ldtmu0")
        a.exit()

    return gather_column


def test_kernel_gathers_columns_on_swapped_and_unswapped_qpus(device):
    from asm.vpm import vdw_setup, vdw_stride, vpm_write_setup
    gather_column = _gather_kernel()
    m = device.array(np.arange(256, dtype=np.uint32).reshape(16, 16) * 3 + 1)
    out = device.alloc((4, 16), np.uint32)
    uniforms = [[m[0, q:].address, out[q].address, vpm_write_setup(y=q), vdw_setup(1, 16, y=q),
                 vdw_stride(0)] for q in range(4)]                 # QPUs 2 and 3 have tmu0 swapped to TMU1
    device.execute(gather_column.assemble(), 4, uniforms)
    assert np.array_equal(out, np.asarray(m)[:, :4].T)


def test_kernel_tmu_read_after_dma_store_is_stale():
    from asm.vpm import vdw_setup, vdw_stride, vpm_write_setup
    from vc4nn.emulator import EmulatorDevice
    gather_column = _gather_kernel()
    with EmulatorDevice() as device:
        m = device.array(np.zeros((16, 16), np.uint32))
        out = device.alloc(16, np.uint32)
        with pytest.raises(CheckError) as info:
            device.execute(gather_column.assemble(stale=True), 1,
                           [[m.address, out.address, vpm_write_setup(y=0), vdw_setup(1, 16, y=0),
                             vdw_stride(0)]])
    assert info.value.rule == "tmu_stale_read"


def test_kernel_tmu_read_of_a_line_first_read_after_dma_store_is_fresh():
    from asm.vpm import vdw_setup, vdw_stride, vpm_write_setup
    from vc4nn.emulator import EmulatorDevice
    gather_column = _gather_kernel()
    with EmulatorDevice() as device:
        m = device.array(np.zeros((16, 16), np.uint32))
        out = device.alloc(16, np.uint32)
        result = device.execute(gather_column.assemble(reread=True), 1,
                                [[m.address, out.address, vpm_write_setup(y=0),
                                  vdw_setup(1, 16, y=0), vdw_stride(0)]])
    assert not result.warnings
