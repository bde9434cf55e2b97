"""On a real Pi only (``pytest --device=pi``; skipped elsewhere): the first checks to run there."""

import numpy as np
import pytest

from asm import kernel
from vc4nn.pi import PiDevice, PiTimeout

pytestmark = pytest.mark.pi


@kernel
def finish(a):
    a.exit()


@kernel
def spin_forever(a):
    a.label("loop")
    a.branch("loop")
    a.nop()
    a.nop()
    a.nop()


@pytest.fixture
def pi(device):
    if not isinstance(device, PiDevice):
        pytest.skip("needs --device=pi")
    return device


def test_gpu_memory_round_trip(pi):
    buf = pi.array(np.arange(4096, dtype=np.uint32))
    assert (buf == np.arange(4096)).all()
    buf[::2] = 7
    assert (np.array(buf)[::2] == 7).all() and buf.address % 4096 == 0


@pytest.mark.parametrize("num_qpus", [1, 12])
def test_every_qpu_ends(pi, num_qpus):
    result = pi.execute(finish.assemble(), num_qpus=num_qpus, timeout=1.0)
    assert result.host_interrupts == num_qpus and not result.estimated


def test_a_hung_program_times_out_and_the_device_recovers(pi):
    held = len(pi._allocations)
    with pytest.raises(PiTimeout):
        pi.execute(spin_forever.assemble(), num_qpus=1, timeout=0.2)
    assert len(pi._allocations) == held
    assert pi.execute(finish.assemble(), timeout=1.0).host_interrupts == 1


@pytest.fixture
def direct_pi(pi):
    """A second device on the same Pi, launching by the V3D's registers (needs root)."""
    with PiDevice(launch="direct") as device:
        yield device


@pytest.mark.parametrize("num_qpus", [1, 12])
def test_direct_launches_end(direct_pi, num_qpus):
    result = direct_pi.execute(finish.assemble(), num_qpus=num_qpus, timeout=1.0)
    assert result.num_qpus == num_qpus and not result.estimated


def test_a_hung_direct_launch_times_out_and_the_device_recovers(direct_pi):
    with pytest.raises(PiTimeout, match="1 of program 0 still running"):
        direct_pi.execute(spin_forever.assemble(), num_qpus=1, timeout=0.2)
    assert direct_pi.execute(finish.assemble(), timeout=1.0).num_qpus == 1
