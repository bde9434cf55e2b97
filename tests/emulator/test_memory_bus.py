"""The memory bus and the V3D L2 in front of it: hits, misses, LRU eviction, in-flight fills,
sharing across QPUs and slices, DMA bypass, determinism.

Expected clocks are derived by hand from the published figures (facts §4), not from the code:
- an L2 line fill moves at the memory path's peak, the DMA store row model's: through 1000 MB/s
  (64-byte rows) and 300 MB/s (4-byte rows) it is (64 - 4) / (64/1000e6 - 4/300e6) = 1184 MB/s,
  so a 64-byte line holds the bus ceil(64 / 1184.2e6 * 300e6) = ceil(16.2) = 17 clocks at
  300 MHz (pi_zero), ceil(13.5) = 14 at 250 MHz (pi1);
- RAM: 20 instructions x 4 clocks = 80; TMU cache hit: 9 x 4 = 36;
- L2 hit: the assumption of timing.py, midway between them: 14.5 x 4 = 58;
- L2: 32 KB, 4 ways, 64 B lines (ADD cache table) -> 128 sets: lines 128 apart share a set.
"""

import numpy as np
import pytest

from asm import element_number, kernel, r0, r1, tmu0_s, uniform
from vc4nn.emulator import EmulatorDevice
from vc4nn.emulator.cache import LruCache
from vc4nn.emulator.timing import Timing
from vc4nn.emulator.bus import MemoryBus

from .unit_setup import Units, vdr

FILL, FILL_PI1 = 17, 14
RAM, TMU_HIT, L2_HIT = 80, 36, 58
L2_SETS = 32768 // (64 * 4)
LINE = 64
BASE = 0xC0010000          # the direct (uncached) alias: only the V3D L2 caches these lines


def bus(board="pi_zero", **overrides):
    return MemoryBus(Timing.for_board(board, **overrides))


# -- the LRU cache -------------------------------------------------------------------------------

def test_lru_cache_hits_misses_and_evicts_the_least_recently_used_of_a_set():
    cache = LruCache(size=4 * 2 * 64, line=64, ways=2)          # 4 sets of 2 ways
    assert [cache.touch(n) for n in (0, 4, 0)] == [False, False, True]
    assert not cache.touch(8)       # set 0 now holds 0 and 8: 4 was least recently used
    assert cache.touch(0) and cache.touch(8) and not cache.touch(4)
    assert not cache.touch(1)       # another set is untouched by all this
    assert cache.touch(1)


def test_lru_cache_keeps_values_and_size_zero_holds_nothing():
    cache = LruCache(size=64 * 4, line=64, ways=4)              # one set
    cache.put(7, 123)
    assert cache.get(7) == 123 and cache.get(8) is None
    empty = LruCache(size=0, line=64, ways=4)
    assert [empty.touch(5), empty.touch(5)] == [False, False]


# -- read_line -----------------------------------------------------------------------------------

def test_a_miss_takes_the_bus_and_arrives_after_the_ram_latency():
    b = bus()
    assert b.read_line(100, BASE, LINE, RAM)[0] == 100 + RAM
    assert (b.busy_clocks, b.l2_misses, b.l2_hits) == (FILL, 1, 0)


def test_a_line_in_the_l2_arrives_after_the_l2_latency_without_the_bus():
    b = bus()
    b.read_line(0, BASE, LINE, RAM)[0]
    assert b.read_line(1000, BASE, LINE, RAM)[0] == 1000 + L2_HIT
    assert (b.busy_clocks, b.l2_hits) == (FILL, 1)


def test_a_line_still_on_its_way_is_waited_for_not_read_twice():
    b = bus()
    b.read_line(0, BASE, LINE, RAM)[0]                    # arrives at 80
    assert b.read_line(10, BASE, LINE, RAM)[0] == RAM     # 10 + 58 = 68 would be too early
    assert b.read_line(30, BASE, LINE, RAM)[0] == 30 + L2_HIT
    assert b.busy_clocks == FILL


def test_alias_bits_do_not_make_another_line():
    b = bus()
    b.read_line(0, (BASE & 0x3FFFFFFF) | 0x40000000, LINE, RAM)[0]
    assert b.read_line(500, BASE | 0xC0000000, LINE, RAM)[0] == 500 + L2_HIT


def test_misses_queue_on_the_bus():
    b = bus()
    arrivals = [b.read_line(0, BASE + LINE * k, LINE, RAM)[0] for k in range(12)]
    # the k-th line's bus slot ends at 17 (k + 1); the latency hides the first four
    assert arrivals == [max(RAM, FILL * (k + 1)) for k in range(12)]
    assert b.busy_clocks == 12 * FILL


def test_lru_eviction_in_a_set_of_the_l2():
    b = bus()
    for k in range(5):                                  # five lines of one 4-way set
        b.read_line(1000 * k, BASE + LINE * L2_SETS * k, LINE, RAM)[0]
    assert b.read_line(9000, BASE + LINE * L2_SETS * 4, LINE, RAM)[0] == 9000 + L2_HIT
    assert b.read_line(10000, BASE, LINE, RAM)[0] == 10000 + RAM           # the first, evicted
    assert b.busy_clocks == 6 * FILL


# -- the VideoCore L2 behind the V3D L2, by bus alias (vc4nn.hardware) --------------------------
# A line from the VideoCore L2 holds the bus ceil(64 / 4e9 * 300e6) = 5 clocks (timing.py's
# vc_l2_hit_bandwidth, calibrated on GPU_FFT) and arrives 58 clocks after the request
# (vc_l2_hit_latency).
VC_FILL, VC_HIT = 5, 58


def _evict_from_the_v3d_l2(b, base):
    """Read ``base``, then four more lines of its 4-way V3D L2 set: ``base`` is evicted."""
    b.read_line(0, base, LINE, RAM)
    for k in range(1, 5):
        b.read_line(1000 * k, base + LINE * L2_SETS * k, LINE, RAM)


@pytest.mark.parametrize("alias, served_by_vc_l2", [
    (0x0, True), (0x4, True),       # normal and L1-non-allocating: allocated in the VideoCore L2
    (0x8, False),                   # coherent: looked up there, never allocated
    (0xC, False),                   # direct: uncached
])
def test_a_line_evicted_from_the_v3d_l2_comes_from_the_videocore_l2(alias, served_by_vc_l2):
    b = bus()
    base = (BASE & 0x3FFFFFFF) | alias << 28
    _evict_from_the_v3d_l2(b, base)
    busy = b.busy_clocks
    arrives = b.read_line(10000, base, LINE, RAM)[0]
    if served_by_vc_l2:
        assert arrives == 10000 + VC_HIT and b.busy_clocks - busy == VC_FILL
        assert b.vc_l2_hits == 1
    else:
        assert arrives == 10000 + RAM and b.busy_clocks - busy == FILL
        assert b.vc_l2_hits == 0


def test_without_a_videocore_l2_every_v3d_l2_miss_goes_to_sdram():
    b = bus(vc_l2_bytes=0)
    _evict_from_the_v3d_l2(b, BASE & 0x3FFFFFFF)
    assert b.read_line(10000, BASE & 0x3FFFFFFF, LINE, RAM)[0] == 10000 + RAM


def test_the_emulator_allocates_with_the_boards_flags_and_the_alias_follows():
    from vc4nn import hardware
    with EmulatorDevice(board="pi1") as dev:
        assert dev.alloc(4).address >> 30 == 1             # BCM2835: L1 non-allocating, 0x4..
        assert dev.alloc(4, flags=hardware.MEM_FLAG_DIRECT).address >> 30 == 3      # 0xC..
        assert dev.alloc(4, flags=hardware.MEM_FLAG_COHERENT).address >> 30 == 2    # 0x8..
    with EmulatorDevice(board="pi3") as dev:
        assert dev.alloc(4).address >> 30 == 3             # BCM2837: direct, 0xC..


def test_a_request_spanning_two_l2_lines_waits_for_both():
    b = bus()
    b.read_line(0, BASE, LINE, RAM)[0]
    assert b.read_line(1000, BASE, 2 * LINE, RAM)[0] == 1000 + RAM         # second line misses
    assert (b.l2_hits, b.l2_misses) == (1, 2)


def test_a_bus_without_an_l2_pays_the_bus_for_every_fill():
    b = bus(l2_cache_bytes=0)
    b.read_line(0, BASE, LINE, RAM)[0]
    assert b.read_line(1000, BASE, LINE, RAM)[0] == 1000 + RAM
    assert b.busy_clocks == 2 * FILL


def test_the_bus_runs_at_the_clock_of_the_timing_it_uses():
    b = MemoryBus()
    b.use(Timing.for_board("pi1"))
    b.read_line(0, BASE, LINE, RAM)[0]
    assert b.busy_clocks == FILL_PI1


@pytest.mark.parametrize("alias, served_by_vc_l2", [(0x4, True), (0xC, False)])
def test_a_uniform_line_keeps_the_bus_alias_of_its_address(alias, served_by_vc_l2):
    b = bus()
    base = (BASE & 0x3FFFFFFF) | alias << 28
    b.uniform_line(0, base + 8)
    for k in range(1, 5):       # evict it from the V3D L2 (lines of the same set)
        b.read_line(1000 * k, (BASE & 0x3FFFFFFF) + LINE * L2_SETS * k, LINE, RAM)
    assert b.uniform_line(10000, base + 8) == 10000 + (VC_HIT if served_by_vc_l2 else RAM)
    assert b.vc_l2_hits == int(served_by_vc_l2)


def test_uniform_lines_share_the_l2_with_the_tmu():
    b = bus()
    b.read_line(0, BASE, LINE, RAM)[0]                                   # a TMU fill
    assert b.uniform_line(1000, BASE + 44) == 1000 + L2_HIT           # a uniform in that line
    assert b.uniform_line(2000, BASE + LINE + 4) == 2000 + RAM        # the next line
    assert b.busy_clocks == 2 * FILL


# -- through the units ---------------------------------------------------------------------------

def test_the_l2_is_shared_by_the_tmus_of_all_slices():
    units = Units()
    base, _ = units.buffer(np.arange(1024, dtype=np.uint32))
    addresses = np.full(16, base, np.uint32)
    units.tmu.write(0, 0, "s", addresses, 0)            # slice 0 reads the line from RAM
    units.tmu.write(4, 0, "s", addresses, 1000)         # slice 1: its TMU cache misses, the L2 hits
    units.tmu.write(5, 0, "s", addresses, 2000)         # slice 1 again: its TMU cache hits
    assert units.tmu.load(0, 0, 0)[1] == RAM
    assert units.tmu.load(4, 0, 0)[1] == 1000 + L2_HIT
    assert units.tmu.load(5, 0, 0)[1] == 2000 + TMU_HIT
    assert units.bus.busy_clocks == FILL


def test_dma_bypasses_the_l2():
    units = Units()
    base, _ = units.buffer(np.arange(1024, dtype=np.uint32))
    units.vpm.write_vr_setup(0, vdr(1, 16, y=0), 0)
    units.vpm.write_vr_addr(0, base, 0)                 # the VDR reads the line...
    busy = units.bus.busy_clocks
    assert busy > 0 and units.bus.l2_misses == 0
    units.tmu.write(1, 0, "s", np.full(16, base, np.uint32), 1000)
    assert units.tmu.load(1, 0, 0)[1] == 1000 + RAM     # ...but not into the L2
    assert units.bus.busy_clocks == busy + FILL


@kernel
def gather_lines(a):
    """Each lane reads the first word of line ``lane`` from the uniform base address."""
    a.mov(r0, uniform)
    a.shl(r1, element_number, 6)
    a.add(tmu0_s, r0, r1)
    a.nop(sig="ldtmu0")
    a.exit()


def run_gather(bases):
    with EmulatorDevice(board="pi_zero") as device:
        table = device.alloc(12 * 16 * 16, np.uint32)
        run = device.execute(gather_lines.assemble(), len(bases),
                             [[table.address + base] for base in bases])
        return run, device.machine.bus


def test_twelve_qpus_reading_the_same_lines_pay_the_bus_once():
    shared_run, shared = run_gather([0] * 12)
    own_run, own = run_gather([q * 16 * LINE for q in range(12)])
    # The uniform fetches cost the same in both runs; the TMU lines: 16 fills for all 12 QPUs
    # when they share them, 12 x 16 when each reads its own.
    assert own.busy_clocks - shared.busy_clocks == (12 * 16 - 16) * FILL
    assert shared_run.cycles < own_run.cycles


def test_the_model_is_deterministic():
    first, _ = run_gather([(q % 3) * 8 * LINE for q in range(12)])
    second, _ = run_gather([(q % 3) * 8 * LINE for q in range(12)])
    assert first.cycles == second.cycles
    assert [q.stalls for q in first.qpus] == [q.stalls for q in second.qpus]


@pytest.mark.parametrize("board, fill", [("pi_zero", FILL), ("pi1", FILL_PI1)])
def test_the_machine_bus_runs_at_the_board_clock(board, fill):
    with EmulatorDevice(board=board) as device:
        table = device.alloc(16 * 16, np.uint32)
        program = gather_lines.assemble()
        assert len(program.words) == 8                  # one line of code
        device.execute(program, 1, [[table.address]])
        # 16 TMU lines, 1 uniform line, 1 code line (the instruction cache's fill)
        assert device.machine.bus.busy_clocks == (16 + 1 + 1) * fill
