"""Semaphores (16 four-bit counters from 0) and the mutex (facts §3)."""

import pytest

from vc4nn.emulator.checks import Checks
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
    with pytest.raises(CheckError) as info:
        sync.finish()
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
def test_releasing_a_mutex_you_do_not_hold(sync, holder, rule):
    if holder is not None:
        sync.try_mutex_acquire(holder, 0)
    with pytest.raises(CheckError) as info:
        sync.mutex_release(5, 0)
    assert info.value.rule == rule and info.value.qpu == 5


def test_reacquire_and_held_at_end(sync):
    sync.try_mutex_acquire(3, 0)
    with pytest.raises(CheckError) as info:
        sync.try_mutex_acquire(3, 10)
    assert info.value.rule == "mutex_reacquire"
    with pytest.raises(CheckError) as info:
        sync.finish()
    assert info.value.rule == "mutex_held_at_end" and info.value.qpu == 3


def test_checks_modes_apply_when_given():
    sync = Sync(Timing(), Checks(mutex_not_held="off"))
    assert sync.mutex_release(0, 7) == 7
