"""The C core's hooks into Python: the progress callback, Ctrl-C (KeyboardInterrupt) and the
cache of lowered instructions."""

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


def test_a_program_loaded_again_elsewhere_is_not_lowered_again(monkeypatch):
    """The record cache (csrc/plans.c) is keyed by the instruction word, and by the address too
    for branches only: a copy of the program at a new address lowers just its branch."""
    lowered = []
    lower = ccore.lower_word
    monkeypatch.setattr(ccore, "lower_word", lambda word, pc: lowered.append(pc) or
                        lower(word, pc))
    program = countdown.assemble(iterations=3)
    words = len(program.to_bytes()) // 8
    with EmulatorDevice(core="c") as device:
        counts = []
        for shift in range(3):
            padding = device.alloc(4096 * (shift + 1), np.uint8)    # moves the program
            before = len(lowered)
            runs = [_run_at(device, program) for _ in range(2)]
            counts.append(len(lowered) - before)
            assert runs[0] == runs[1]
            device.free(padding)
    assert 0 < counts[0] <= words
    assert counts[1] == counts[2] == 1          # the loop's branch, once per new address


def _run_at(device, program):
    code = device.array(np.frombuffer(program.to_bytes(), dtype=np.uint32))
    try:
        return device.execute(code, 1).qpus[0].instructions
    finally:
        device.free(code)
