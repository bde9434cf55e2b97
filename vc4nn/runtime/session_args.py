"""The checks of InferenceSession's options that are not about the model: each wrong value is a
typed error naming the option (a string where a bool belongs would otherwise be read as True,
a NaN memory budget as no budget)."""

import math
import os
import numbers

import numpy as np

from ..device import Device
from ..errors import DeviceError
from .errors import InputError
from .image import check_image_input


def check_session_options(path, device, image_input, progress, replay, memory_budget,
                          calibration, group_launches):
    if not isinstance(path, (str, os.PathLike)):
        raise InputError(f"path must be the name of a .tflite or .onnx file, got "
                         f"{type(path).__name__}")
    check_image_input(image_input)
    if device is not None and not isinstance(device, Device):
        raise DeviceError(f"device must be a device from vc4nn.open_device() (or None), got "
                          f"{device!r}"[:200])
    for name, value in (("progress", progress), ("replay", replay),
                        ("group_launches", group_launches)):
        if not (value is None and name == "progress") and not isinstance(value, bool):
            raise InputError(f"{name} must be True or False{' (or None)' * (value is None)}, "
                             f"got {value!r}"[:200])
    if memory_budget is not None and (
            isinstance(memory_budget, bool) or not isinstance(memory_budget, numbers.Real)
            or not 0 < memory_budget < math.inf):
        raise InputError(f"memory_budget must be a finite number of bytes > 0 (or None for no "
                         f"limit), got {memory_budget!r}"[:200])
    if calibration is not None and (
            isinstance(calibration, (str, bytes, np.ndarray)) or
            not all(isinstance(x, np.ndarray) for x in _items(calibration))):
        raise InputError("calibration must be a list of input arrays as run() takes them (or "
                         "None)")


def check_output_names(output_names):
    """``output_names`` (None or a list of names) as given."""
    if output_names is not None and (isinstance(output_names, (str, bytes)) or
                                     not isinstance(output_names, (list, tuple))):
        raise InputError(f"output_names must be a list of output names (or None), got "
                         f"{output_names!r}"[:200])
    return output_names


def _items(values):
    try:
        return list(values)
    except TypeError:
        return [None]
