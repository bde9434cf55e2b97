"""One QPU: register files, accumulators, flags, uniform stream, clock, and its I/O actions.

Instructions are predecoded once per code address into plans (``plan.py``); ``step`` runs one.
Register values are 16-lane uint32 vectors that are never modified in place, so a write just
rebinds a list slot and a move shares the vector.

Time: ``clock`` counts V3D clocks. Each instruction costs ``timing.issue_clocks``; a unit call
returns when its access completes and ``wait`` books the difference as a stall under its cause.
"""

import math

import numpy as np

from asm import isa

from ..device import BUS_ADDRESS_MASK
from . import sfu
from .alu import NO_CARRY, U32, ZERO, lanes, word_lanes
from .errors import MemoryFault

STALL_CAUSES = ("issue", "uniform", "icache", "sfu", "tmu", "vpm", "dma", "semaphore", "mutex")
_NEVER_WRITTEN = -1 << 30
ELEMENT_NUMBER = np.arange(isa.SIMD_WIDTH, dtype=U32)


# -- messages of the QPU core's checks and faults (both cores use these) -----------------------

def regfile_hazard_message(side, i):
    return (f"reads r{'ab'[side]}{i}, written by the previous instruction "
            f"(undefined on hardware, facts §2; the emulator returns the new value)")


def uniform_early_message(distance):
    return (f"reads a uniform {distance} instruction(s) after writing the uniforms address "
            f"(needs {isa.UNIF_ADDR_LATENCY}, facts §2)")


def r4_early_message(distance):
    return (f"reads r4 {distance} instruction(s) after the SFU write (the result arrives after "
            f"{isa.SFU_RESULT_LATENCY}, facts §2)")


def r4_overwritten_message(what, distance):
    return (f"{what} writes r4 {distance} instruction(s) after an SFU write, before its result "
            f"arrives (facts §2)")


def uniform_word(memory, address, qpu, pc):
    """(the uniform word at ``address``, (bus start, bytes, uint32 view) of its block or None
    when the block is not word aligned); MemoryFault outside memory or when misaligned."""
    bus = address & BUS_ADDRESS_MASK
    if bus & 3:
        raise MemoryFault(f"uniform read at bus address {address:#010x}, which is not "
                          f"4-byte aligned", qpu, pc, "uniform", address)
    memory, offset = memory.locate(address, 4, "uniform", qpu, pc)
    start = bus - offset
    if start & 3:       # a block not word aligned: no word view of it
        return int(memory[offset:offset + 4].view("<u4")[0]), None
    size = memory.size & ~3
    words = memory[:size].view("<u4")
    return int(words[offset >> 2]), (start, size, words)


def final_state(q):
    """A QPU's registers and flags after a run, as numpy arrays (Machine.keep_final_state)."""
    return {"acc": np.array(q.acc, dtype=U32), "ra": np.array(q.rf[0], dtype=U32),
            "rb": np.array(q.rf[1], dtype=U32), "z": np.array(q.z, dtype=bool),
            "n": np.array(q.n, dtype=bool), "c": np.array(q.c, dtype=bool),
            "last_mul": np.array(q.last_mul, dtype=U32),
            "port_last": np.array(q.port_last, dtype=U32), "pc": q.pc,
            "unif_addr": q.unif_addr}


class Qpu:
    """State of one QPU during a run. ``m`` is the machine (units, checks, timing, plans)."""

    def __init__(self, index, machine, uniforms_address, code_address):
        self.index, self.m = index, machine
        self.acc = [ZERO] * 6
        self.rf = ([ZERO] * isa.REGFILE_SIZE, [ZERO] * isa.REGFILE_SIZE)
        # Instruction count at which each regfile location was last written.
        self.rf_written = ([_NEVER_WRITTEN] * isa.REGFILE_SIZE, [_NEVER_WRITTEN] * isa.REGFILE_SIZE)
        self.port_last = [ZERO, ZERO]        # last value each regfile read port delivered
        self.z = self.n = self.c = NO_CARRY
        self.last_mul = ZERO                 # the MUL ALU's last result (facts §5.17)
        self.qpu_number = lanes(index)
        self.pc = code_address & 0xFFFFFFFF
        self._fetch_line = None              # code line the QPU runs from (instruction cache)
        self._line_number = machine.icache.line_number
        self.unif_addr = uniforms_address & 0xFFFFFFFF
        self.unif_written = _NEVER_WRITTEN   # count of the last uniforms-address write
        self._unif_line = None               # memory line of the last uniform read
        self._unif_line_bytes = machine.timing.uniform_line_bytes
        self._ublock = (0, 0, None)          # (bus start, bytes, uint32 view): uniforms' block
        self.sfu_written = _NEVER_WRITTEN
        self.r4_ready_count = _NEVER_WRITTEN
        self.r4_ready_clock = 0
        self.clock = 0
        self.count = 0                       # instructions completed
        self.stalls = dict.fromkeys(STALL_CAUSES, 0)
        self.pending = []                    # [(count, target or None for "end")], sorted
        self.ended = False
        self.block_cause = None
        self.host_interrupts = 0
        self.issue_clocks = machine.timing.issue_clocks
        self.plans = machine.run_plans

    # -- execution ---------------------------------------------------------------------------
    def step(self):
        """Run the instruction at pc. False if it blocked (nothing changed but the fetch of its
        line, which a retry does not repeat)."""
        pc = self.pc
        line = self._line_number(pc)
        if line != self._fetch_line:
            # A new code line waits for its slice's instruction cache (docs/cycle-model.md
            # "Instruction cache"); the rest of the line runs from what was fetched.
            self._fetch_line = line
            self.wait(self.m.icache.fetch(self.index, self.clock, pc), "icache")
        plan = self.plans.get(pc)
        if plan is None:
            plan = self.m.plan_at(pc, self)
        if not plan(self):
            return False
        self.count = count = self.count + 1
        self.clock += self.issue_clocks
        if self.pending and self.pending[0][0] == count:
            self.pc = pc + isa.INSTRUCTION_BYTES
            while self.pending and self.pending[0][0] == count:
                target = self.pending.pop(0)[1]
                if target is None:
                    self.ended = True
                else:
                    self.pc = target
        else:
            self.pc = pc + isa.INSTRUCTION_BYTES
        return True

    def schedule(self, after, target):
        """After ``after`` more instructions, jump to ``target`` (None: end the program)."""
        self.pending.append((self.count + 1 + after, target))
        self.pending.sort(key=lambda event: event[0])

    def wait(self, t, cause):
        if t > self.clock:
            t = math.ceil(t)
            self.stalls[cause] += t - self.clock
            self.clock = t

    def report(self, rule, message):
        self.m.checks.report(rule, message, self.index, self.pc)

    # -- regfile hazards ---------------------------------------------------------------------
    def regfile_read(self, side, i):
        if self.rf_written[side][i] == self.count - 1:
            self.report("regfile_read_after_write", regfile_hazard_message(side, i))
        return self.rf[side][i]

    # -- uniforms ----------------------------------------------------------------------------
    def read_uniform(self):
        if self.count < self.unif_written + isa.UNIF_ADDR_LATENCY:
            self.report("uniform_read_after_address_write",
                        uniform_early_message(self.count - self.unif_written))
        address = self.unif_addr
        bus = address & BUS_ADDRESS_MASK
        start, size, words = self._ublock
        offset = bus - start
        if 0 <= offset < size and not bus & 3:
            word = int(words[offset >> 2])
        else:
            word = self._uniform_word(address)
        line = bus // self._unif_line_bytes
        if line != self._unif_line:
            # A uniform in a new line waits for the line, served by the shared L2 or fetched
            # over the memory bus (docs/cycle-model.md "Uniforms").
            self._unif_line = line
            self.wait(self.m.bus.uniform_line(self.clock, address), "uniform")
        self.unif_addr = (address + 4) & 0xFFFFFFFF
        return word_lanes(word)

    def _uniform_word(self, address):
        """The uniform at ``address`` outside the block of the last one (or a fault)."""
        word, block = uniform_word(self.m.memory, address, self.index, self.pc)
        if block is not None:
            self._ublock = block
        return word

    def set_uniforms_address(self, value, relative):
        # Only element 0 counts (facts §2). The relative form adds that many uniforms (4 bytes
        # each, signed) to the address of the next uniform, so "read a uniform; unif_addr_rel
        # -1" in one instruction re-reads it (docs/hardware-choices.md "Emulator core").
        v = int(value[0])
        if relative:
            v = self.unif_addr + 4 * (v - (v >> 31 << 32))
        self.unif_addr = v & 0xFFFFFFFF
        self.unif_written = self.count
        self._unif_line = None

    # -- r4: SFU and TMU results -------------------------------------------------------------
    def read_r4(self):
        if self.count < self.r4_ready_count:
            self.report("r4_read_before_sfu_result", r4_early_message(self.count - self.sfu_written))
            self.wait(self.r4_ready_clock, "sfu")
        return self.acc[4]

    def _r4_writer(self, what):
        if self.sfu_written < self.count < self.r4_ready_count:
            self.report("r4_overwritten_during_sfu",
                        r4_overwritten_message(what, self.count - self.sfu_written))

    def write_sfu(self, function, value):
        self._r4_writer(f"SFU {function}")
        self.acc[4] = sfu.compute(function, value)
        self.sfu_written = self.count
        self.r4_ready_count = self.count + isa.SFU_RESULT_LATENCY
        self.r4_ready_clock = self.clock + self.m.timing.sfu_latency

    def load_tmu(self, unit):
        self._r4_writer(f"ldtmu{unit}")
        values, t = self.m.tmu.load(self.index, unit, self.clock)
        self.wait(t, "tmu")
        self.acc[4] = np.array(values, dtype=U32)

    # -- other I/O ---------------------------------------------------------------------------
    def write_tmu(self, unit, coord, value):
        self.wait(self.m.tmu.write(self.index, unit, coord, value, self.clock), "tmu")

    def write_tmu_noswap(self, value):
        self.m.tmu.set_noswap(self.index, int(value[0]))

    def host_interrupt(self, value):
        if value[0]:
            self.host_interrupts += 1

    def vpm_io(self, method, cause, *args):
        """Call a Vpm method taking (qpu, *args, now) and returning t or (values, t)."""
        answer = getattr(self.m.vpm, method)(self.index, *args, self.clock)
        if isinstance(answer, tuple):
            values, t = answer
            self.wait(t, cause)
            return np.array(values, dtype=U32)
        self.wait(answer, cause)
        return None

    def try_mutex_acquire(self):
        t = self.m.sync.try_mutex_acquire(self.index, self.clock)
        if t is None:
            self.block_cause = "mutex"
            return False
        self.wait(t, "mutex")
        return True

    def mutex_release(self, value):
        self.wait(self.m.sync.mutex_release(self.index, self.clock), "mutex")
        self.m.sync_event = True

    def try_semaphore(self, number, acquire):
        t = self.m.sync.try_semaphore(self.index, number, acquire, self.clock)
        if t is None:
            self.block_cause = "semaphore"
            return False
        self.wait(t, "semaphore")
        self.m.sync_event = True
        return True
