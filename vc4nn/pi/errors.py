"""Errors of the Raspberry Pi backend. Each says what went wrong and, where one exists, the fix."""

from ..errors import DeviceError


class PiError(DeviceError):
    """Base of Pi backend errors. ``fix`` is the exact change that cures it, when there is one."""

    def __init__(self, message, fix=None):
        self.message, self.fix = message, fix
        super().__init__(f"{message}\n  fix: {fix}" if fix else message)


class NotAPiError(PiError):
    """This machine has no /dev/vcio: not a Raspberry Pi, or the firmware driver is missing."""


class UnsupportedBoardError(PiError):
    """A Raspberry Pi without a VideoCore IV (Pi 4 and later have a different GPU)."""


class KmsConflictError(PiError):
    """The Linux KMS/fKMS GL driver owns the V3D, so the firmware refuses QPU mailbox calls."""


class PiPermissionError(PiError):
    """A device file (/dev/vcio, /dev/mem) cannot be opened by this user."""


class MailboxError(PiError):
    """The firmware refused or garbled a mailbox property request. ``tag`` names the request."""

    def __init__(self, tag, message, fix=None):
        self.tag = tag
        super().__init__(f"mailbox {tag}: {message}", fix)


class PiOutOfMemory(PiError):
    """The firmware's GPU memory (the gpu_mem split) has no room for an allocation."""


class PiTimeout(PiError):
    """A launch did not end in time (a hung program): execute_qpu gave up, or the completed-
    program count of a direct launch did not reach the number of programs."""


class DirectLaunchError(PiError):
    """A direct V3D launch cannot start: the registers cannot be mapped, the V3D is busy with
    someone else's programs, or its request queue overflowed."""
