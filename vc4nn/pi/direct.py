"""Launching QPU programs by writing the V3D's user-program registers, as GPU_FFT does.

A launch (docs/hardware-choices.md "Launch paths", register facts in v3d_registers.py):
  1. mask the QPU interrupts (DBCFG = 0, DBQITE = 0) and clear pending ones (DBQITC): the
     programs still raise host_int for the mailbox path, and the firmware's interrupt handler
     must not see interrupts of launches it did not make;
  2. clear the V3D L2 (L2CACTL) and the slice caches (SLCACTL), as execute_qpu does when
     noflush is 0: the ARM wrote code, uniforms and inputs since the last launch;
  3. clear SRQCS's error bit and its made and completed counts;
  4. per program: SRQUA (uniforms address), SRQUL (uniforms length), SRQPC (code address; this
     write queues the request);
  5. poll SRQCS until its completed count is the number of programs, or the timeout passes.
The QPUs are switched on through the mailbox (enable_qpu) when the device opens, as GPU_FFT
does in its direct mode too. On a timeout, or when the wait is interrupted (Ctrl-C), the QPUs
are switched off and on again, which stops the programs before their memory is released.
"""

from asm import isa

from . import system
from . import v3d_registers as reg
from .errors import DirectLaunchError, PiTimeout

# Poll without yielding for this long, then yield the CPU between polls: GPU_FFT busy-waits
# only for batches it expects to take about 1 ms (GPU_FFT_BUSY_WAIT_LIMIT) and sleeps in the
# mailbox call otherwise; yielding keeps a long launch from starving the rest of the system.
SPIN_SECONDS = 1e-3
# Steps 1-3 of every launch: (register, value).
START_WRITES = ((reg.DBCFG, 0), (reg.DBQITE, 0), (reg.DBQITC, reg.DBQITC_ALL),
                (reg.L2CACTL, reg.L2CACTL_L2CCLR), (reg.SLCACTL, reg.SLCACTL_CLEAR_ALL),
                (reg.SRQCS, reg.SRQCS_RESET))


class DirectLauncher:
    """The V3D registers of one PiDevice. ``power_cycle()`` switches the QPUs off and on
    (through the mailbox); it is how a hung launch is stopped."""

    def __init__(self, os_, mem_fd, board, power_cycle):
        self._os, self._power_cycle = os_, power_cycle
        self.address = system.peripheral_base(os_, board) + reg.V3D_OFFSET
        try:
            self._regs = os_.map_registers(mem_fd, self.address, reg.WINDOW_BYTES)
        except OSError as e:
            raise DirectLaunchError(
                f"cannot map the V3D registers at {self.address:#010x} through {system.DEV_MEM}: "
                f"{e.strerror or e}",
                fix="a kernel built with CONFIG_IO_STRICT_DEVMEM refuses this while a driver "
                    "holds the V3D: boot with 'iomem=relaxed' in cmdline.txt, or use "
                    "launch='mailbox'") from None
        self.in_flight = False
        ident = self._regs.read(reg.IDENT0)
        if ident != reg.IDENT0_VC4:
            self._regs.close()
            raise DirectLaunchError(
                f"the registers at {self.address:#010x} are not a VideoCore IV V3D "
                f"(IDENT0 = {ident:#010x}, expected {reg.IDENT0_VC4:#010x})",
                fix="use launch='mailbox'")
        # What the firmware had, given back when the device closes.
        self._saved = {r: self._regs.read(r) for r in (reg.DBCFG, reg.DBQITE)}

    @staticmethod
    def writes_for(programs):
        """The register writes (offset, value) of launching ``programs`` [(uniforms address,
        code address)], steps 1-4 above: made once per launch sequence."""
        writes = list(START_WRITES)
        for uniforms, code in programs:
            writes += ((reg.SRQUA, uniforms), (reg.SRQUL, reg.SRQUL_MAX), (reg.SRQPC, code))
        return writes

    def launch(self, writes, count, deadline_seconds, control_address):
        """Launch ``count`` programs by ``writes`` (``writes_for`` of them) and wait for them
        all to end. ``deadline_seconds``: None for no limit."""
        regs = self._regs
        queued, _, made, completed = reg.decode_srqcs(regs.read(reg.SRQCS))
        if queued or made != completed:
            raise DirectLaunchError(
                f"the V3D is running someone else's QPU programs ({queued} request(s) queued, "
                f"{(made - completed) % 256} running): a direct launch now would count their "
                f"completions as its own",
                fix="wait for the other process (GPU_FFT, another vc4nn) to finish, or use "
                    "launch='mailbox', which the firmware serialises")
        self.in_flight = True
        try:
            regs.write_all(writes)
            self._wait(count, deadline_seconds, control_address)
        except BaseException:
            self.stop()
            raise
        self.in_flight = False
        regs.write(reg.DBQITC, reg.DBQITC_ALL)

    def _wait(self, count, deadline_seconds, control_address):
        clock, regs = self._os.monotonic, self._regs
        start = clock()
        while True:
            status = regs.read(reg.SRQCS)
            queued, error, _, completed = reg.decode_srqcs(status)
            if error:
                raise DirectLaunchError(
                    f"the V3D's user-program queue overflowed queueing {count} program(s) "
                    f"from control list {control_address:#010x} (SRQCS = {status:#010x})",
                    fix=f"launch at most as many programs as there are QPUs ({isa.NUM_QPUS})")
            if completed == count:
                return
            elapsed = clock() - start
            if deadline_seconds is not None and elapsed > deadline_seconds:
                raise PiTimeout(timeout_message(count, queued, completed, control_address,
                                                deadline_seconds, status))
            if elapsed > SPIN_SECONDS:
                self._os.yield_cpu()

    def stop(self):
        """Stop whatever runs (a hung or interrupted launch) and leave the queue empty."""
        if not self.in_flight:
            return
        self.in_flight = False
        self._power_cycle()
        self._regs.write(reg.SRQCS, reg.SRQCS_RESET)
        self._regs.write(reg.DBQITC, reg.DBQITC_ALL)

    def close(self):
        """Stop any launch, give the firmware its interrupt settings back and unmap."""
        try:
            self.stop()
            for register, value in self._saved.items():
                self._regs.write(register, value)
        finally:
            self._regs.close()


def timeout_message(count, queued, completed, control_address, seconds, status):
    started = count - queued
    running = started - completed
    parts = [f"{completed} ended"]
    if running:
        parts.append(f"{running} of {_programs(0, started - 1)} still running (the V3D counts "
                     f"completions, not which program completed)")
    if queued:
        parts.append(f"{_programs(started, count - 1)} never started (still queued)")
    return (f"{count} QPU program(s) launched directly from control list {control_address:#010x} "
            f"did not all end within {seconds * 1e3:g} ms: {', '.join(parts)} (SRQCS = "
            f"{status:#010x}); each program must end with thrend (a.exit())")


def _programs(first, last):
    return f"program {first}" if first == last else f"programs {first}-{last}"
