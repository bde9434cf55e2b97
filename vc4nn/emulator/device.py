"""EmulatorDevice: the Device interface over emulated bus memory and the machine model."""

from ..device import Device
from .machine import DEFAULT_MAX_INSTRUCTIONS, Machine
from .memory import BusMemory
from .timing import DEFAULT_BOARD


class EmulatorDevice(Device):
    """A V3D in software.

    board: timing preset ("pi1", "pi_zero", "pi2", "pi3"; vc4nn.emulator.timing.BOARDS).
    checks: dynamic checks (vc4nn.emulator.checks.Checks, a mode string for every rule, or a
        {rule: mode} dict); default: every rule raises.
    seed: None for the deterministic scheduler; an int to break ties at random (reproducibly).
    max_instructions: instruction budget of one launch (all QPUs); None for no budget.
    core: "c" (the compiled core), "python" (the pure-Python core, the specification) or None
        for the C core when it is built, else the Python one (docs/design.md "Two cores").
    """

    name = "emulator"

    def __init__(self, board=DEFAULT_BOARD, checks=None, seed=None,
                 max_instructions=DEFAULT_MAX_INSTRUCTIONS, core=None):
        super().__init__()
        self.memory = BusMemory()
        self.machine = Machine(self.memory, board, checks, seed, max_instructions, core)

    @property
    def core(self):
        """The emulator core this device runs: "c" or "python"."""
        return self.machine.core

    @property
    def timing(self):
        return self.machine.timing

    def _allocate(self, nbytes, align):
        return self.memory.allocate(nbytes, align)

    def _release(self, allocation):
        self.memory.release(allocation)

    def _launch(self, num_qpus, control_address, timeout):
        return self.machine.run(num_qpus, control_address, timeout)
