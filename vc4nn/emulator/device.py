"""EmulatorDevice: the Device interface over emulated bus memory and the machine model."""

from ..device import Device
from .machine import DEFAULT_MAX_INSTRUCTIONS, Machine
from .memory import BusMemory
from .timing import DEFAULT_BOARD


class EmulatorDevice(Device):
    """A V3D in software.

    board: timing preset ("pi1", "pi_zero", "pi2", "pi3"; vc4nn.emulator.timing.BOARDS).
    checks: dynamic checks (vc4nn.emulator.checks.Checks, a mode string for every rule, or a
        {rule: mode} dict); default: each rule's own mode (an error where the hardware punishes
        it, a warning where the outcome is uncertain; docs/hardware-choices.md). "error" makes
        every rule stop.
    seed: None for the deterministic scheduler; an int to break ties at random (reproducibly).
    max_instructions: instruction budget of one launch (all QPUs); None for no budget.
    """

    name = "emulator"

    def __init__(self, board=DEFAULT_BOARD, checks=None, seed=None,
                 max_instructions=DEFAULT_MAX_INSTRUCTIONS):
        super().__init__()
        self.memory = BusMemory()
        self.machine = Machine(self.memory, board, checks, seed, max_instructions)

    @property
    def timing(self):
        return self.machine.timing

    def _allocate(self, nbytes, align, flags):
        if flags is None:
            flags = self.timing.board.mem_flags
        return self.memory.allocate(nbytes, align, flags)

    def _release(self, allocation):
        self.memory.release(allocation)

    def _launch(self, num_qpus, control_address, timeout):
        return self.machine.run(num_qpus, control_address, timeout)
