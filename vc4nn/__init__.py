"""vc4nn: QPU programs on the Raspberry Pi's VideoCore IV, and what is built on them."""

import inspect
import os

from .errors import DeviceError

__version__ = "0.1.0"
DEVICE_ENV = "VC4NN_DEVICE"
DEVICES = ("emulator", "pi")


def resolve_device_name(name=None):
    """The backend ``open_device(name)`` opens: ``name``, else $VC4NN_DEVICE, else "emulator"."""
    if name is not None and not isinstance(name, str):
        raise DeviceError(f"device name must be a string ({' or '.join(DEVICES)}), got {name!r}")
    name = name or os.environ.get(DEVICE_ENV) or "emulator"
    if name not in DEVICES:
        raise DeviceError(f"unknown device {name!r}; choose one of {', '.join(DEVICES)} "
                          f"(argument or ${DEVICE_ENV})")
    return name


def open_device(name=None, **options):
    """A device by name: "emulator" (the default) or "pi"; without a name, $VC4NN_DEVICE.

    ``options`` go to the backend (EmulatorDevice: board, checks, seed, max_instructions,
    guard_bytes, progress, core, launch; PiDevice: launch; see their docstrings). Both take
    ``launch="mailbox"`` (the default) or ``"direct"``: how launches start (the firmware's
    execute_qpu or the V3D's registers; in the emulator, which launch overhead the cycle model
    charges). An option the backend does not take is a DeviceError listing the ones it does.
    """
    name = resolve_device_name(name)
    if name == "emulator":
        from .emulator import EmulatorDevice as backend
    else:
        from .pi import PiDevice as backend
    valid = [p for p in inspect.signature(backend).parameters.values()
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    unknown = sorted(set(options) - {p.name for p in valid})
    if unknown:
        raise DeviceError(f"open_device: {', '.join(map(repr, unknown))} is not an option of the "
                          f"{name} device; its options: "
                          f"{', '.join(p.name for p in valid) or 'none'}")
    return backend(**options)


from .linalg import sgemm  # noqa: E402,F401
from .runtime import InferenceSession  # noqa: E402,F401
