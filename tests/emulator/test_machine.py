"""The machine: launches, 12 QPUs, scheduling, semaphores and mutex, statistics, device
selection, speed."""


import numpy as np
import pytest

import vc4nn
from asm import kernel, null, qpu_number, r1, r2, r3, ra1, ra31, uniform, vpm
from vc4nn.device import uniform_words
from vc4nn.emulator import EmulatorDevice
from vc4nn.emulator.checks import CheckWarning
from vc4nn.emulator.errors import EmulatorTimeout
from vc4nn.errors import DeviceError, Vc4nnError

from .conftest import assemble_body, branch_by_qpu, run_program


def test_twelve_qpus_each_run_program_i_on_qpu_i(run_body):
    def body(a):
        a.mov(r1, uniform)
        a.mov(r2, qpu_number)
        a.add(r3, r1, r2)
    uniforms = [[100 * q] for q in range(12)]
    out, result = run_body(body, [r3], uniforms=uniforms, num_qpus=12)
    assert out[:, 0, 0].tolist() == [101 * q for q in range(12)]
    assert result.num_qpus == 12 and result.host_interrupts == 12
    assert [q.instructions for q in result.qpus] == [result.qpus[0].instructions] * 12


def test_launch_from_a_control_list_in_memory():
    program = assemble_body(lambda a: a.mov(r1, uniform), [r1], num_qpus=2)
    with EmulatorDevice() as dev:
        code = dev.array(np.frombuffer(program.to_bytes(), dtype=np.uint32))
        out = dev.alloc((2, 1, 16), np.uint32)
        unif = [dev.array(np.frombuffer(uniform_words([out[q].address, 7 + q]), np.uint32))
                for q in range(2)]
        control = dev.array(np.array([[unif[q].address, code.address] for q in range(2)],
                                     dtype=np.uint32))
        result = dev.execute_control_list(2, control.address)
        assert out[:, 0, 0].tolist() == [7, 8]
        assert result.num_qpus == 2


def test_run_statistics_and_board_clock():
    @kernel
    def ten_nops(a):
        for _ in range(10):
            a.nop()
        a.exit()
    program = ten_nops.assemble()
    for board, clock in (("pi_zero", 300e6), ("pi1", 250e6)):
        with EmulatorDevice(board=board) as dev:
            result = dev.execute(program)
        assert result.board == board and result.clock_hz == clock
        # 10 nops + host_int + thrend + 2 delay slots, 4 clocks each (facts §4), in 2 code
        # lines of 8, each fetched from RAM by the instruction cache: 80 clocks each (timing)
        assert result.qpus[0].instructions == 14
        assert result.cycles == result.qpus[0].cycles == 56 + 2 * 80
        assert result.qpus[0].stalls["issue"] == 56
        assert result.qpus[0].stalls["icache"] == 2 * 80
        assert sum(result.qpus[0].stalls.values()) == 56 + 2 * 80
        assert result.seconds == pytest.approx(216 / clock + 100e-6)    # the mailbox path
        assert result.estimated and result.warnings == []


def test_the_launch_path_picks_the_launch_overhead():
    from vc4nn.emulator.timing import Timing
    from vc4nn.errors import DeviceError

    @kernel
    def nothing(a):
        a.exit()
    with EmulatorDevice(board="pi1") as dev:
        dev.machine.timing = Timing("pi1", launch_path="direct")
        result = dev.execute(nothing.assemble())
    # host_int + thrend + 2 delay slots = 16 clocks, their line from RAM 80 (the instruction
    # cache); facts §3 / timing.py: 100 us vs 5 us
    assert result.seconds == pytest.approx((16 + 80) / 250e6 + 5e-6)
    assert Timing("pi1").launch_overhead == 100e-6
    with pytest.raises(DeviceError, match="launch path"):
        Timing("pi1", launch_path="doorbell")


def test_default_board_and_unknown_board():
    with EmulatorDevice() as dev:
        assert dev.timing.name == "pi_zero"
    with pytest.raises(DeviceError, match="unknown board"):
        EmulatorDevice(board="pi5")


def test_stalls_add_up_to_the_cycles(run_body):
    _, result = run_body(lambda a: a.mov(r1, uniform), [r1], uniforms=[3], num_qpus=4)
    for q in result.qpus:
        assert sum(q.stalls.values()) == q.cycles
        assert q.stalls["uniform"] > 0 and q.stalls["icache"] > 0
    # QPU 0's store completes while it waits for its second code line; the others wait on it
    assert all(q.stalls["dma"] > 0 for q in result.qpus[1:])
    assert result.cycles == max(q.cycles for q in result.qpus)


def _delay_loop(a, n):
    a.ldi(r2, n)
    with a.scope():
        a.label("loop")
        a.sub(r2, r2, 1, sf=True)
        a.branch("loop", cond="any_zc")
        a.nop()
        a.nop()
        a.nop()


def test_semaphore_makes_the_consumer_wait_for_the_producer(run_body):
    def body(a):
        branch_by_qpu(a)
        _delay_loop(a, 50)           # QPU 0: work, then signal
        a.sema_release(3)
        a.branch("done")
        a.nop()
        a.nop()
        a.nop()
        a.label("other")
        a.sema_acquire(3)            # QPU 1 waits for it
        a.label("done")
    _, result = run_body(body, [r1], num_qpus=2)
    producer, consumer = result.qpus
    assert consumer.stalls["semaphore"] > 50 * 4 * 4
    assert producer.stalls["semaphore"] == 0


def test_mutex_serialises_the_stores(run_body):
    _, result = run_body(lambda a: a.mov(r1, qpu_number), [r1], num_qpus=12)
    assert sum(q.stalls["mutex"] for q in result.qpus) > 0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_seeded_interleaving_gives_the_same_results(run_body, seed):
    def body(a):
        a.mov(r1, uniform)
        a.add(r2, r1, qpu_number)
    uniforms = [[q * 3] for q in range(6)]
    plain, _ = run_body(body, [r2], uniforms=uniforms, num_qpus=6)
    first, result1 = run_body(body, [r2], uniforms=uniforms, num_qpus=6, seed=seed)
    again, result2 = run_body(body, [r2], uniforms=uniforms, num_qpus=6, seed=seed)
    assert np.array_equal(plain, first) and np.array_equal(first, again)
    assert [q.cycles for q in result1.qpus] == [q.cycles for q in result2.qpus]


def test_seeded_interleaving_changes_the_order_of_a_race(run_body):
    # Every QPU stores its number to the same place without the mutex: which store lands last
    # depends on the interleaving. Without a seed it is always the same QPU.
    @kernel
    def racy(a):
        a.mov(ra31, uniform)
        a.mov(r1, qpu_number)
        a.setup_vpm_write(y=0)
        a.mov(vpm, r1)
        a.setup_dma_store(units=1, depth=16, y=0)
        a.start_dma_store(ra31)
        a.wait_dma_store()
        a.exit()
    program = racy.assemble()
    winners = set()
    for seed in [None] * 3 + list(range(12)):
        out, _ = run_program(program, 1, num_qpus=6, seed=seed, checks="off")
        winners.add(int(out[0, 0, 0]))
    assert len(winners) > 1


def test_warn_mode_records_warnings_in_the_run_result(run_body):
    def body(a):
        a.ldi(ra1, 5)
        a.mov(r1, ra1)               # read right after the write
    with pytest.warns(CheckWarning, match="regfile_read_after_write"):
        out, result = run_body(body, [r1], check=False, checks={"regfile_read_after_write": "warn"})
    assert len(result.warnings) == 1 and "ra1" in result.warnings[0]
    assert out[0, 0, 0] == 5


# --- device selection -----------------------------------------------------------------------

def test_open_device_defaults_to_the_emulator(monkeypatch):
    monkeypatch.delenv("VC4NN_DEVICE", raising=False)
    with vc4nn.open_device() as dev:
        assert isinstance(dev, EmulatorDevice)
    with vc4nn.open_device("emulator", board="pi3") as dev:
        assert dev.timing.name == "pi3"


def test_open_device_reads_the_environment(monkeypatch):
    monkeypatch.setenv("VC4NN_DEVICE", "nonsense")
    with pytest.raises(DeviceError, match="unknown device 'nonsense'"):
        vc4nn.open_device()
    monkeypatch.setenv("VC4NN_DEVICE", "emulator")
    with vc4nn.open_device() as dev:
        assert isinstance(dev, EmulatorDevice)


def test_open_pi_is_a_typed_error_off_a_pi():
    try:
        dev = vc4nn.open_device("pi")
    except Vc4nnError:
        return
    dev.close()             # on a real Pi


# --- speed ----------------------------------------------------------------------------------

def test_alu_loop_runs_to_its_end():
    """The ALU loop tools/bench_emulator.py times (speed is measured there, not here)."""
    def body(a):
        a.mov(r1, uniform)
        a.mov(r2, 1.0)
        a.mov(r3, 0.5)
        a.label("loop")
        a.fadd(r2, r2, r3).fmul(r3, r3, 1.0)
        a.add(ra1, r1, 3).fmul(r3, r2, r2)
        a.fsub(r2, r2, r3).mov(null, r1)
        a.sub(r1, r1, 1, sf=True)
        a.branch("loop", cond="any_zc")
        a.fadd(r2, r2, r3).fmul(r3, r2, r3)
        a.itof(r3, r1)
        a.fmax(r2, r2, r3)
    program = assemble_body(body, [r2])
    _, result = run_program(program, 1, uniforms=[3000])
    assert result.instructions > 24000


@pytest.mark.parametrize("num_qpus", [0, 13, 2.5, "4", True, None])
def test_num_qpus_must_be_a_whole_number_of_qpus(num_qpus):
    from vc4nn.device import DeviceError
    from vc4nn.emulator import EmulatorDevice
    with EmulatorDevice() as device, pytest.raises(DeviceError, match="num_qpus must be an int 1..12"):
        device.execute(np.zeros(2, dtype=np.uint64), num_qpus=num_qpus)


def test_uniform_words_of_ints_match_the_bit_patterns_and_keep_the_range_check():
    """Int streams take a vectorised path: same words as packing each value by hand, and a value
    out of 32 bits is still an error naming it."""
    import struct
    from vc4nn.errors import DeviceError
    values = [0, 1, -1, 2 ** 31 - 1, -2 ** 31, 2 ** 32 - 1, 0xC0001000, 12345]
    expected = b"".join(struct.pack("<I", v & 0xFFFFFFFF) for v in values)
    assert uniform_words(values) == expected == uniform_words(tuple(values))
    assert uniform_words([1, 2.5]) == struct.pack("<I", 1) + struct.pack("<f", 2.5)
    for bad in (2 ** 32, -2 ** 31 - 1, 2 ** 70):
        with pytest.raises(DeviceError, match=f"value 1 of QPU 3 = {bad} does not fit"):
            uniform_words([7, bad], qpu=3)


@kernel
def double_then_add(a):
    """Row 0 of 16 words at the first uniform becomes 2 x + the second uniform."""
    a.mov(ra1, uniform)
    a.mov(r2, uniform)
    a.setup_dma_load(rows=1, rowlen=16, y=0)
    a.start_dma_load(ra1)
    a.wait_dma_load()
    a.setup_vpm_read(num=1, y=0)
    a.setup_vpm_write(y=0)
    a.mov(r1, vpm)
    a.add(r1, r1, r1)
    a.add(vpm, r1, r2)
    a.setup_dma_store(units=1, depth=16, y=0)
    a.start_dma_store(ra1)
    a.wait_dma_store()
    a.exit()


def _control_lists(dev, data, addends):
    """One control list per addend, each launching double_then_add on ``data`` on one QPU."""
    code = dev.array(np.frombuffer(double_then_add.assemble().to_bytes(), np.uint32))
    lists = []
    for value in addends:
        unif = dev.array(np.array([data.address, value], np.uint32))
        lists.append(dev.array(np.array([unif.address, code.address], np.uint32)))
    return lists


def test_a_sequence_of_control_lists_launches_each_in_order():
    with EmulatorDevice() as dev:
        data = dev.alloc(16, np.uint32)
        lists = _control_lists(dev, data, [1, 3, 5])
        results = dev.execute_control_lists([(1, c.address) for c in lists])
        assert data.tolist() == [((1 * 2 + 3) * 2 + 5)] * 16       # 15: in this order only
        one = dev.execute_control_list(1, lists[0].address)
        assert len(results) == 3 and all(r.launches == 1 for r in results)
        assert [r.cycles for r in results] == [one.cycles] * 3
        assert results[0].qpus[0].instructions == one.qpus[0].instructions
        assert dev.execute_control_lists([]) == []


def test_a_launch_given_with_a_timeout_keeps_its_own():
    """(num_qpus, control_address, timeout): that launch's timeout (modelled time), not the
    call's; a session launches layers with different timeouts in one call."""
    with EmulatorDevice() as dev:
        data = dev.alloc(16, np.uint32)
        first, second, third = (c.address for c in _control_lists(dev, data, [1, 3, 5]))
        with pytest.raises(EmulatorTimeout, match="timeout of 1e-09 s"):
            dev.execute_control_lists([(1, first, 60.0), (1, second, 1e-9), (1, third)],
                                      timeout=None)
        assert data.tolist() == [1] * 16                # the first ran, the third did not
        results = dev.execute_control_lists([(1, first, 60.0), (1, second, None)], timeout=1e-9)
        assert len(results) == 2 and data.tolist() == [(1 * 2 + 1) * 2 + 3] * 16


def test_a_sequence_is_checked_before_its_first_launch():
    with EmulatorDevice() as dev:
        data = dev.alloc(16, np.uint32)
        good = (1, _control_lists(dev, data, [1])[0].address)
        for bad, named in (((13, good[1]), "num_qpus"), ((1, "x"), "control_address"),
                           ((1,), "launch 1"), (5, "launch 1"), ((1, 2, 3, 4), "launch 1"),
                           ((1, good[1], -1.0), "launch 1: timeout"),
                           ((1, good[1], "1"), "launch 1: timeout")):
            with pytest.raises(DeviceError, match=named):
                dev.execute_control_lists([good, bad])
            assert data.tolist() == [0] * 16                       # the first did not run
        for launches in (5, None):
            with pytest.raises(DeviceError, match="launches"):
                dev.execute_control_lists(launches)
        with pytest.raises(DeviceError, match="timeout"):
            dev.execute_control_lists([good], timeout=-1)
