"""EmulatorDevice: the Device interface over emulated bus memory and the machine model."""

from ..device import DEFAULT_LAUNCH_PATH, Device
from ..errors import DeviceError
from .machine import DEFAULT_MAX_INSTRUCTIONS, Machine
from .memory import DEFAULT_GUARD_BYTES, BusMemory
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
    guard_bytes: unmapped bytes kept after every allocation, so an overrun of up to that many
        bytes faults (naming the buffer) instead of writing the next buffer.
    progress: None, or a callable given the instructions executed so far in a launch, called
        every ``PROGRESS_INTERVAL`` instructions (settable later as ``device.progress``).
    core: "c" (the compiled core), "python" (the pure-Python core, the specification) or None
        for the C core when it is built, else the Python one (docs/design.md "Two cores").
    launch: "mailbox" or "direct", as on a Pi (vc4nn.pi.PiDevice): picks the launch overhead the
        cycle model adds to every launch (timing ``launch_overhead_mailbox`` / ``_direct``).
    """

    name = "emulator"

    def __init__(self, board=DEFAULT_BOARD, checks=None, seed=None,
                 max_instructions=DEFAULT_MAX_INSTRUCTIONS, guard_bytes=DEFAULT_GUARD_BYTES,
                 progress=None, core=None, launch=DEFAULT_LAUNCH_PATH):
        super().__init__()
        self.memory = BusMemory(guard_bytes)
        self.machine = Machine(self.memory, board, checks, seed, max_instructions, core, launch)
        self.progress = progress

    @property
    def launch_path(self):
        return self.timing.launch_path

    @property
    def core(self):
        """The emulator core this device runs: "c" or "python"."""
        return self.machine.core

    @property
    def progress(self):
        """None or a callable(instructions executed so far in the launch), see Machine."""
        return self.machine.progress

    @progress.setter
    def progress(self, callback):
        if callback is not None and not callable(callback):
            raise DeviceError(f"progress must be None or a callable, got {callback!r}")
        self.machine.progress = callback

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
