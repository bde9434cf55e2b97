"""Typed errors of vc4nn. Each names where the problem is (QPU, PC, unit, address, file)."""


class Vc4nnError(Exception):
    """Base of every error raised by vc4nn."""


class DeviceError(Vc4nnError):
    """A device call was given something it cannot use (bad buffer, shape, argument)."""


class DeviceMemoryError(DeviceError, MemoryError):
    """The device has no room for an allocation (also a MemoryError)."""
