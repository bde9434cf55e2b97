"""The VideoCore IV V3D in software: QPUs, VPM/DMA, TMU, semaphores, cycle model, checks."""

from .checks import Checks
from .device import EmulatorDevice

__all__ = ["Checks", "EmulatorDevice"]
