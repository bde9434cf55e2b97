"""The C core's hooks into Python: the progress callback and Ctrl-C (KeyboardInterrupt)."""

import numpy as np
import pytest

from asm import kernel
from vc4nn.emulator import EmulatorDevice, ccore
from vc4nn.emulator.machine import PROGRESS_INTERVAL

from .test_machine import _delay_loop

pytestmark = pytest.mark.skipif(not ccore.available(), reason="the C core is not built")


@pytest.fixture(autouse=True)
def emulator_core():
    """Overrides the per-core parametrisation of conftest.py: these tests are C-only."""


@kernel
def countdown(a, iterations):
    _delay_loop(a, iterations)
    a.exit()


def _run(device, iterations, num_qpus):
    return device.execute(countdown.assemble(iterations=iterations), num_qpus)


def test_progress_is_called_when_the_count_crosses_each_multiple():
    seen = []
    with EmulatorDevice(core="c") as device:
        device.machine.progress = seen.append
        run = _run(device, 40_000, 4)
    total = run.instructions
    assert total > 2 * PROGRESS_INTERVAL
    # one call per multiple crossed, each with a count at or just past that multiple
    assert len(seen) == total // PROGRESS_INTERVAL
    for k, count in enumerate(seen, start=1):
        assert k * PROGRESS_INTERVAL <= count < k * PROGRESS_INTERVAL + 64


def test_keyboard_interrupt_propagates_as_is():
    def interrupt(count):
        raise KeyboardInterrupt
    with EmulatorDevice(core="c") as device:
        device.machine.progress = interrupt
        with pytest.raises(KeyboardInterrupt):
            _run(device, 40_000, 2)


def test_final_state_of_both_cores():
    states = {}
    for core in ("python", "c"):
        with EmulatorDevice(core=core) as device:
            device.machine.keep_final_state = True
            _run(device, 5, 2)
            states[core] = device.machine.final_state
    for p, c in zip(states["python"], states["c"]):
        assert p["acc"][2].tolist() == [0] * 16      # the counter (r2) ran down to 0
        assert p["z"].all()
        for key in p:
            assert np.array_equal(p[key], c[key]), key
