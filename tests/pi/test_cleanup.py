"""GPU memory comes back on SIGINT and SIGTERM, and the previous handlers are put back."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from vc4nn.pi import PiDevice, cleanup

from .fake_os import pi_zero_w

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = textwrap.dedent("""
    import signal, sys, time
    from tests.pi.fake_os import pi_zero_w
    from vc4nn.pi import PiDevice
    if sys.argv[2] == "custom":
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(7))
    dev = PiDevice(pi_zero_w(root=True, journal=sys.argv[1]))
    kept = [dev.alloc(1000), dev.array(list(range(100)))]
    print("ready", flush=True)
    time.sleep(60)
""")


def run_child_and_signal(tmp_path, signum, previous="default"):
    journal = tmp_path / "firmware.log"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(journal), previous], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
        child.send_signal(signum)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    calls = [line.split() for line in journal.read_text().splitlines()]
    return child.returncode, calls


def handles(calls, name, field):
    return sorted(int(c[field], 16) for c in calls if c[0] == name)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_releases_every_allocation_then_acts_as_before(tmp_path, signum):
    returncode, calls = run_child_and_signal(tmp_path, signum)
    allocated = handles(calls, "mem_alloc", -1)
    assert allocated == [1, 2]
    assert handles(calls, "mem_unlock", 1) == allocated == handles(calls, "mem_release", 1)
    assert calls[-1] == ["enable_qpu", "0x0", "->", "0x0"]
    # SIGTERM kills as by default; SIGINT raises KeyboardInterrupt, which ends Python by SIGINT.
    assert returncode == -signum


def test_a_previous_handler_still_runs(tmp_path):
    returncode, calls = run_child_and_signal(tmp_path, signal.SIGTERM, previous="custom")
    assert handles(calls, "mem_release", 1) == [1, 2]
    assert returncode == 7


def test_in_process_sigint_cleans_up_and_restores_the_handler():
    before = signal.getsignal(signal.SIGINT)
    fake = pi_zero_w(root=True)
    dev = PiDevice(fake)
    dev.alloc(64)
    assert signal.getsignal(signal.SIGINT) is not before
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)
    assert fake.live_handles() == [] and fake.open_fds == {} and not fake.qpus_enabled
    assert signal.getsignal(signal.SIGINT) is before
    assert not any(d is dev for d in cleanup.tracked())


def test_handlers_are_restored_when_the_last_device_closes():
    before = signal.getsignal(signal.SIGTERM)
    first, second = PiDevice(pi_zero_w(root=True)), PiDevice(pi_zero_w(root=True))
    first.close()
    assert signal.getsignal(signal.SIGTERM) is not before
    second.close()
    assert signal.getsignal(signal.SIGTERM) is before
