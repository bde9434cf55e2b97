"""Semaphores and the mutex (facts §3), shared by all QPUs.

16 four-bit counters start at 0: an acquire (decrement) at 0 and a release (increment) at 15
block. The mutex is granted to one QPU at a time. A blocked attempt has no side effect; the
machine retries it later. Each unit remembers when it last changed, so a QPU that was waiting
resumes no earlier than the event that freed it.

Violations go through ``checks.report`` (vc4nn.emulator.checks); without a Checks each rule has
its default mode.
"""

from types import MappingProxyType

from asm import isa

from .checks import Checks, Rule

# Dynamic checks of this unit (vc4nn/emulator/checks.py): rule -> Rule(default, catches, hardware).
CHECK_RULES = MappingProxyType({
    "semaphore_balance": Rule(
        "warn", "a semaphore not back at 0 when the run ends",
        "legal and common: the counters simply keep their value; a following launch that "
        "expects 0 may block or skip a wait"),
    "mutex_held_at_end": Rule(
        "warn", "the run ended with the mutex held",
        "whether program end frees the mutex is not documented; if not, the next acquire "
        "waits forever"),
    "mutex_not_held": Rule(
        "warn", "mutex_release written by a QPU that does not hold the mutex",
        "not documented; the emulator ignores the release, the hardware may free the mutex"),
    "mutex_reacquire": Rule(
        "error", "mutex_acquire read by the QPU that already holds the mutex",
        "the QPU waits for itself: it hangs on a Pi"),
})


def semaphore_blocked_reason(number, acquire, count):
    return f"semaphore {number} ({'acquire' if acquire else 'release'} with count {count})"


def mutex_blocked_reason(holder):
    return f"the mutex (held by QPU {holder})"


MUTEX_REACQUIRE_MESSAGE = ("mutex_acquire read while this QPU already holds the mutex (it would "
                           "wait for itself forever on a Pi)")


def mutex_not_held_message(holder):
    holder = "nobody" if holder is None else f"QPU {holder}"
    return f"mutex_release written by a QPU that does not hold the mutex (held by {holder})"


class Sync:
    def __init__(self, timing, checks=None):
        self.timing = timing
        self.checks = checks if checks is not None else Checks()
        self._reset()

    def _reset(self):
        self.counts = [0] * isa.NUM_SEMAPHORES
        self._changed_at = [0] * isa.NUM_SEMAPHORES
        self.mutex_holder = None
        self._mutex_free_at = 0
        self._blocked = {}

    def try_semaphore(self, qpu, number, acquire, now):
        """Acquire (decrement) or release (increment) semaphore ``number``; None if it blocks."""
        count = self.counts[number]
        if (count == 0) if acquire else (count == isa.SEMAPHORE_MAX):
            self._blocked[qpu] = semaphore_blocked_reason(number, acquire, count)
            return None
        self.counts[number] = count - 1 if acquire else count + 1
        self._blocked.pop(qpu, None)
        t = max(now, self._changed_at[number]) + self.timing.semaphore_clocks
        self._changed_at[number] = t
        return t

    def try_mutex_acquire(self, qpu, now):
        if self.mutex_holder == qpu:
            self._report("mutex_reacquire", MUTEX_REACQUIRE_MESSAGE, qpu)
            return max(now, self._mutex_free_at) + self.timing.mutex_clocks
        if self.mutex_holder is not None:
            self._blocked[qpu] = mutex_blocked_reason(self.mutex_holder)
            return None
        self.mutex_holder = qpu
        self._blocked.pop(qpu, None)
        return max(now, self._mutex_free_at) + self.timing.mutex_clocks

    def mutex_release(self, qpu, now):
        if self.mutex_holder != qpu:
            self._report("mutex_not_held", mutex_not_held_message(self.mutex_holder), qpu)
            return now
        self.mutex_holder = None
        self._mutex_free_at = now
        return now

    def blocked_reason(self, qpu):
        """What ``qpu`` last blocked on ('' if its last attempt succeeded)."""
        return self._blocked.get(qpu, "")

    def finish(self):
        """Check that the run left the semaphores at their start values and the mutex free."""
        unbalanced = {n: c for n, c in enumerate(self.counts) if c}
        holder = self.mutex_holder
        self._reset()
        if unbalanced:
            listing = ", ".join(f"semaphore {n} = {c}" for n, c in unbalanced.items())
            self._report("semaphore_balance", f"the run ended with {listing}; they start at 0, "
                         f"so the next launch would see these counts")
        if holder is not None:
            self._report("mutex_held_at_end", "the run ended with the mutex held", holder)

    def _report(self, rule, message, qpu=None):
        self.checks.report(rule, message, qpu)
