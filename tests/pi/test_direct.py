"""The direct launch path (V3D registers) on the fake Pi, against register sequences written here
from the VideoCore IV 3D Architecture Reference Guide (section 10) and GPU_FFT's direct launch.

Offsets from the V3D base (peripheral base + 0xC00000): L2CACTL 0x020, SLCACTL 0x024, SRQPC
0x430, SRQUA 0x434, SRQUL 0x438, SRQCS 0x43C, DBCFG 0xE00, DBQITE 0xE2C, DBQITC 0xE30. The
fake names them itself (fake_os.V3D_REGISTERS); the expected values below are hand-derived:
L2CACTL bit 2 (L2CCLR) = 0x4; SLCACTL 4 clear bits per cache and slice at 3:0, 11:8, 19:16,
27:24 = 0x0F0F0F0F; SRQCS write-1-to-clear bits 7 (error), 8 (made), 16 (completed) = 0x10180;
SRQUL's 12-bit field at its largest = 0xFFF; DBQITC one bit per QPU = 0xFFFF.
"""

import struct

import numpy as np
import pytest

import vc4nn
from vc4nn.device import DeviceError
from vc4nn.emulator import EmulatorDevice
from vc4nn.pi import PiDevice, PiPermissionError, PiTimeout
from vc4nn.pi.errors import DirectLaunchError

from . import fake_os
from .fake_os import pi1_model_b, pi3_model_b, pi_zero_w
from .test_backend import assert_all_given_back, pretend_kernel

HANG = 0x80000000
START = [("w", "DBCFG", 0), ("w", "DBQITE", 0), ("w", "DBQITC", 0xFFFF),
         ("w", "L2CACTL", 0x4), ("w", "SLCACTL", 0x0F0F0F0F), ("w", "SRQCS", 0x10180)]


def program_writes(uniforms, code):
    return [("w", "SRQUA", uniforms), ("w", "SRQUL", 0xFFF), ("w", "SRQPC", code)]


def srqcs(queued=0, error=0, made=0, completed=0):
    return ("r", "SRQCS", queued | error << 7 | made << 8 | completed << 16)


def test_a_launch_writes_the_documented_sequence():
    fake = pi_zero_w(root=True, runner=pretend_kernel)
    with PiDevice(fake, launch="direct") as dev:
        assert fake.register_maps == [0x20C00000]           # BCM2835: 0x20000000 + 0xC00000
        assert fake.v3d.accesses == [("r", "IDENT0", 0x02443356), ("r", "DBCFG", 0x1),
                                     ("r", "DBQITE", 0x1)]
        fake.v3d.accesses.clear()
        out = dev.alloc((3, 2), np.uint32)
        code = dev.array(np.zeros(2, np.uint64))
        units = [dev.array(np.array([out.address, 10 + q], np.uint32)) for q in range(3)]
        control = dev.array(np.array([[u.address, code.address] for u in units], np.uint32))
        result = dev.execute_control_list(3, control.address)
        expected = [srqcs()] + START
        for u in units:
            expected += program_writes(u.address, code.address)
        expected += [srqcs(made=3, completed=3), ("w", "DBQITC", 0xFFFF)]
        assert fake.v3d.accesses == expected
        assert out.tolist() == [[0, 10], [1, 11], [2, 12]]       # the programs ran
        assert [c[0] for c in fake.calls].count("execute_qpu") == 0
        assert result.estimated is False and result.num_qpus == 3 and result.seconds >= 0
        fake.v3d.accesses.clear()
    # closing gives the firmware its interrupt settings back before the V3D is switched off
    assert fake.v3d.accesses == [("w", "DBCFG", 0x1), ("w", "DBQITE", 0x1)]
    assert fake.v3d.closed
    assert_all_given_back(fake)


def test_a_sequence_repeats_the_documented_sequence_per_launch():
    fake = pi_zero_w(root=True, runner=pretend_kernel)
    with PiDevice(fake, launch="direct") as dev:
        out = dev.alloc((2, 2), np.uint32)
        code = dev.array(np.zeros(2, np.uint64))
        launches, expected, before = [], [], 0
        for count in (2, 1):
            units = [dev.array(np.array([out.address, 20 * count + q], np.uint32))
                     for q in range(count)]
            control = dev.array(np.array([[u.address, code.address] for u in units], np.uint32))
            launches.append((count, control.address))
            # the counts of the launch before stay until SRQCS is reset
            expected += [srqcs(made=before, completed=before)] + START
            for u in units:
                expected += program_writes(u.address, code.address)
            expected += [srqcs(made=count, completed=count), ("w", "DBQITC", 0xFFFF)]
            before = count
        fake.v3d.accesses.clear()
        results = dev.execute_control_lists(launches)
        assert fake.v3d.accesses == expected
        assert out.tolist() == [[0, 20], [1, 41]]      # QPU 0 of the second launch last
        assert [r.num_qpus for r in results] == [2, 1]
    assert_all_given_back(fake)


@pytest.mark.parametrize("make, base", [(pi1_model_b, 0x20C00000), (pi3_model_b, 0x3FC00000)])
def test_the_v3d_is_found_from_the_device_tree_or_the_board(make, base):
    for ranges in (True, False):
        fake = make(root=True, device_tree_ranges=ranges)
        with PiDevice(fake, launch="direct"):
            assert fake.register_maps == [base]


def test_polls_until_every_program_has_completed():
    fake = pi_zero_w(root=True)
    fake.v3d.free_qpus = 2                      # 5 programs: 2, 2 and 1 at a time
    with PiDevice(fake, launch="direct") as dev:
        fake.v3d.accesses.clear()
        dev.execute(np.zeros(2, np.uint64), num_qpus=5)
        polls = [a for a in fake.v3d.accesses if a[:2] == ("r", "SRQCS")][1:]
        assert polls == [srqcs(queued=3, made=5, completed=2), srqcs(queued=1, made=5, completed=4),
                         srqcs(made=5, completed=5)]
        assert [launch.num_qpus for launch in fake.launches] == [2, 2, 1]


def test_execute_runs_the_same_kernels_as_the_mailbox():
    results = {}
    for launch in ("mailbox", "direct"):
        fake = pi3_model_b(root=True, runner=pretend_kernel)
        with PiDevice(fake, launch=launch) as dev:
            out = dev.alloc((4, 2), np.uint32)
            dev.execute(np.zeros(2, np.uint64), num_qpus=4,
                        uniforms=[[out, 20 + q] for q in range(4)])
            results[launch] = out.tolist()
    assert results["direct"] == results["mailbox"] == [[q, 20 + q] for q in range(4)]


def test_a_hung_launch_times_out_names_the_programs_and_stops_the_qpus():
    fake = pi_zero_w(root=True, runner=lambda fake, launch: HANG)
    fake.v3d.free_qpus = 3
    with PiDevice(fake, launch="direct") as dev:
        kept = dev.alloc(64)
        with pytest.raises(PiTimeout) as info:
            dev.execute(np.zeros(2, np.uint64), num_qpus=5, timeout=0.002)
        message = str(info.value)
        assert "5 QPU program(s) launched directly from control list 0x" in message
        assert ("did not all end within 2 ms: 0 ended, 3 of programs 0-2 still running "
                "(the V3D counts completions, not which program completed), programs 3-4 "
                "never started (still queued) (SRQCS = 0x00000502)") in message
        # the QPUs were switched off and on (stopping the programs), then the counts cleared
        assert [c[1] for c in fake.calls if c[0] == "enable_qpu"][-2:] == [(0,), (1,)]
        assert fake.v3d.accesses[-2:] == [("w", "SRQCS", 0x10180), ("w", "DBQITC", 0xFFFF)]
        assert fake.live_handles() == [kept.allocation.handle.handle]
        # and the device still launches
        fake.runner = None
        dev.execute(np.zeros(2, np.uint64), num_qpus=2)
    assert_all_given_back(fake)


def test_the_wait_yields_the_cpu_after_a_millisecond():
    fake = pi_zero_w(root=True, runner=lambda fake, launch: HANG)
    with PiDevice(fake, launch="direct") as dev:
        with pytest.raises(PiTimeout):
            dev.execute(np.zeros(2, np.uint64), timeout=0.005)
    # one reading of the fake clock per poll, 0.1 ms apart: ~10 polls spin, the rest yield
    assert 35 <= fake.yields <= 45


def test_a_launch_in_a_sequence_waits_for_its_own_timeout():
    fake = pi_zero_w(root=True, runner=lambda fake, launch: HANG)
    with PiDevice(fake, launch="direct") as dev:
        code, uniforms = dev.array(np.zeros(2, np.uint64)), dev.alloc(1, np.uint32)
        control = dev.array(np.array([uniforms.address, code.address], np.uint32))
        with pytest.raises(PiTimeout, match="within 5 ms"):
            dev.execute_control_lists([(1, control.address, 0.005)], timeout=0.5)
    assert 35 <= fake.yields <= 45          # 5 ms of polls, as the call's timeout would give


def test_an_interrupted_wait_stops_the_programs_before_memory_is_released():
    def interrupt(fake, launch):
        raise KeyboardInterrupt
    fake = pi_zero_w(root=True, runner=interrupt)
    with pytest.raises(KeyboardInterrupt):
        with PiDevice(fake, launch="direct") as dev:
            dev.execute(np.zeros(2, np.uint64))
    names = [c[0] for c in fake.calls]
    first_release = names.index("mem_release")
    assert [c[1] for c in fake.calls[:first_release] if c[0] == "enable_qpu"][-2:] == [(0,), (1,)]
    assert_all_given_back(fake)


def test_closing_during_a_launch_stops_it_first():
    """The SIGINT handler (vc4nn.pi.cleanup) closes the device from inside the poll loop."""
    fake = pi_zero_w(root=True)
    dev = PiDevice(fake, launch="direct")
    dev.alloc(16)
    dev._direct.in_flight = True
    dev.close()
    names = [(c[0], c[1]) for c in fake.calls]
    assert names.index(("enable_qpu", (0,))) < names.index(("mem_release", (1,)))
    assert_all_given_back(fake)


def test_a_busy_v3d_is_refused():
    fake = pi_zero_w(root=True)
    with PiDevice(fake, launch="direct") as dev:
        fake.v3d.free_qpus = 0
        fake.v3d.queue.append((0, 0))             # someone else's request, waiting for a QPU
        with pytest.raises(DirectLaunchError, match=r"someone else's QPU programs \(1 request"):
            dev.execute(np.zeros(2, np.uint64))
        assert fake.launches == []


def test_a_queue_overflow_is_an_error(monkeypatch):
    # 12 programs fit the V3D's queue; a fake with a 4-deep queue shows how an overflow reads
    monkeypatch.setattr(fake_os, "REQUEST_QUEUE_DEPTH", 4)
    fake = pi_zero_w(root=True)
    fake.v3d.free_qpus = 0
    with PiDevice(fake, launch="direct") as dev:
        with pytest.raises(DirectLaunchError, match=r"queue overflowed queueing 6 program\(s\) "
                                                    r"from control list 0x.* \(SRQCS = 0x00000684\)"):
            dev.execute(np.zeros(2, np.uint64), num_qpus=6)


def test_the_control_list_must_be_in_device_memory():
    fake = pi_zero_w(root=True)
    with PiDevice(fake, launch="direct") as dev:
        with pytest.raises(DeviceError, match="control list 0x00001000 .* not in this device's memory"):
            dev.execute_control_list(1, 0x1000)


def test_a_control_list_rewritten_in_place_launches_what_it_holds_now():
    """The register writes are kept by the list's content, never by its address alone."""
    fake = pi_zero_w(root=True, runner=pretend_kernel)
    with PiDevice(fake, launch="direct") as dev:
        out = dev.alloc((1, 2), np.uint32)
        code = dev.array(np.zeros(2, np.uint64))
        units = [dev.array(np.array([out.address, value], np.uint32)) for value in (5, 6)]
        control = dev.alloc(2, np.uint32)
        for unit in units + units[:1]:
            control[:] = [unit.address, code.address]
            fake.v3d.accesses.clear()
            dev.execute_control_lists([(1, control.address)])
            assert ("w", "SRQUA", unit.address) in fake.v3d.accesses
            assert out.tolist() == [[0, int(unit[1])]]


def test_control_lists_are_found_in_any_block_and_must_fit_in_theirs():
    fake = pi_zero_w(root=True, runner=pretend_kernel)
    with PiDevice(fake, launch="direct") as dev:
        out = dev.alloc((1, 2), np.uint32)
        code = dev.array(np.zeros(2, np.uint64))
        blocks = [dev.alloc(2, np.uint32) for _ in range(5)]      # in allocation order
        for value, block in enumerate(reversed(blocks)):
            unif = dev.array(np.array([out.address, value], np.uint32))
            block[:] = [unif.address, code.address]
            dev.execute_control_list(1, block.address)
            assert out.tolist() == [[0, value]]
        freed = blocks.pop(2)
        address = freed.address
        dev.free(freed)                                             # freed: no longer found
        with pytest.raises(DeviceError, match="not in this device's memory"):
            dev.execute_control_list(1, address)
        last = blocks[-1].allocation
        with pytest.raises(DeviceError, match="not in this device's memory"):   # 8 bytes past
            dev.execute_control_list(1, last.bus_address + last.size - 4)


def test_dev_mem_unavailable_is_a_typed_error():
    fake = pi_zero_w()                                # not root
    with pytest.raises(PiPermissionError, match="/dev/mem") as info:
        PiDevice(fake, launch="direct")
    assert info.value.fix.startswith("run as root (sudo)")
    assert fake.open_fds == {}


def test_registers_that_cannot_be_mapped_are_a_typed_error():
    fake = pi_zero_w(root=True)

    def refuse(fd, physical, length):
        raise PermissionError(1, "Operation not permitted")
    fake.map_registers = refuse
    with pytest.raises(DirectLaunchError, match="cannot map the V3D registers at 0x20c00000 "
                                                "through /dev/mem: Operation not permitted") as info:
        PiDevice(fake, launch="direct")
    assert "iomem=relaxed" in info.value.fix and "launch='mailbox'" in info.value.fix
    assert_all_given_back(fake)


def test_not_a_v3d_is_a_typed_error():
    fake = pi_zero_w(root=True)
    fake.v3d.read = lambda offset: 0xDEADBEEF
    with pytest.raises(DirectLaunchError, match="not a VideoCore IV V3D .*IDENT0 = 0xdeadbeef"):
        PiDevice(fake, launch="direct")
    assert_all_given_back(fake)


def test_unknown_launch_paths_are_refused_by_both_backends():
    with pytest.raises(DeviceError, match=r"launch path \(launch=\) must be one of 'mailbox', "
                                          r"'direct', got 'fast'"):
        PiDevice(pi_zero_w(root=True), launch="fast")
    with pytest.raises(DeviceError, match="launch path"):
        EmulatorDevice(launch="fast")


def test_open_device_passes_the_launch_path():
    with vc4nn.open_device("emulator", launch="direct") as dev:
        assert dev.launch_path == "direct" and dev.timing.launch_overhead == 5e-6
    with vc4nn.open_device("emulator") as dev:
        assert dev.launch_path == "mailbox" and dev.timing.launch_overhead == 100e-6


def test_the_emulator_charges_the_launch_path_overhead():
    from asm import kernel

    @kernel
    def empty(a):
        a.exit()
    seconds = {}
    for launch in ("mailbox", "direct"):
        with EmulatorDevice(launch=launch) as dev:
            run = dev.execute(empty.assemble())
            seconds[launch] = run.seconds - run.cycles / run.clock_hz
    assert seconds == pytest.approx({"mailbox": 100e-6, "direct": 5e-6})


def test_the_runner_sees_the_uniforms_of_each_program():
    fake = pi_zero_w(root=True)
    seen = []
    fake.runner = lambda fake, launch: seen.append(
        [struct.unpack("<I", fake.read_bus(u, 4))[0] for u, _ in launch.programs]) or 0
    with PiDevice(fake, launch="direct") as dev:
        dev.execute(np.zeros(2, np.uint64), num_qpus=3, uniforms=[[7], [8], [9]])
    assert seen == [[7, 8, 9]]


def test_a_single_hung_program_is_named():
    fake = pi_zero_w(root=True, runner=lambda fake, launch: HANG)
    with PiDevice(fake, launch="direct") as dev:
        with pytest.raises(PiTimeout, match=r"within 1 ms: 0 ended, 1 of program 0 still running "
                                            r"\(the V3D counts completions, not which program "
                                            r"completed\) \(SRQCS = 0x00000100\)"):
            dev.execute(np.zeros(2, np.uint64), timeout=0.001)
