"""The instruction cache of the cycle model (docs/cycle-model.md "Instruction cache"): one 4 KB,
4-way, 64-byte-line cache per slice, LRU within a set, filled through the L2, no prefetch. Every
expected figure here is counted by hand from the program's layout and the parameter table;
each test runs on both cores (conftest.py)."""

import pytest

from asm import kernel, r2
from asm.isa import QPUS_PER_SLICE
from vc4nn.emulator import EmulatorDevice
from vc4nn.emulator.timing import PARAMETERS, Timing

from .conftest import branch_by_qpu

ISSUE = PARAMETERS["issue_clocks"][0]                       # 4
MISS = PARAMETERS["icache_miss_latency"][0]                 # 80: a line from RAM
L2_HIT = PARAMETERS["l2_hit_latency"][0]                    # 58: a line another slice fetched
LINE = PARAMETERS["icache_line_bytes"][0] // 8              # 8 instructions
SETS = PARAMETERS["icache_bytes"][0] // PARAMETERS["icache_line_bytes"][0] \
    // PARAMETERS["icache_ways"][0]                         # 16
EXIT = 4            # host_int, thrend and its two delay slots


def _run(program, num_qpus=1, **overrides):
    """(RunResult, the machine's instruction caches) of one launch on pi_zero, whose line fill
    (17 clocks of bus time) is shorter than every latency, so an idle bus never delays a line."""
    with EmulatorDevice(board="pi_zero") as dev:
        if overrides:
            dev.machine.timing = Timing("pi_zero", **overrides)
        result = dev.execute(program.assemble(), num_qpus)
        return result, dev.machine.icache, dev.machine.bus


def _straight(n):
    @kernel
    def program(a):
        for _ in range(n):
            a.nop()
        a.exit()
    return program


def test_layout_of_the_test_programs():
    """The counts below assume these instruction counts (the code starts on a 4 KB page)."""
    assert len(_straight(10).assemble().words) == 10 + EXIT
    assert len(_loop(3, 16, pad=0).assemble().words) == 1 + 16 + EXIT
    assert len(_loop(3, 600, pad=LINE - 1).assemble().words) == LINE + 600 + EXIT


@pytest.mark.parametrize("n", [10, 96, 4 * LINE - EXIT])
def test_straight_line_code_misses_once_per_line(n):
    """Every line of straight-line code is a new line for the slice and the L2: it stalls the
    QPU icache_miss_latency (80 clocks) on top of the 4 clocks an instruction issues."""
    instructions = n + EXIT
    lines = -(-instructions // LINE)
    result, icache, bus = _run(_straight(n))
    q = result.qpus[0]
    assert q.instructions == instructions
    assert q.stalls["icache"] == lines * MISS
    assert result.cycles == instructions * ISSUE + lines * MISS
    assert (icache.misses, icache.hits, bus.l2_misses) == (lines, 0, lines)


def _loop(iterations, body, pad):
    """``pad`` + 1 instructions, a loop of ``body`` instructions run ``iterations`` times, exit."""
    @kernel
    def program(a):
        a.ldi(r2, iterations)
        for _ in range(pad):
            a.nop()
        a.label("loop")
        a.sub(r2, r2, 1, sf=True)
        for _ in range(body - 5):
            a.nop()
        a.branch("loop", cond="any_zc")
        a.nop()
        a.nop()
        a.nop()
        a.exit()
    return program


def test_a_loop_that_fits_misses_only_in_its_first_iteration():
    """ldi at 0, the 16-instruction loop at 1..16, exit at 17..20: lines 0, 1, 2, each fetched
    once. Later iterations enter lines 0 (from the branch), 1 and 2 again: hits, no stall."""
    iterations = 10
    result, icache, _ = _run(_loop(iterations, 16, pad=0))
    instructions = 1 + 16 * iterations + EXIT
    assert result.qpus[0].instructions == instructions
    assert result.cycles == instructions * ISSUE + 3 * MISS
    assert icache.misses == 3
    # the first pass enters lines 0, 1, 2 (misses); each later one enters 0, 1, 2 again
    assert icache.hits == 3 * (iterations - 1)


def test_a_600_instruction_loop_thrashes_eleven_sets():
    """A loop of 600 instructions (75 lines) aligned on a line (ldi + 7 nops fill line 0; the
    loop is lines 1..75, the exit line 76) in 16 sets of 4 ways: sets 1..11 hold 5 of its
    lines (s, s+16, .., s+64), sets 0 and 12..15 hold 4. Cycling 5 lines through 4 LRU ways
    misses every time, 4 lines stay. So after the first pass (lines 0..75 and then 76 miss:
    77 misses from RAM) every pass misses 55 lines, served by the L2 (32 KB holds them all)."""
    iterations = 3
    result, icache, bus = _run(_loop(iterations, 600, pad=LINE - 1))
    first, later = 77, 11 * 5
    assert icache.misses == first + later * (iterations - 1)
    assert bus.l2_misses == first
    instructions = LINE + 600 * iterations + EXIT
    assert result.qpus[0].instructions == instructions
    stall = first * MISS + later * (iterations - 1) * L2_HIT
    assert result.qpus[0].stalls["icache"] == stall
    assert result.cycles == instructions * ISSUE + stall


def test_a_512_instruction_loop_fits():
    """A loop of 512 instructions on lines 1..64 puts 4 lines in every set: after the first
    pass (where line 64 evicts line 0, the fifth line of set 0) every line hits."""
    result, icache, bus = _run(_loop(4, 512, pad=LINE - 1))
    assert icache.misses == 1 + 64 + 1        # line 0, the loop, the exit line 65
    assert result.qpus[0].stalls["icache"] == 66 * MISS


def test_qpus_of_one_slice_share_a_fill_and_other_slices_go_to_the_l2():
    """5 QPUs start together on the same 3 lines: QPUs 0..3 share slice 0's cache (QPU 0
    fetches, the others wait for the same fill), QPU 4 has slice 1's: its misses find the
    lines in the L2. With the L2 hit made slower (100 clocks) than RAM (80), QPU 4 waits 100
    per line, the QPUs of slice 0 80."""
    n = 3 * LINE - EXIT
    result, icache, bus = _run(_straight(n), num_qpus=QPUS_PER_SLICE + 1, l2_hit_latency=100)
    stalls = [q.stalls["icache"] for q in result.qpus]
    assert stalls == [3 * MISS] * QPUS_PER_SLICE + [3 * 100]
    assert icache.misses == 2 * 3 and icache.hits == (QPUS_PER_SLICE - 1) * 3
    assert (bus.l2_misses, bus.l2_hits) == (3, 3)


def test_qpus_of_a_slice_on_different_code_share_only_the_lines_both_run():
    """Two QPUs of one slice run different code: QPU 0 falls through lines 1..3, QPU 1 branches
    over them to lines 4 and 5. Neither finds the other's lines: 3 + 2 misses, plus the shared
    first line (the branch), which QPU 1 waits for with QPU 0."""
    @kernel
    def program(a):
        branch_by_qpu(a)
        for _ in range(2 * LINE + 3):       # lines 1 and 2 (to instruction 23)
            a.nop()
        a.exit()                            # line 3
        for _ in range(LINE - EXIT):
            a.nop()
        a.label("other")                    # line 4
        for _ in range(2 * LINE - EXIT):
            a.nop()
        a.exit()
    assert len(program.assemble().words) == 6 * LINE
    result, icache, _ = _run(program, num_qpus=2)
    q0, q1 = result.qpus
    assert q0.stalls["icache"] == 4 * MISS      # lines 0, 1, 2, 3
    assert q1.stalls["icache"] == 3 * MISS      # lines 0 (QPU 0's fill), 4, 5
    assert icache.misses == 6 and icache.hits == 1


def test_a_next_line_prefetch_when_asked_for():
    """icache_prefetch_lines=1 (not the model's reading): entering a line also fetches the next.
    3 lines of straight code: line 0 misses (80, its prefetched line 1 arrives with it, the
    bus being idle); line 1, entered at 112, is there and asks for line 2, which arrives at
    192: entered at 144, it waits 48 and asks for line 3 (past the code). Demand look-ups:
    1 miss, 2 hits; the L2 fetched 4 lines."""
    result, icache, bus = _run(_straight(3 * LINE - EXIT), icache_prefetch_lines=1)
    assert result.qpus[0].stalls["icache"] == MISS + (MISS - LINE * ISSUE)
    assert (icache.misses, icache.hits, bus.l2_misses) == (1, 2, 4)
