"""The V3D as the emulator sees it: 12 QPUs, the shared units, the scheduler, the run's end.

A launch works like the firmware's execute_qpu (facts §3): ``num_qpus`` pairs (uniforms address,
code address) in bus memory; program i runs on QPU i. The call returns when every program has
executed thrend and its two delay slots; then the units check what was left behind. A launch in
which no program raised the host interrupt is reported (rule missing_host_interrupt, a warning
by default): one interrupt for the whole launch is what GPU_FFT, QPULib and py-videocore raise
(facts §5.19, docs/hardware-choices.md "Launch paths").

Scheduling follows modelled time: each QPU has its own clock and the runnable QPU with the
smallest clock runs next (ties by QPU number). With ``seed`` the ties are broken at random and a
QPU may run up to ``JITTER_CLOCKS`` ahead, to shake out races between QPUs; the model of each
QPU's own time is unchanged. An instruction either completes or blocks (semaphore, mutex) with
no side effect but the fetch of its code line (instruction cache); a blocked QPU is retried after another QPU changes a semaphore or frees the
mutex, and resumes no earlier than that QPU's clock. When every live QPU is blocked the run is
a deadlock.
"""

import heapq
import math
import random

import numpy as np

from asm import isa

from ..device import QpuStats, RunResult
from ..errors import DeviceError, Vc4nnError
from . import ccore
from .bus import MemoryBus
from .checks import as_checks
from .errors import DeadlockError, EmulatorError, EmulatorTimeout, MemoryFault
from .icache import InstructionCaches
from .plan import compile_word
from .qpu import Qpu, final_state
from .sync import Sync
from .timing import DEFAULT_BOARD, Timing
from .tmu import Tmu
from .vpm import Vpm

# Enough for the big SGEMM runs (a few million instructions) with room to spare; an endless
# loop stops after this many instructions instead of after the modelled timeout (which at
# 50k instructions/s would take hours).
DEFAULT_MAX_INSTRUCTIONS = 50_000_000
JITTER_CLOCKS = 64
# A launch calls ``Machine.progress`` each time its instruction count crosses a multiple of this.
PROGRESS_INTERVAL = 1 << 16
PLAN_CACHE_LIMIT = 1 << 16      # predecoded instructions kept across launches
CONTROL_ENTRY_WORDS = 2


class Machine:
    def __init__(self, memory, board=DEFAULT_BOARD, checks=None, seed=None,
                 max_instructions=DEFAULT_MAX_INSTRUCTIONS, core=None, launch_path="mailbox"):
        if max_instructions is not None and (not isinstance(max_instructions, int)
                                             or max_instructions < 1):
            raise DeviceError(f"max_instructions must be a positive int or None; "
                              f"got {max_instructions!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise DeviceError(f"seed must be None or an int, got {seed!r}")
        self.memory = memory
        self.timing = Timing(board, launch_path)
        self.checks = as_checks(checks).copy()
        self.max_instructions = max_instructions
        self._rng = random.Random(seed) if seed is not None else None
        self._plan_cache = {}       # word -> plan (plans are position-independent), across runs
        self.run_plans = {}         # code address -> plan, this run
        self.sync_event = False
        # None, or a callable given the instructions executed so far in the launch (all QPUs);
        # called each time that count crosses a multiple of PROGRESS_INTERVAL.
        self.progress = None
        self.core = ccore.resolve(core)     # "c" or "python" (docs/design.md "Two cores")
        self.keep_final_state = False       # debugging and the core equivalence tests
        self.final_state = None

    # -- instruction fetch -------------------------------------------------------------------
    def plan_at(self, pc, qpu):
        """Fetch and predecode the instruction at ``pc`` (once per run and address)."""
        if pc & (isa.INSTRUCTION_BYTES - 1):
            raise MemoryFault(f"instruction fetch at {pc:#010x}, which is not 8-byte aligned",
                              qpu.index, pc, "fetch", pc)
        low, high = self.memory.read_words(pc, 2, "fetch", qpu.index, pc)
        word = int(low) | int(high) << 32
        plan = self._plan_cache.get(word)
        if plan is None:
            if len(self._plan_cache) >= PLAN_CACHE_LIMIT:
                self._plan_cache.clear()
            plan = self._plan_cache[word] = compile_word(word)
        self.run_plans[pc] = plan
        return plan

    # -- a launch ----------------------------------------------------------------------------
    def run(self, num_qpus, control_address, timeout):
        """Run the control list at ``control_address``; RunResult, or a typed EmulatorError."""
        try:
            return self._run(num_qpus, control_address, timeout)
        except Vc4nnError:
            raise
        except Exception as error:   # a bad program must never surface as a raw traceback
            raise EmulatorError(f"the emulator failed ({type(error).__name__}: {error})") \
                from error

    def _run(self, num_qpus, control_address, timeout):
        checks, timing = self.checks, self.timing
        checks.warnings = []
        control = self.memory.read_words(control_address, CONTROL_ENTRY_WORDS * num_qpus,
                                         "control_list")
        self.bus = ccore.memory_bus(timing) if self.core == "c" else MemoryBus()
        self.vpm = Vpm(self.memory, timing, checks, bus=self.bus)
        self.tmu = Tmu(self.memory, timing, checks, bus=self.bus)
        self.sync = Sync(timing, checks)
        self.icache = InstructionCaches(timing, self.bus)
        self.run_plans = {}
        self.final_state = None
        entries = [(int(control[CONTROL_ENTRY_WORDS * i]), int(control[CONTROL_ENTRY_WORDS * i + 1]))
                   for i in range(num_qpus)]
        deadline = math.inf if timeout is None else timeout * timing.clock_hz
        budget = self.max_instructions or math.inf
        with np.errstate(all="ignore"):
            if self.core == "c":
                qpus = ccore.run(self, entries, deadline, budget, timeout)
            else:
                qpus = [Qpu(i, self, *entry) for i, entry in enumerate(entries)]
                self._schedule(qpus, deadline, budget, timeout)
                if self.keep_final_state:
                    self.final_state = [final_state(q) for q in qpus]
            indices = list(range(num_qpus))
            self.vpm.finish(indices)
            self.tmu.finish(indices)
            self.sync.finish()
        interrupts = sum(q.host_interrupts for q in qpus)
        if not interrupts:
            checks.report("missing_host_interrupt",
                          f"{num_qpus} program(s) ended with 0 host interrupts; a host that "
                          f"waits for the launch's interrupt (the firmware's execute_qpu) "
                          f"would wait until its timeout")
        return self._result(qpus, interrupts)

    def _result(self, qpus, interrupts):
        stats = []
        for q in qpus:
            stalls = dict(q.stalls)
            stalls["issue"] = q.count * q.issue_clocks
            stats.append(QpuStats(instructions=q.count, cycles=q.clock, stalls=stalls))
        cycles = max(q.clock for q in qpus)
        timing = self.timing
        return RunResult(num_qpus=len(qpus), host_interrupts=interrupts, qpus=stats,
                         cycles=cycles, seconds=cycles / timing.clock_hz + timing.launch_overhead,
                         board=timing.name, clock_hz=timing.clock_hz, estimated=True,
                         warnings=list(self.checks.warnings),
                         bus_busy_clocks=int(self.bus.busy_clocks))

    # -- the scheduler -----------------------------------------------------------------------
    def _tie(self, q):
        return self._rng.random() if self._rng is not None else q.index

    def _schedule(self, qpus, deadline, budget, timeout):
        rng = self._rng
        heap = [(q.clock, self._tie(q), q.index) for q in qpus]
        heapq.heapify(heap)
        blocked = {}
        executed = 0
        clock_limit = deadline + 1
        progress = self.progress
        next_report = PROGRESS_INTERVAL if progress is not None else math.inf
        while heap:
            _, tie, i = heapq.heappop(heap)
            q = qpus[i]
            limit = clock_limit
            if heap:
                top_clock, top_tie, _ = heap[0]
                # Run while this QPU is still first in (clock, tie) order.
                first_until = top_clock + (0 if tie > top_tie else 1)
                if rng is not None:
                    first_until += rng.randrange(JITTER_CLOCKS)
                limit = min(limit, first_until)
            executed += self._run_slice(q, limit, min(budget, next_report) - executed)
            if executed >= next_report:
                progress(executed)
                next_report += PROGRESS_INTERVAL
            if self.sync_event:
                self.sync_event = False
                for b in blocked.values():
                    b.wait(q.clock, b.block_cause)
                    heapq.heappush(heap, (b.clock, self._tie(b), b.index))
                blocked.clear()
            if q.block_cause is not None:
                blocked[i] = q
            elif not q.ended:
                if q.clock > deadline:
                    raise self.timeout_error("time", executed, timeout, qpus)
                if executed >= budget:
                    raise self.timeout_error("budget", executed, timeout, qpus)
                heapq.heappush(heap, (q.clock, tie, i))
        if blocked:
            raise self.deadlock_error(blocked, qpus)

    def timeout_error(self, kind, executed, timeout, qpus):
        """The EmulatorTimeout of a run past its modelled ``timeout`` (kind "time") or its
        instruction budget (kind "budget"); ``qpus`` have .index, .pc and .ended."""
        if kind == "time":
            return EmulatorTimeout(f"the run passed its timeout of {timeout} s of modelled "
                                   f"time at {self.timing.clock_hz / 1e6:g} MHz; "
                                   f"{_positions(qpus)}")
        return EmulatorTimeout(f"the run executed {executed} instructions, its budget "
                               f"(max_instructions; --max-instructions on the command "
                               f"line); {_positions(qpus)}")

    def deadlock_error(self, blocked, qpus):
        return DeadlockError({
            q.index: (q.pc, self.sync.blocked_reason(q.index) if q.index in blocked
                      else "nothing (its program ended)") for q in qpus})

    def _run_slice(self, q, limit, budget):
        """Step ``q`` until it blocks, ends, reaches ``limit`` on its clock, uses up ``budget``
        instructions or changes a semaphore or the mutex. Returns how many it executed."""
        start = q.count
        count_limit = start + budget
        step = q.step
        q.block_cause = None
        try:
            # Most slices are one instruction (QPUs with equal clocks take turns).
            while step() and not (q.ended or q.clock >= limit or q.count >= count_limit
                                  or self.sync_event):
                pass
        except Exception as error:
            raise slice_error(error, q.index, q.pc)
        return q.count - start


def slice_error(error, qpu, pc):
    """What an exception raised while ``qpu`` ran the instruction at ``pc`` becomes: emulator
    errors get the QPU and PC filled in, other vc4nn errors pass, and anything else (a bad
    program must never surface as a raw traceback) becomes an EmulatorError. Exceptions that
    are not Exceptions (KeyboardInterrupt) pass as they are."""
    if isinstance(error, EmulatorError):
        _locate(error, qpu, pc)
        return error
    if isinstance(error, Vc4nnError) or not isinstance(error, Exception):
        return error
    wrapped = EmulatorError(f"the emulator failed on this instruction "
                            f"({type(error).__name__}: {error})", qpu, pc)
    wrapped.__cause__ = error
    return wrapped


def _locate(error, qpu, pc):
    """Fill in the QPU and PC of an error raised by a unit that did not know them."""
    if error.qpu is None or error.pc is None:
        EmulatorError.__init__(error, error.message,
                               qpu if error.qpu is None else error.qpu,
                               pc if error.pc is None else error.pc)


def _positions(qpus):
    return "; ".join(f"QPU {q.index} at PC {q.pc:#010x}" + (" (ended)" if q.ended else "")
                     for q in qpus)
