"""Argument checks shared by every layer of ``vc4nn.nn``: tensors, activations, padding, devices.

Every layer takes numpy arrays or device buffers (NHWC activations of shape (H, W, C), float32 by
default) and returns a numpy array when its input was a host array, a device buffer otherwise; an
``out=`` device buffer receives the result in place (the runtime's memory plan uses it). Errors
name the layer and the argument.
"""

import dataclasses
import numbers

import numpy as np

from asm.isa import NUM_QPUS

from ..device import Buffer, Device
from ..errors import Vc4nnError
from ..kernels.common import LAYOUTS
from ..linalg import DtypeError, ForeignBufferError, ShapeError
from .storage import DTYPE_OF_STORAGE, STORAGE_OF_DTYPE  # noqa: F401 (re-exported)

ACTIVATIONS = (None, "relu", "relu6")


class LayerArgumentError(Vc4nnError):
    """A layer argument of the right type with a value the layer cannot use."""


def check_activation(layer, activation):
    if activation not in ACTIVATIONS:
        raise LayerArgumentError(f"{layer}: activation={activation!r}; choose None, 'relu' or "
                                 f"'relu6'")
    return activation


def check_tensor(layer, name, x, ndim, dtype=np.float32):
    """``x`` as given, if it is a C-contiguous array of ``ndim`` dimensions and ``dtype``."""
    if not isinstance(x, np.ndarray):
        raise DtypeError(f"{layer}: {name} is a {type(x).__name__}; give a numpy array or a "
                         f"device buffer")
    if x.dtype != np.dtype(dtype):
        raise DtypeError(f"{layer}: {name} has dtype {x.dtype}; it must be {np.dtype(dtype)}")
    if x.ndim != ndim:
        raise ShapeError(f"{layer}: {name} has shape {x.shape} ({x.ndim} dimensions); it must "
                         f"have {ndim}")
    if 0 in x.shape:
        raise ShapeError(f"{layer}: {name} has shape {x.shape}, which is empty")
    if not x.flags.c_contiguous:
        raise ShapeError(f"{layer}: {name} is not C-contiguous; copy it with "
                         f"numpy.ascontiguousarray")
    return x




def check_layout(layer, name, layout):
    if layout not in LAYOUTS:
        choices = " or ".join(f"{n!r} ({', '.join(n.upper())})" for n in LAYOUTS)
        raise LayerArgumentError(f"{layer}: {name}={layout!r}; choose {choices}")
    return layout


def layout_shape(layout, h, w, c):
    """The shape of an (h, w, c) activation stored in ``layout``."""
    return (c, h, w) if layout == "chw" else (h, w, c)


def check_stored_tensor(layer, name, x, ndim):
    """(x, storage): ``x`` a float32 or float16 tensor (check_tensor's other rules)."""
    dtype = getattr(x, "dtype", None)
    if isinstance(x, np.ndarray) and dtype not in STORAGE_OF_DTYPE:
        raise DtypeError(f"{layer}: {name} has dtype {dtype}; it must be float32 or float16 "
                         f"(fp16 storage)")
    x = check_tensor(layer, name, x, ndim, dtype if dtype in STORAGE_OF_DTYPE else np.float32)
    return x, STORAGE_OF_DTYPE[x.dtype]


def result_storage(layer, dtype, out, default):
    """The storage of a layer's result: ``out``'s dtype if ``out`` is given, else ``dtype``
    (np.float32 / np.float16 or "fp32" / "fp16"), else ``default`` (the input's)."""
    if dtype is not None:
        try:
            storage = dtype if dtype in DTYPE_OF_STORAGE else STORAGE_OF_DTYPE.get(np.dtype(dtype))
        except TypeError:
            storage = None
        if storage is None:
            raise DtypeError(f"{layer}: dtype={dtype!r}; give float32 or float16 (or 'fp32', "
                             f"'fp16')")
        if out is not None and STORAGE_OF_DTYPE.get(out.dtype) != storage:
            raise DtypeError(f"{layer}: dtype={dtype!r} but out has dtype {out.dtype}; give one "
                             f"of them")
        return storage
    if out is not None and getattr(out, "dtype", None) in STORAGE_OF_DTYPE:
        return STORAGE_OF_DTYPE[out.dtype]
    return default


# The largest values of the integer arguments the layers share. MobileNets use strides 1 and 2;
# the window kernels' plans walk every input row a stride skips, so a stride of 2^20 would plan
# for minutes, and any stride past the input's size gives the same one-pixel output.
MAX_STRIDE = 64
LIMITS = {"num_qpus": NUM_QPUS, "stride": MAX_STRIDE}


def check_int(layer, name, value, low=1):
    """``value`` as an int in low..LIMITS[name] (no upper limit for other names)."""
    high = LIMITS.get(name)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low or \
            (high is not None and value > high):
        within = f">= {low}" if high is None else f"in {low}..{high}"
        raise LayerArgumentError(f"{layer}: {name} must be an int {within}, got {value!r}")
    return int(value)


def check_tiling(layer, tiling, plan, first):
    """``tiling`` (None or a dict of overrides of ``plan``'s fields from ``first`` on: the
    kernel plan's tiling options) as a dict."""
    if tiling is None:
        return {}
    names = [field.name for field in dataclasses.fields(plan)]
    options = names[names.index(first):]
    if not isinstance(tiling, dict):
        raise LayerArgumentError(f"{layer}: tiling must be a dict of {', '.join(options)}; got "
                                 f"{type(tiling).__name__}")
    unknown = sorted(str(key) for key in tiling if key not in options)
    if unknown:
        raise LayerArgumentError(f"{layer}: tiling has no option {', '.join(unknown)}; its "
                                 f"options: {', '.join(options)}")
    return tiling


def resolve_padding(layer, padding, in_h, in_w, kernel_h, kernel_w, stride_h, stride_w):
    """((top, bottom, left, right), (out_h, out_w)) for "same" (TensorFlow's rule: the extra row
    and column go to the bottom and right), "valid", or explicit (top, bottom, left, right)."""
    if isinstance(padding, str):
        if padding == "valid":
            pads = (0, 0, 0, 0)
        elif padding == "same":
            out_h, out_w = -(-in_h // stride_h), -(-in_w // stride_w)
            total_h = max((out_h - 1) * stride_h + kernel_h - in_h, 0)
            total_w = max((out_w - 1) * stride_w + kernel_w - in_w, 0)
            pads = (total_h // 2, total_h - total_h // 2, total_w // 2, total_w - total_w // 2)
        else:
            raise LayerArgumentError(f"{layer}: padding={padding!r}; give 'same', 'valid' or "
                                     f"(top, bottom, left, right)")
    else:
        try:
            pads = tuple(padding)
        except TypeError:
            raise LayerArgumentError(f"{layer}: padding={padding!r}; give 'same', 'valid' or "
                                     f"(top, bottom, left, right)") from None
        if len(pads) != 4 or any(isinstance(p, bool) or not isinstance(p, numbers.Integral)
                                 or p < 0 for p in pads):
            raise LayerArgumentError(f"{layer}: padding={padding!r} must be four ints >= 0 "
                                     f"(top, bottom, left, right)")
        pads = tuple(int(p) for p in pads)
        if max(pads[0], pads[1]) >= kernel_h or max(pads[2], pads[3]) >= kernel_w:
            raise LayerArgumentError(f"{layer}: padding={pads} is as wide as the "
                                     f"{kernel_h}x{kernel_w} kernel; a window would hold only "
                                     f"padding")
    out_h = (in_h + pads[0] + pads[1] - kernel_h) // stride_h + 1
    out_w = (in_w + pads[2] + pads[3] - kernel_w) // stride_w + 1
    if out_h < 1 or out_w < 1:
        raise ShapeError(f"{layer}: a {in_h}x{in_w} input with padding {pads} is smaller than the "
                         f"{kernel_h}x{kernel_w} window")
    return pads, (out_h, out_w)


def pick_device(device, *arrays):
    """The device given, else the device of the first device buffer, else a new default one."""
    if device is not None:
        if not isinstance(device, Device):
            raise LayerArgumentError(f"device must be a device from vc4nn.open_device(), got "
                                     f"{device!r}"[:200])
        return device
    for x in arrays:
        if isinstance(x, Buffer) and x.device is not None:
            return x.device
    from .. import open_device      # the package imports this module; resolve at call time
    return open_device()


def check_on_device(layer, name, x, device):
    if isinstance(x, Buffer) and x.device is not None and not device.owns(x):
        raise ForeignBufferError(f"{layer}: {name} is a buffer of {x.device.name!r}, not of the "
                                 f"device the call runs on ({device.name!r})")


def check_out(layer, out, shape, dtype, device):
    """``out`` if it is a device buffer of ``device`` with the result's shape and dtype."""
    if out is None:
        return None
    if not isinstance(out, Buffer) or not device.owns(out):
        raise LayerArgumentError(f"{layer}: out must be a device buffer of the device the call "
                                 f"runs on")
    if tuple(out.shape) != tuple(shape) or out.dtype != np.dtype(dtype):
        raise ShapeError(f"{layer}: out has shape {out.shape} and dtype {out.dtype}; the result "
                         f"is {tuple(shape)} {np.dtype(dtype)}")
    if not out.flags.c_contiguous:
        raise ShapeError(f"{layer}: out is not C-contiguous")
    return out

