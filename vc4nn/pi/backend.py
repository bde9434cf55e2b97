"""PiDevice: the Device interface on a real Raspberry Pi (Zero, 1, 2, 3), through the firmware.

The base class places code and uniforms in device memory and builds the control list; this
backend supplies GPU memory from the mailbox (mapped through /dev/mem) and launches with the
firmware's execute_qpu, or (launch="direct") by writing the V3D's user-program registers
(vc4nn/pi/direct.py). Verified only against the fake OS in tests/pi (docs/pi-backend.md).
"""

import math
import struct
import time
from types import MappingProxyType

from asm import isa

from ..device import (CONTROL_ENTRY_WORDS, DEFAULT_LAUNCH_PATH, Device, QpuStats, RunResult,
                      checked_launch_path)
from ..errors import DeviceError
from . import cleanup, system
from .board import decode_revision
from .direct import DirectLauncher
from .errors import MailboxError, PiTimeout, UnsupportedBoardError
from .mailbox import CLOCK_V3D, EXECUTE_FLUSH, EXECUTE_OK, EXECUTE_TIMEOUT, Mailbox
from .memory import GpuMemory
from .os_boundary import OsBoundary

MAX_TIMEOUT_MS = 0xFFFFFFFF
# What a Pi reports of each QPU: nothing counted (shared by every report: made once, read-only).
NOT_COUNTED = [QpuStats(stalls=MappingProxyType({})) for _ in range(isa.NUM_QPUS)]
# Direct launches' register writes kept by control list content (a session has a few dozen).
WRITES_KEPT = 1024


class PiDevice(Device):
    """The QPUs of this Pi. Opening checks the setup and fails with the fix for any problem.

    ``launch``: "mailbox" (the default: the firmware's execute_qpu, which waits for the programs'
    host interrupt) or "direct" (the V3D's registers, polled for completions: a shorter launch,
    the cycle model's timing parameters launch_overhead_direct and launch_overhead_mailbox,
    docs/hardware-choices.md "Launch paths"; needs the V3D's registers mapped through /dev/mem, a
    DirectLaunchError says why when they cannot be).
    ``os_boundary``: the operating system (tests pass a fake). Close it (or use ``with``) to give
    the GPU memory back; it is also given back at exit and on SIGINT/SIGTERM.
    """

    name = "pi"

    def __init__(self, os_boundary=None, launch=DEFAULT_LAUNCH_PATH):
        super().__init__()
        self.launch_path = checked_launch_path(launch)
        self._os = os_boundary if os_boundary is not None else OsBoundary()
        self._vcio_fd = self._mem_fd = None
        self.memory = self._direct = None
        self._writes_made = {}              # control list bytes -> its launch's register writes
        self._qpus_enabled = False
        try:
            self._open()
        except BaseException:
            self._shut_down()
            raise
        cleanup.track(self)

    def _open(self):
        system.require_vcio(self._os)
        system.require_no_kms(self._os)
        self._vcio_fd = system.open_device_file(self._os, system.VCIO, "talk to the firmware mailbox")
        self.mailbox = Mailbox(self._os, self._vcio_fd)
        self._execute_qpu = self.mailbox.prepared("execute_qpu")
        self.board = decode_revision(self.mailbox.call("get_board_revision")[0])
        if not self.board.videocore_iv:
            raise UnsupportedBoardError(
                f"{self.board.describe()} has no VideoCore IV; vc4nn runs on the Pi Zero, 1, 2 and 3",
                fix=f"run on one of those boards; or {system.EMULATOR_HINT}")
        self.firmware_revision = self.mailbox.call("get_firmware_revision")[0]
        self.clock_hz = self.mailbox.call("get_clock_rate", CLOCK_V3D)[1]
        self._mem_fd = system.open_device_file(self._os, system.DEV_MEM, "map GPU memory", sync=True)
        self.memory = GpuMemory(self.mailbox, self._os, self._mem_fd, self.board.mem_flags)
        self._enable_qpus(True)
        if self.launch_path == "direct":
            self._direct = DirectLauncher(self._os, self._mem_fd, self.board, self._power_cycle)

    # -- backend primitives ------------------------------------------------------------------
    def _allocate(self, nbytes, align, flags):
        self._require_open()
        with cleanup.signals_deferred():
            return self.memory.allocate(nbytes, align, flags)

    def _release(self, allocation):
        with cleanup.signals_deferred():
            self.memory.release(allocation.handle)

    def _launch(self, num_qpus, control_address, timeout):
        self._require_open()
        if self._direct is not None:
            return self._launch_direct(num_qpus, control_address, timeout)
        timeout_ms = timeout_to_ms(timeout)
        start = time.perf_counter()
        status = self._execute_qpu(num_qpus, control_address, EXECUTE_FLUSH, timeout_ms)[0]
        seconds = time.perf_counter() - start
        if status == EXECUTE_TIMEOUT:
            error = PiTimeout(
                f"{num_qpus} QPU program(s) launched from control list {control_address:#010x} "
                f"did not all end within {timeout_ms} ms (execute_qpu returned {status:#010x}); "
                f"each program must write host_int and end with thrend (a.exit())")
            # A hung program keeps running after execute_qpu gives up; powering the QPUs off
            # stops it before the memory it uses is released and handed to someone else.
            try:
                self._power_cycle()
            except MailboxError as e:
                raise error from e
            raise error
        if status != EXECUTE_OK:
            raise MailboxError("execute_qpu", f"returned status {status:#010x}")
        return self._result(num_qpus, seconds)

    def _launch_direct(self, num_qpus, control_address, timeout):
        writes = self._direct_writes(num_qpus, control_address)
        return self._run_direct(writes, num_qpus, control_address, timeout)

    def _launch_sequence(self, launches):
        """Direct launches read every control list and have every launch's register writes
        before the first runs (the host's work per launch is then the writes and the wait)."""
        if self._direct is None:
            return super()._launch_sequence(launches)
        self._require_open()
        prepared = [(self._direct_writes(num_qpus, control), num_qpus, control, timeout)
                    for num_qpus, control, timeout in launches]
        return [self._run_direct(writes, num_qpus, control, timeout)
                for writes, num_qpus, control, timeout in prepared]

    def _direct_writes(self, num_qpus, control_address):
        """The register writes launching the control list at ``control_address``: made once
        per distinct list (a session launches the same lists every run)."""
        data = self.memory.read_bytes(control_address, 4 * CONTROL_ENTRY_WORDS * num_qpus)
        if data is None:
            raise DeviceError(
                f"control list {control_address:#010x} ({num_qpus} entries) is not in this "
                f"device's memory: a direct launch reads it from there (the mailbox path lets "
                f"the firmware read it anywhere)")
        writes = self._writes_made.get(data)
        if writes is None:
            words = struct.unpack(f"<{len(data) // 4}I", data)
            writes = tuple(self._direct.writes_for(zip(words[0::2], words[1::2])))
            if len(self._writes_made) >= WRITES_KEPT:
                self._writes_made.clear()
            self._writes_made[data] = writes
        return writes

    def _run_direct(self, writes, num_qpus, control_address, timeout):
        start = time.perf_counter()
        self._direct.launch(writes, num_qpus, timeout, control_address)
        return self._result(num_qpus, time.perf_counter() - start)

    def _result(self, num_qpus, seconds):
        return RunResult(num_qpus=num_qpus, host_interrupts=num_qpus,
                         qpus=NOT_COUNTED[:num_qpus], cycles=None,
                         seconds=seconds, board=self.board.name, clock_hz=float(self.clock_hz),
                         estimated=False)

    # -- lifetime ----------------------------------------------------------------------------
    def close(self):
        """Give back every GPU allocation, switch the QPUs off and close the device files."""
        with cleanup.signals_deferred():
            try:
                # A direct launch interrupted by a signal (the SIGINT handler closes devices
                # from inside its poll loop) still runs: stop it before its memory goes.
                if self._direct is not None:
                    self._direct.stop()
                super().close()
            finally:
                self._shut_down()
                cleanup.untrack(self)

    def _shut_down(self):
        try:
            if self._direct is not None:
                direct, self._direct = self._direct, None
                direct.close()
        finally:
            self._release_memory_and_files()

    def _release_memory_and_files(self):
        try:
            if self.memory is not None:
                self.memory.release_all()
        finally:
            try:
                if self._qpus_enabled:
                    self._enable_qpus(False)
            finally:
                for fd in (self._mem_fd, self._vcio_fd):
                    if fd is not None:
                        self._os.close(fd)
                self._mem_fd = self._vcio_fd = None

    def describe(self):
        return (f"{self.board.describe()}, firmware {self.firmware_revision:#x}, "
                f"V3D clock {self.clock_hz / 1e6:g} MHz, {self.launch_path} launches")

    def __repr__(self):
        state = "open" if self._vcio_fd is not None else "closed"
        return f"<PiDevice {state}>"

    def _enable_qpus(self, on):
        status = self.mailbox.call("enable_qpu", 1 if on else 0)[0]
        self._qpus_enabled = on and status == 0
        if status != 0:
            raise MailboxError("enable_qpu", f"switching the QPUs {'on' if on else 'off'} "
                               f"returned status {status:#010x}")

    def _power_cycle(self):
        self._enable_qpus(False)
        self._enable_qpus(True)

    def _require_open(self):
        if self._vcio_fd is None:
            raise DeviceError("this PiDevice is closed")


def timeout_to_ms(timeout):
    """execute_qpu's timeout in whole milliseconds (rounded up, at least 1); None (no timeout)
    is the longest the mailbox call takes."""
    if timeout is None:
        return MAX_TIMEOUT_MS
    seconds = float(timeout)
    if not 0 < seconds <= MAX_TIMEOUT_MS / 1000:
        raise DeviceError(f"timeout {timeout} s is outside (0, {MAX_TIMEOUT_MS // 1000}] s")
    return math.ceil(seconds * 1000)
