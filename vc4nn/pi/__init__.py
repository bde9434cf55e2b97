"""The Raspberry Pi backend: QPU programs on a real Pi Zero/1/2/3 through the firmware mailbox."""

from .backend import PiDevice
from .doctor import doctor_main
from .errors import (KmsConflictError, MailboxError, NotAPiError, PiError, PiOutOfMemory,
                     PiPermissionError, PiTimeout, UnsupportedBoardError)

__all__ = ["PiDevice", "doctor_main", "PiError", "NotAPiError", "UnsupportedBoardError",
           "KmsConflictError", "PiPermissionError", "MailboxError", "PiOutOfMemory", "PiTimeout"]
