"""PiDevice on the fake Pi: memory, execution, timeouts, cleanup and the clear errors."""

import struct

import numpy as np
import pytest

from vc4nn.device import Device, DeviceError
from vc4nn.errors import Vc4nnError
from vc4nn.pi import (KmsConflictError, MailboxError, NotAPiError, PiDevice, PiOutOfMemory,
                      PiPermissionError, PiTimeout, UnsupportedBoardError, cleanup)
from vc4nn.pi.backend import timeout_to_ms

from .fake_os import (FakeFile, not_a_pi, pi1_model_b, pi2_model_b, pi3_model_b, pi4_model_b,
                      pi_zero_w)

EXECUTE_TIMEOUT = 0x80000000


def assert_all_given_back(fake):
    assert fake.live_handles() == []
    assert fake.open_fds == {}
    assert not fake.qpus_enabled


def test_open_identifies_the_board():
    fake = pi_zero_w(root=True)
    with PiDevice(fake) as dev:
        assert isinstance(dev, Device)
        assert dev.board.name == "Raspberry Pi Zero W" and dev.board.processor == "BCM2835"
        assert dev.clock_hz == 300_000_000
        assert dev.describe() == ("Raspberry Pi Zero W (BCM2835, 512 MB, revision 0x9000c1), "
                                  "firmware 0x6152f0c8, V3D clock 300 MHz, mailbox launches")
        assert fake.qpus_enabled
    assert_all_given_back(fake)


# Alias choice: hello_fft's defaults, L1-non-allocating (0xC) on BCM2835, direct (0x4) on 2836/7.
@pytest.mark.parametrize("make, flags", [(pi1_model_b, 0xC), (pi_zero_w, 0xC),
                                         (pi2_model_b, 0x4), (pi3_model_b, 0x4)])
def test_memory_flags_follow_the_board(make, flags):
    fake = make(root=True)
    with PiDevice(fake) as dev:
        dev.alloc(16)
        assert [c[1][2] for c in fake.calls if c[0] == "mem_alloc"] == [flags]


def test_buffers_are_gpu_memory_at_their_bus_address():
    fake = pi3_model_b(root=True)
    with PiDevice(fake) as dev:
        buf = dev.array(np.arange(1024, dtype=np.float32))
        (bus,) = [c[2][0] for c in fake.calls if c[0] == "mem_lock"]
        assert buf.address == bus and bus >> 30 == 0b11        # direct alias on a Pi 3
        # mapped at the bus address with bits 31:30 cleared, page aligned
        assert fake.mappings == [(bus & 0x3FFFFFFF, 4096)]
        assert fake.read_bus(bus + 8, 8) == struct.pack("<2f", 2.0, 3.0)
        fake.write_bus(bus + 4 * 100, struct.pack("<f", -5.5))
        assert buf[100] == -5.5
        assert buf[10:].address == bus + 40


def test_a_block_that_does_not_start_on_a_page_is_mapped_from_its_page():
    fake = pi_zero_w(root=True)
    with PiDevice(fake) as dev:
        first = dev.alloc(16, np.uint32, align=64)
        second = dev.alloc(4, np.uint32, align=16)
        second[:] = [1, 2, 3, 4]
        assert second.address - first.address == 64
        assert fake.mappings[1] == ((second.address & 0x3FFFFFFF) - 64, 4096)
        assert fake.read_bus(second.address, 16) == struct.pack("<4I", 1, 2, 3, 4)
        assert (first == 0).all()


def pretend_kernel(fake, launch):
    """Each QPU writes (its number, its second uniform) to the address in its first uniform."""
    for qpu, (uniforms, _) in enumerate(launch.programs):
        out, value = struct.unpack("<2I", fake.read_bus(uniforms, 8))
        fake.write_bus(out + 8 * qpu, struct.pack("<2I", qpu, value))
    return 0


def test_execute_runs_the_control_list_and_reports():
    fake = pi_zero_w(root=True, runner=pretend_kernel)
    with PiDevice(fake) as dev:
        out = dev.alloc((3, 2), np.uint32)
        code = np.zeros(2, dtype=np.uint64)
        result = dev.execute(code, num_qpus=3, uniforms=[[out, 10], [out, 11], [out, 12]])
        assert out.tolist() == [[0, 10], [1, 11], [2, 12]]
        assert (result.num_qpus, result.host_interrupts, len(result.qpus)) == (3, 3, 3)
        assert result.estimated is False and result.cycles is None and result.seconds >= 0
        assert (result.board, result.clock_hz) == ("Raspberry Pi Zero W", 300e6)
        # nothing counted, in stats every report shares: they cannot be changed
        assert [(q.instructions, q.cycles, dict(q.stalls)) for q in result.qpus] == \
            [(None, None, {})] * 3
        with pytest.raises(TypeError):
            result.qpus[0].stalls["tmu"] = 1
        with pytest.raises(AttributeError):          # dataclasses.FrozenInstanceError
            result.qpus[0].cycles = 5
        assert fake.live_handles() == [1]          # only `out`: code, uniforms, control freed
        assert fake.launches[0].timeout_ms == 10_000 and fake.launches[0].noflush == 0
    assert_all_given_back(fake)


def test_execute_control_list_launches_as_the_firmware_does():
    fake = pi_zero_w(root=True)
    with PiDevice(fake) as dev:
        code = dev.array(np.zeros(2, np.uint64))
        uniforms = dev.array(np.zeros(1, np.uint32))
        control = dev.array(np.array([uniforms.address, code.address], dtype=np.uint32))
        dev.execute_control_list(1, control.address, timeout=0.25)
        launch = fake.launches[0]
        assert (launch.control, launch.timeout_ms, launch.programs) == \
            (control.address, 250, [(uniforms.address, code.address)])


def test_a_sequence_of_control_lists_is_one_execute_qpu_each_in_order():
    fake = pi_zero_w(root=True, runner=pretend_kernel)
    with PiDevice(fake) as dev:
        out = dev.alloc((2, 2), np.uint32)
        code = dev.array(np.zeros(2, np.uint64))
        lists = []
        for value in (7, 9, 11):               # each launch overwrites QPU 0's row: the last wins
            uniforms = dev.array(np.array([out.address, value], np.uint32))
            lists.append(dev.array(np.array([uniforms.address, code.address], np.uint32)))
        results = dev.execute_control_lists([(1, c.address) for c in lists], timeout=0.5)
        assert [(x.control, x.num_qpus, x.timeout_ms, x.noflush) for x in fake.launches] == \
            [(c.address, 1, 500, 0) for c in lists]
        assert out.tolist() == [[0, 11], [0, 0]]
        assert [(r.num_qpus, r.host_interrupts, r.estimated) for r in results] == \
            [(1, 1, False)] * 3
        dev.execute_control_lists([(1, lists[0].address, 2.0), (1, lists[1].address)],
                                  timeout=0.5)          # a launch's own timeout, then the call's
        assert [x.timeout_ms for x in fake.launches[3:]] == [2000, 500]


def test_a_timeout_is_reported_and_memory_still_released():
    fake = pi_zero_w(root=True, runner=lambda fake, launch: EXECUTE_TIMEOUT)
    with pytest.raises(PiTimeout, match=r"did not all end within 1500 ms.*0x80000000"):
        with PiDevice(fake) as dev:
            kept = dev.alloc(64)
            try:
                dev.execute(np.zeros(2, np.uint64), timeout=1.5)
            finally:
                # the launch's own memory is back; the QPUs were switched off and on again
                assert fake.live_handles() == [kept.allocation.handle.handle]
                assert [c[1] for c in fake.calls if c[0] == "enable_qpu"][-2:] == [(0,), (1,)]
    assert_all_given_back(fake)


def test_an_exception_releases_everything():
    fake = pi_zero_w(root=True)
    with pytest.raises(ZeroDivisionError):
        with PiDevice(fake) as dev:
            dev.alloc(1000)
            dev.array(np.ones((8, 8), np.float32))
            1 / 0
    assert_all_given_back(fake)
    assert [c[0] for c in fake.calls].count("mem_release") == 2


def test_close_is_idempotent_and_untracks():
    fake = pi_zero_w(root=True)
    dev = PiDevice(fake)
    assert any(d is dev for d in cleanup.tracked())
    dev.alloc(10)
    dev.close()
    dev.close()
    assert not any(d is dev for d in cleanup.tracked())
    assert_all_given_back(fake)
    with pytest.raises(DeviceError, match="closed"):
        dev.alloc(10)


def test_atexit_handler_closes_forgotten_devices():
    fake = pi_zero_w(root=True)
    PiDevice(fake).alloc(100)                    # never closed by the caller
    cleanup.close_all()
    assert_all_given_back(fake)


def test_out_of_gpu_memory_says_to_raise_gpu_mem():
    fake = pi_zero_w(root=True, heap_bytes=64 * 1024)
    with PiDevice(fake) as dev:
        dev.alloc(16 * 1024, np.uint8)
        with pytest.raises(PiOutOfMemory) as info:
            dev.alloc(1 << 20, np.uint8)
        assert "no 1048576 bytes of GPU memory left (16384 bytes held" in str(info.value)
        assert info.value.fix.startswith("give the GPU more memory: put 'gpu_mem=128' in /boot/config.txt")
    assert_all_given_back(fake)


def test_not_a_pi():
    with pytest.raises(NotAPiError, match="no /dev/vcio: this machine is not a Raspberry Pi") as info:
        PiDevice(not_a_pi())
    assert "emulator" in info.value.fix


def test_a_pi_4_is_not_supported():
    fake = pi4_model_b(root=True)
    with pytest.raises(UnsupportedBoardError, match="Raspberry Pi 4 Model B .*BCM2711.* no VideoCore IV"):
        PiDevice(fake)
    assert fake.open_fds == {} and fake.live_handles() == []


@pytest.mark.parametrize("overlay", ["vc4-kms-v3d", "vc4-fkms-v3d"])
def test_kms_driver_holding_the_v3d(overlay):
    fake = pi3_model_b(root=True, kms=overlay)
    with pytest.raises(KmsConflictError, match="KMS/fKMS GL driver owns the V3D") as info:
        PiDevice(fake)
    assert info.value.fix == (f"edit /boot/config.txt: comment out line 3 'dtoverlay={overlay}' -> "
                              f"'#dtoverlay={overlay}'; then reboot (sudo reboot)")
    assert "the vc4 kernel module is loaded" in str(info.value)
    assert fake.open_fds == {}


def test_firmware_refusing_qpu_calls_is_a_typed_error():
    fake = pi3_model_b(root=True)
    fake.kms = "vc4-kms-v3d"                     # refuses QPU tags, though nothing shows it
    with pytest.raises(MailboxError, match="enable_qpu: /dev/vcio refused"):
        PiDevice(fake)
    assert fake.open_fds == {}


def test_vcio_permission_denied_names_the_group():
    fake = pi_zero_w(groups=("pi",))
    with pytest.raises(PiPermissionError) as info:
        PiDevice(fake)
    assert "permission denied opening /dev/vcio (crw-rw---- root:video) as pi" in str(info.value)
    assert info.value.fix == ("add pi to group 'video': sudo usermod -aG video pi; "
                              "then log out and back in")


def test_dev_mem_needs_root():
    fake = pi_zero_w()                            # in group video, not root
    with pytest.raises(PiPermissionError, match=r"/dev/mem \(crw-r----- root:kmem\) as pi") as info:
        PiDevice(fake)
    assert info.value.fix.startswith("run as root (sudo)")
    assert fake.open_fds == {} and fake.live_handles() == []


def test_every_error_is_a_vc4nn_error():
    for error in (NotAPiError, UnsupportedBoardError, KmsConflictError, PiPermissionError,
                  PiOutOfMemory, PiTimeout):
        assert issubclass(error, Vc4nnError) and issubclass(error, DeviceError)
    assert issubclass(MailboxError, Vc4nnError)


def test_config_under_boot_firmware_is_the_one_named():
    fake = pi3_model_b(root=True, kms="vc4-kms-v3d", config_path="/boot/firmware/config.txt")
    with pytest.raises(KmsConflictError) as info:
        PiDevice(fake)
    assert info.value.fix.startswith("edit /boot/firmware/config.txt: comment out line 3")


def test_kms_lines_for_other_boards_or_commented_out_do_not_count():
    fake = pi3_model_b(root=True, config="#dtoverlay=vc4-kms-v3d\n[pi4]\ndtoverlay=vc4-kms-v3d\n[all]\n")
    with PiDevice(fake):
        pass
    fake.files["/boot/config.txt"] = FakeFile("[all]\ndtoverlay=vc4-fkms-v3d,cma-256\n")
    with pytest.raises(KmsConflictError, match="line 2: dtoverlay=vc4-fkms-v3d,cma-256"):
        PiDevice(fake)


@pytest.mark.parametrize("seconds, ms", [(10, 10_000), (0.0001, 1), (1.0005, 1001), (4294967.295, 0xFFFFFFFF)])
def test_timeout_in_whole_milliseconds(seconds, ms):
    assert timeout_to_ms(seconds) == ms


@pytest.mark.parametrize("seconds", [0, -1, float("nan"), float("inf"), 4294967.296])
def test_impossible_timeouts_are_refused(seconds):
    with pytest.raises(DeviceError, match="timeout"):
        timeout_to_ms(seconds)


def test_free_detaches_the_arm_mapping_before_giving_the_block_back():
    fake = pi_zero_w(root=True)
    with PiDevice(fake) as dev:
        buf = dev.alloc(16, np.uint32)
        handle = next(h for name, _, results in fake.calls if name == "mem_alloc" for h in results)
        dev.free(buf)
        names = [(name, args) for name, args, _ in fake.calls]
        detach = names.index(("detach_mapping", ((buf.address & 0x3FFFFFFF) // 4096 * 4096, 4096)))
        assert detach < names.index(("mem_unlock", (handle,))) < names.index(("mem_release", (handle,)))
