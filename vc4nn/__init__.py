"""vc4nn: QPU programs on the Raspberry Pi's VideoCore IV, and what is built on them."""

import os

from .errors import DeviceError

DEVICE_ENV = "VC4NN_DEVICE"
DEVICES = ("emulator", "pi")


def open_device(name=None, **options):
    """A device by name: "emulator" (the default) or "pi"; without a name, $VC4NN_DEVICE.

    ``options`` go to the backend (EmulatorDevice: board, checks, seed, max_instructions).
    """
    name = name or os.environ.get(DEVICE_ENV) or "emulator"
    if name == "emulator":
        from .emulator import EmulatorDevice
        return EmulatorDevice(**options)
    if name == "pi":
        from .pi import PiDevice
        return PiDevice(**options)
    raise DeviceError(f"unknown device {name!r}; choose one of {', '.join(DEVICES)} "
                      f"(argument or ${DEVICE_ENV})")


from .linalg import sgemm  # noqa: E402,F401
from .runtime import InferenceSession  # noqa: E402,F401
