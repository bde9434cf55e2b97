"""Each diagnosis of ``vc4nn doctor`` on the fake Pi, with its exact fix."""

import io

import pytest

from vc4nn.pi import PiDevice, PiError
from vc4nn.pi.doctor import diagnose, doctor_main

from .fake_os import FakeFile, not_a_pi, pi3_model_b, pi4_model_b, pi_zero_w


def report(fake):
    out = io.StringIO()
    code = doctor_main([], os_boundary=fake, out=out)
    return code, out.getvalue()


def problems(fake):
    return {f.topic: f for f in diagnose(fake) if f.problem}


def test_a_ready_pi():
    code, text = report(pi_zero_w(root=True))
    assert code == 0
    assert "PROBLEM" not in text
    for expected in ("board      Raspberry Pi Zero W (BCM2835, 512 MB, revision 0x9000c1)",
                     "firmware   2021-09-28 (revision 0x6152f0c8)",
                     "V3D clock  300 MHz",
                     "gpu_mem    128 MiB",
                     "/dev/vcio  crw-rw---- root:video: root can open it read/write",
                     "GL driver  no KMS/fKMS overlay",
                     "No problems found"):
        assert expected in text


def test_not_a_pi():
    code, text = report(not_a_pi())
    assert code == 1
    assert "PROBLEM board      not a Raspberry Pi (no device-tree model): no /dev/vcio" in text
    assert "fix: run on a Raspberry Pi Zero, 1, 2 or 3; or use the emulator instead" in text


def test_a_pi_4():
    found = problems(pi4_model_b(root=True))
    assert set(found) == {"board"}
    assert "Raspberry Pi 4 Model B (BCM2711, 4096 MB, revision 0xc03111): no VideoCore IV" in found["board"].text


@pytest.mark.parametrize("overlay", ["vc4-kms-v3d", "vc4-fkms-v3d"])
def test_kms_overlay(overlay):
    found = problems(pi3_model_b(root=True, kms=overlay))
    assert set(found) == {"GL driver"}
    assert f"/boot/config.txt line 3: dtoverlay={overlay}" in found["GL driver"].text
    assert found["GL driver"].fix == (f"edit /boot/config.txt: comment out line 3 'dtoverlay={overlay}' "
                                      f"-> '#dtoverlay={overlay}'; then reboot (sudo reboot)")


def test_kms_module_without_a_config_line():
    fake = pi3_model_b(root=True)
    fake.files["/proc/modules"] = FakeFile("vc4 229376 5 - Live 0x00000000\n")
    found = problems(fake)
    assert "the vc4 kernel module is loaded (/proc/modules)" in found["GL driver"].text
    assert found["GL driver"].fix.startswith("remove every 'dtoverlay=vc4-kms-v3d' / "
                                             "'dtoverlay=vc4-fkms-v3d' from /boot/config.txt")


def test_v3d_given_to_linux_by_the_device_tree():
    fake = pi3_model_b(root=True)
    fake.files["/proc/device-tree/soc/v3d@7ec00000/status"] = FakeFile("okay\0")
    assert "device tree gives the V3D to Linux" in problems(fake)["GL driver"].text


def test_vcio_permission():
    fake = pi_zero_w(groups=("pi",))
    code, text = report(fake)
    found = problems(fake)
    assert code == 1 and {"/dev/vcio", "/dev/mem"} <= set(found)
    assert found["/dev/vcio"].text == "crw-rw---- root:video: pi cannot open it read/write"
    assert found["/dev/vcio"].fix == "add pi to group 'video': sudo usermod -aG video pi; then log out and back in"
    # without the mailbox, the board comes from /proc/cpuinfo and gpu_mem from config.txt
    assert "Raspberry Pi Zero W (BCM2835, 512 MB, revision 0x9000c1)" in text
    assert "firmware   unknown (needs the mailbox)" in text
    assert "gpu_mem    /boot/config.txt: not set" in text


def test_dev_mem_needs_root():
    found = problems(pi_zero_w())
    assert set(found) == {"/dev/mem"}
    assert found["/dev/mem"].fix.startswith("run as root (sudo)")


def test_too_little_gpu_mem():
    found = problems(pi_zero_w(root=True, gpu_mem_mb=32))
    assert set(found) == {"gpu_mem"}
    assert found["gpu_mem"].text == "32 MiB: too little for QPU buffers (at least 64 MiB)"
    assert found["gpu_mem"].fix == ("give the GPU more memory: put 'gpu_mem=128' in /boot/config.txt "
                                    "(under [all]), then reboot (sudo reboot)")


def test_gpu_mem_lines_from_bookworm_config():
    fake = pi3_model_b(groups=("pi",), config_path="/boot/firmware/config.txt", config="gpu_mem=96\n")
    code, text = report(fake)
    assert "gpu_mem    /boot/firmware/config.txt: gpu_mem=96" in text


def test_every_problem_has_a_fix_and_the_report_shows_it():
    fake = pi3_model_b(groups=("pi",), kms="vc4-kms-v3d", gpu_mem_mb=16)
    findings = diagnose(fake)
    assert all(f.fix for f in findings if f.problem)
    code, text = report(fake)
    assert code == 1 and text.count("fix: ") == sum(f.problem for f in findings) == 3
    assert "3 problem(s) found" in text


def test_help():
    with pytest.raises(SystemExit) as info:
        doctor_main(["--help"], os_boundary=pi_zero_w(), out=io.StringIO())
    assert info.value.code == 0


def test_a_firmware_that_does_not_answer():
    fake = pi_zero_w(root=True)

    def refuse(fd, request, buffer):
        raise OSError(22, "Invalid argument")
    fake.ioctl = refuse
    found = problems(fake)
    assert set(found) == {"mailbox"}
    assert found["mailbox"].text == ("mailbox get_board_revision: /dev/vcio refused the request: "
                                     "Invalid argument")
    assert found["mailbox"].fix == "update the firmware and kernel: sudo apt update && sudo apt full-upgrade"


SETUPS = {
    "ready": lambda: pi_zero_w(root=True),
    "pi3 ready": lambda: pi3_model_b(root=True),
    "not a pi": not_a_pi,
    "pi 4": lambda: pi4_model_b(root=True),
    "kms": lambda: pi3_model_b(root=True, kms="vc4-kms-v3d"),
    "no video group": lambda: pi_zero_w(root=False, groups=("pi",)),
    "not root": lambda: pi_zero_w(),
}


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_doctor_is_happy_exactly_when_the_device_opens(setup):
    healthy = doctor_main([], os_boundary=SETUPS[setup](), out=io.StringIO()) == 0
    try:
        PiDevice(SETUPS[setup]()).close()
        opened = True
    except PiError:
        opened = False
    assert healthy == opened


def test_direct_launch_available():
    code, text = report(pi3_model_b(root=True))
    assert code == 0
    assert "ok      direct     launch='direct' is available (V3D registers at 0x3fc00000)" in text


def test_direct_launch_not_available_is_reported_not_a_problem():
    fake = pi_zero_w(root=True)

    def refuse(fd, physical, length):
        raise PermissionError(1, "Operation not permitted")
    fake.map_registers = refuse
    code, text = report(fake)
    assert code == 0
    assert ("ok      direct     launch='direct' is not available: cannot map the V3D registers "
            "at 0x20c00000 through /dev/mem: Operation not permitted; launch='mailbox' (the "
            "default) works") in text
    assert "iomem=relaxed" in text
    assert fake.open_fds == {} and fake.live_handles() == [] and not fake.qpus_enabled


def test_direct_launch_unknown_while_dev_mem_is_closed():
    (finding,) = [f for f in diagnose(pi_zero_w()) if f.topic == "direct"]
    assert (finding.label, finding.text) == ("?", "unknown until the problems above are fixed")
