"""The C core's glue: core selection, and a launch run by the compiled extension ``_ccore``.

Two cores run the same launches with the same results (docs/design.md "Two cores"): the
pure-Python core (qpu.py, plan.py, machine.py), which is the specification, and a C core
(csrc/). The C core runs the scheduler, the QPUs and the ALUs, the VPM with its generic
access and its DMA engines, the TMU requests and caches, semaphores and the mutex, and the
memory bus with both L2s and the uniform line timing (``memory_bus``: bus.MemoryBus in C), and
the slices' instruction caches (csrc/icache.c: icache.py's, whose hit and miss counts it sets);
decoding stays in Python (``lowering.py`` turns each instruction into a compact record, which
the machine's record cache keeps across launches). Rare paths (check reports, whose messages
are the Python units' own, faults, the seeded scheduler's draws) call back into Python, into
the same helpers the Python core uses; at the end of a run the units' state goes back into the
Python units, whose end-of-run checks are the specification's.
"""

import os
import sys
import types

import numpy as np

from ..errors import DeviceError
from . import sync
from .dma import Dma
from .lowering import ENUMS, RECORD_WORDS, lower_word
from .qpu import STALL_CAUSES, r4_early_message, r4_overwritten_message, \
    regfile_hazard_message, uniform_early_message, uniform_word
from .vpm import GenericSetup
from .vpm_checks import MESSAGES

try:
    from . import _ccore
except ImportError:         # not built (no C compiler at install time)
    _ccore = None

CORES = ("c", "python")
BUILD_HINT = ("install a C compiler (Raspberry Pi OS / Debian: sudo apt install gcc "
              "python3-dev) and reinstall vc4nn (pip install -e .), or build in place with "
              "python setup.py build_ext --inplace")
# The QPU core's own check rules, in the order of the RULE_* enum of csrc/core.h.
CORE_RULES = ("regfile_read_after_write", "r4_read_before_sfu_result",
              "r4_overwritten_during_sfu", "uniform_read_after_address_write")
_SFU_NAMES = ("recip", "recipsqrt", "exp", "log")
# Lowered instructions a machine keeps (csrc/plans.c; the cache starts again when full).
RECORD_CACHE_LIMIT = 1 << 16
# The TMU runs in C (csrc/tmu.c); False sends every TMU operation to the Python Tmu instead
# (slower, and always what tmu.py says: the switch for a tmu.py change not yet ported to C).
TMU_IN_C = True
_BLOCKED_SEMAPHORE = ENUMS["BLOCKED"].index("semaphore")
# The core of machines made with core=None when set ("c" or "python"); the tests run the
# emulator suite once per core through it.
default_override = None
_notice_shown = False


def available():
    """Whether the C core is built and matches this Python side."""
    return _ccore is not None and _ccore.RECORD_WORDS == RECORD_WORDS


def active_default():
    return "c" if available() else "python"


def resolve(core):
    """The core a machine uses: "c", "python", or None for the default: the environment
    variable VC4NN_EMULATOR_CORE when set, else C when built."""
    global _notice_shown
    if core is None:
        core = default_override or os.environ.get("VC4NN_EMULATOR_CORE") or None
    if core is None:
        if not available() and not _notice_shown:
            _notice_shown = True
            print(f"vc4nn: the emulator's C core is not built, using the pure-Python core "
                  f"(about 100x slower); to get the fast core, {BUILD_HINT}", file=sys.stderr)
        return active_default()
    if core not in CORES:
        raise DeviceError(f"core must be one of {', '.join(map(repr, CORES))} or None; "
                          f"got {core!r}")
    if core == "c" and not available():
        raise DeviceError(f"the emulator's C core (core='c') is not built; {BUILD_HINT}")
    return core


class _Glue:
    """What the C core asks of Python during one launch (see csrc/*.c for the callers)."""

    def __init__(self, machine):
        self.machine = machine
        self.tmu, self.vpm, self.sync, self.bus = machine.tmu, machine.vpm, machine.sync, \
            machine.bus
        self.icache = machine.icache
        self.rng = machine._rng
        self.timeout = None
        self.tmu_in_c = TMU_IN_C

    def fetch(self, pc, qpu):
        """The record of the instruction at ``pc`` (Machine.plan_at's fetch and faults), for a
        word the machine's record cache (csrc/plans.c) does not hold."""
        machine = self.machine
        if pc & 7:
            machine.plan_at(pc, types.SimpleNamespace(index=qpu))    # raises the fault
        low, high = machine.memory.read_words(pc, 2, "fetch", qpu, pc)
        return lower_word(int(low) | int(high) << 32, pc)

    def report(self, rule, qpu, pc, a, b):
        if rule == 0:
            message = regfile_hazard_message(a, b)
        elif rule == 1:
            message = r4_early_message(a)
        elif rule == 2:
            what = f"SFU {_SFU_NAMES[b]}" if b < len(_SFU_NAMES) else f"ldtmu{b - len(_SFU_NAMES)}"
            message = r4_overwritten_message(what, a)
        else:
            message = uniform_early_message(a)
        self.machine.checks.report(CORE_RULES[rule], message, qpu, pc)

    def sync_report(self, rule, qpu, holder):
        if rule == 0:
            self.sync._report("mutex_reacquire", sync.MUTEX_REACQUIRE_MESSAGE, qpu)
        else:
            self.sync._report("mutex_not_held",
                              sync.mutex_not_held_message(None if holder < 0 else holder), qpu)

    def sync_import(self, state):
        """Put the C core's semaphores and mutex into the Python Sync (its finish and
        blocked_reason read them)."""
        counts, changed, holder, free_at, blocked = state
        s = self.sync
        s.counts, s._changed_at, s.mutex_holder, s._mutex_free_at = counts, changed, holder, \
            free_at
        s._blocked = {qpu: (sync.semaphore_blocked_reason(a, bool(b), c)
                            if kind == _BLOCKED_SEMAPHORE else sync.mutex_blocked_reason(a))
                      for qpu, (kind, a, b, c) in blocked.items()}

    def vpm_report(self, rule, qpu, key, args):
        self.machine.checks.report(rule, MESSAGES[key](*args), qpu)

    def vpm_import(self, qpus, unsettled):
        """Put the C core's VPM state (csrc/vpm.c vpm_export) into the Python Vpm: its finish
        makes the end-of-run checks from it."""
        vpm = self.vpm
        for qpu, (reads, last, write, vdr, pitch, vdw, stride, load, store) in enumerate(qpus):
            vpm._reads[qpu].extend(_setup(s) for s in reads)
            vpm._last_read[qpu], vpm._write[qpu] = _setup(last), _setup(write)
            vpm._vdr[qpu], vpm._vdr_pitch[qpu], vpm._vdw[qpu], vpm._vdw_stride[qpu] = \
                vdr, pitch, vdw, stride
            vpm._load[qpu], vpm._store[qpu] = _dma(qpu, "load", load), _dma(qpu, "store", store)
        slots = (vpm._load, vpm._store)
        vpm._unsettled = [slots[kind][qpu] for qpu, kind in unsettled]

    def uniform_word(self, address, qpu, pc):
        return uniform_word(self.machine.memory, address, qpu, pc)[0]

    def slice_error(self, error, qpu, pc):
        from .machine import slice_error
        return slice_error(error, qpu, pc)

    def timeout_error(self, detail, positions):
        kind, executed = detail
        return self.machine.timeout_error(kind, executed, self.timeout, _where(positions))

    def deadlock_error(self, blocked, positions):
        return self.machine.deadlock_error(set(blocked), _where(positions))


def memory_bus(timing):
    """The C core's memory bus: bus.MemoryBus in C (csrc/bus.c), with the same methods and
    statistics, which the Python Tmu uses as it uses the Python bus."""
    return _ccore.MemoryBus(timing)


def _setup(fields):
    if fields is None:
        return None
    setup = GenericSetup.__new__(GenericSetup)
    (setup.horizontal, setup.laned, setup.width, setup.stride, setup.addr, setup.remaining,
     setup.ready) = fields
    if setup.remaining < 0:         # a write setup counts no vectors
        setup.remaining = None
    return setup


def _dma(qpu, kind, fields):
    if fields is None:
        return None
    complete, settled, words = fields
    dma = Dma(qpu, kind, np.frombuffer(words, dtype=bool).copy(), complete)
    dma.settled = settled
    return dma


def _where(positions):
    return [types.SimpleNamespace(index=i, pc=pc, ended=ended) for i, pc, ended in positions]


def _allocations(memory):
    return [(start, memory._blocks[start].size,
             memory._blocks[start].memory.__array_interface__["data"][0])
            for start in memory._starts]


def _final_state(summary):
    state = summary["state"]
    u32 = lambda name, shape: np.frombuffer(state[name], dtype=np.uint32).reshape(shape)  # noqa
    flags = lambda name: np.frombuffer(state[name], dtype=np.uint8).astype(bool)  # noqa
    return {"acc": u32("acc", (6, 16)), "ra": u32("ra", (32, 16)), "rb": u32("rb", (32, 16)),
            "z": flags("z"), "n": flags("n"), "c": flags("c"),
            "last_mul": u32("last_mul", (16,)), "port_last": u32("port_last", (2, 16)),
            "pc": summary["pc"], "unif_addr": summary["unif_addr"]}


def run(machine, entries, deadline, budget, timeout):
    """Run a launch on the C core; per-QPU summaries with the attributes Machine._result and
    the end-of-run checks read from a Qpu."""
    if not hasattr(machine, "_record_cache"):
        machine._record_cache = _ccore.record_cache()
    glue = _Glue(machine)
    glue.timeout = timeout
    timing, checks = machine.timing, machine.checks
    off = tuple(checks.mode(rule) == "off" for rule in CORE_RULES)
    _, summaries = _ccore.run(
        glue, list(entries), float(deadline), float(budget), machine.progress,
        (timing.issue_clocks, timing.sfu_latency, timing.uniform_line_bytes,
         timing.semaphore_clocks, timing.mutex_clocks),
        _allocations(machine.memory), off, machine.keep_final_state, machine._record_cache)
    qpus = []
    for s in summaries:
        qpus.append(types.SimpleNamespace(
            index=s["index"], count=s["count"], clock=s["clock"],
            stalls=dict(zip(STALL_CAUSES, s["stalls"])), host_interrupts=s["host_interrupts"],
            issue_clocks=timing.issue_clocks, pc=s["pc"], ended=s["ended"]))
    if machine.keep_final_state:
        machine.final_state = [_final_state(s) for s in summaries]
    return qpus


__all__ = ["available", "resolve", "run", "CORES"]
