"""Semaphores (16 four-bit counters from 0) and the mutex (facts §3)."""

import numpy as np
import pytest

from vc4nn.emulator.checks import Checks, CheckWarning
from vc4nn.emulator.errors import CheckError
from vc4nn.emulator.sync import Sync
from vc4nn.emulator.timing import Timing


@pytest.fixture
def sync():
    return Sync(Timing.for_board("pi1"))


def test_acquire_at_zero_blocks_until_a_release(sync):
    assert sync.try_semaphore(0, 3, True, 10) is None
    assert "semaphore 3" in sync.blocked_reason(0)
    assert sync.try_semaphore(1, 3, False, 50) == 50
    assert sync.try_semaphore(0, 3, True, 10) == 50      # resumes no earlier than the release
    assert sync.blocked_reason(0) == ""
    assert sync.counts[3] == 0


def test_release_at_15_blocks(sync):
    for _ in range(15):
        assert sync.try_semaphore(2, 0, False, 0) is not None
    assert sync.counts[0] == 15
    assert sync.try_semaphore(2, 0, False, 0) is None
    assert sync.try_semaphore(4, 0, True, 0) is not None
    assert sync.try_semaphore(2, 0, False, 0) is not None


def test_semaphores_are_independent(sync):
    sync.try_semaphore(0, 15, False, 0)
    assert sync.try_semaphore(0, 14, True, 0) is None
    assert sync.try_semaphore(0, 15, True, 0) is not None


def test_unbalanced_semaphores_at_the_end(sync):
    sync.try_semaphore(0, 7, False, 0)
    with pytest.warns(CheckWarning, match="semaphore_balance") as info:
        sync.finish()
    assert "semaphore 7 = 1" in str(info[0].message)
    strict = Sync(Timing.for_board("pi1"), Checks(default="error"))
    strict.try_semaphore(0, 7, False, 0)
    with pytest.raises(CheckError) as info:
        strict.finish()
    assert info.value.rule == "semaphore_balance" and "semaphore 7 = 1" in str(info.value)
    sync.finish()                       # finish reset the counters


def test_mutex_blocks_other_qpus_until_released(sync):
    assert sync.try_mutex_acquire(0, 100) == 100 + sync.timing.mutex_clocks
    assert sync.try_mutex_acquire(1, 120) is None
    assert "held by QPU 0" in sync.blocked_reason(1)
    assert sync.mutex_release(0, 300) == 300
    assert sync.try_mutex_acquire(1, 120) == 300 + sync.timing.mutex_clocks
    sync.mutex_release(1, 400)
    sync.finish()


@pytest.mark.parametrize("holder, rule", [(None, "mutex_not_held"), (2, "mutex_not_held")])
def test_releasing_a_mutex_you_do_not_hold(holder, rule):
    sync = Sync(Timing.for_board("pi1"), Checks(default="error"))
    if holder is not None:
        sync.try_mutex_acquire(holder, 0)
    with pytest.raises(CheckError) as info:
        sync.mutex_release(5, 0)
    assert info.value.rule == rule and info.value.qpu == 5


def test_reacquire_and_held_at_end(sync):
    sync.try_mutex_acquire(3, 0)
    with pytest.raises(CheckError) as info:        # waits for itself: an error by default
        sync.try_mutex_acquire(3, 10)
    assert info.value.rule == "mutex_reacquire"
    with pytest.warns(CheckWarning, match="mutex_held_at_end"):    # undocumented: a warning
        sync.finish()
    strict = Sync(Timing.for_board("pi1"), Checks(default="error"))
    strict.try_mutex_acquire(3, 0)
    with pytest.raises(CheckError) as info:
        strict.finish()
    assert info.value.rule == "mutex_held_at_end" and info.value.qpu == 3


def test_checks_modes_apply_when_given():
    sync = Sync(Timing(), Checks(mutex_not_held="off"))
    assert sync.mutex_release(0, 7) == 7


# -- end to end: 12 QPUs, a mutex-protected VPM counter and semaphore hand-offs ------------------

def _counter_kernel():
    from asm import kernel, null, r1, ra, uniform, vpm

    @kernel
    def count(a, workers=11):
        """QPU with uniform 1 (the master) zeroes VPM row 0, lets the workers go (semaphore 1),
        waits for all of them (semaphore 0) and stores the row. Each worker adds 1 to every
        element of row 0 under the mutex."""
        a.mov(ra[0], uniform)                     # out address
        a.mov(null, uniform, sf=True)             # master flag: Z clear on the master
        a.branch("worker", cond="all_zs")
        a.nop(); a.nop(); a.nop()
        a.setup_vpm_write(y=0)
        a.mov(vpm, 0)
        for _ in range(workers):
            a.sema_release(1)
        for _ in range(workers):
            a.sema_acquire(0)
        a.setup_dma_store(units=1, depth=16, y=0)
        a.start_dma_store(ra[0])
        a.wait_dma_store()
        a.branch("end")
        a.nop(); a.nop(); a.nop()
        a.label("worker")
        a.sema_acquire(1)
        a.mutex_acquire()
        a.setup_vpm_read(num=1, y=0)
        a.setup_vpm_write(y=0)
        a.mov(r1, vpm)
        a.add(vpm, r1, 1)
        a.mutex_release()
        a.sema_release(0)
        a.label("end")
        a.exit()

    return count


def test_kernel_mutex_and_semaphores_across_twelve_qpus(device):
    count = _counter_kernel()
    out = device.alloc(16, np.uint32)
    uniforms = [[out.address, int(q == 5)] for q in range(12)]
    run = device.execute(count.assemble(), 12, uniforms)
    assert out.tolist() == [11] * 16
    if run.estimated and run.cycles is not None:
        assert sum(q.stalls.get("semaphore", 0) for q in run.qpus) > 0
