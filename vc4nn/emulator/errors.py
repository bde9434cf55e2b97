"""Errors of the emulator. Every one says which QPU, at which PC, did what."""

from ..errors import Vc4nnError


class EmulatorError(Vc4nnError):
    """Base of emulator errors. ``qpu`` and ``pc`` (byte address of the instruction) when known."""

    def __init__(self, message, qpu=None, pc=None):
        self.message, self.qpu, self.pc = message, qpu, pc
        where = []
        if qpu is not None:
            where.append(f"QPU {qpu}")
        if pc is not None:
            where.append(f"PC {pc:#010x}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


class MemoryFault(EmulatorError):
    """An access outside every allocation. ``unit``: fetch, uniform, tmu, dma_load, dma_store..."""

    def __init__(self, message, qpu=None, pc=None, unit=None, address=None):
        self.unit, self.address = unit, address
        super().__init__(message, qpu, pc)


class CheckError(EmulatorError):
    """A dynamic check found something that would misbehave on a real Pi. ``rule`` names it."""

    def __init__(self, rule, message, qpu=None, pc=None):
        self.rule = rule
        super().__init__(f"[{rule}] {message}", qpu, pc)


class DeadlockError(EmulatorError):
    """Every live QPU is blocked. ``waiting``: {qpu: (pc, what it waits on)}."""

    def __init__(self, waiting):
        self.waiting = dict(waiting)
        lines = "; ".join(f"QPU {q} at PC {pc:#010x} waits on {what}"
                          for q, (pc, what) in sorted(self.waiting.items()))
        super().__init__(f"deadlock: {lines}")


class EmulatorTimeout(EmulatorError):
    """The run exceeded its timeout (modelled time) or instruction budget."""


class UnsupportedInstruction(EmulatorError):
    """An instruction uses something the emulator does not model or the hardware leaves
    undefined for compute programs: a reserved opcode or mode, the tile buffer, varyings."""
