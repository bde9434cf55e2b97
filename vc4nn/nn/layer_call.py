"""One layer call's device side: inputs copied in, the result's buffer, temporaries freed.

Every layer of ``vc4nn.nn`` runs the same way: host arrays are copied into device buffers for
the call, device buffers are used in place, the result lands in ``out=`` or a new buffer, and the
call returns a host array when the input activation was a host array (contract: NN-CONTRACT.md).
"""

import contextlib

import numpy as np

from ..device import Buffer
from ..errors import DeviceError

# Every layout in a weight arena starts on a 64-byte boundary: one TMU cache line, a whole number
# of 16-lane float32 rows (as the activation arena, vc4nn/runtime/planner.py).
WEIGHT_ALIGN = 64


# Device memory a caller lends to layer calls for their workspaces (see ``scratch``): None, or
# [uint8 device buffer, bytes used].
_scratch = None


@contextlib.contextmanager
def scratch(region):
    """Inside the block, layer calls take their workspaces from ``region`` (a uint8 device
    buffer, e.g. the part of an activation arena free at this layer; None: their own
    allocations). A workspace that does not fit gets its own allocation."""
    global _scratch
    before, _scratch = _scratch, None if region is None else [region, 0]
    try:
        yield _scratch          # [region, bytes the block's calls took] (None: none lent)
    finally:
        _scratch = before


# Zero-filled device memory a caller lends to layer calls for the buffers their kernels only
# read (see ``shared_zeros``): None, or a SharedZeros.
_zeros = None


@contextlib.contextmanager
def shared_zeros(pool):
    """Inside the block, layer calls take their read-only zero buffers (``LayerCall.zeros``)
    from ``pool`` (a SharedZeros; None: their own allocations)."""
    global _zeros
    before, _zeros = _zeros, pool
    try:
        yield
    finally:
        _zeros = before


class SharedZeros:
    """Zeros on the device that every layer of a session reads in common: the zero rows the
    sliding-window and conv2d kernels read in place of rows outside the image. No kernel writes
    them, so one buffer serves every layer; a request larger than every buffer so far gets a
    new one (the layers recorded earlier keep reading theirs), so the pool holds the largest
    request when the largest layer comes first, as in MobileNet's stem."""

    def __init__(self, device):
        self.device = device
        self.buffers = []           # uint8 device buffers, each zero-filled
        self.taken = []             # the buffers handed out since the caller last emptied it

    def take(self, nbytes):
        """A uint8 buffer of at least ``nbytes`` zero bytes."""
        fits = [buf for buf in self.buffers if buf.nbytes >= nbytes]
        if not fits:
            self.buffers.append(self.device.alloc(_aligned(max(nbytes, 1)), np.uint8))
            fits = self.buffers[-1:]
        self.taken.append(fits[0])
        return fits[0]

    def largest(self):
        return max(self.buffers, key=lambda buf: buf.nbytes, default=None)

    def keep_largest(self):
        """Free every buffer but the largest (their readers must be called again)."""
        keep = self.largest()
        for buf in self.buffers:
            if buf is not keep:
                self.device.free(buf)
        self.buffers = [] if keep is None else [keep]

    @property
    def nbytes(self):
        return sum(int(buf.allocation.size) for buf in self.buffers)

    def free(self):
        buffers, self.buffers = self.buffers, []
        for buf in buffers:
            self.device.free(buf)


class LayerCall:
    """Use as a context manager: everything it allocated is freed on exit."""

    def __init__(self, device, host_result):
        self.device = device
        self.host_result = host_result      # the input activation was a host array
        self.temporaries = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for buf in self.temporaries:
            self.device.free(buf)
        return False

    def on_device(self, x, dtype=np.float32):
        """``x`` as a buffer of this call's device (a host array is copied in for the call)."""
        if x is None:
            return None
        if isinstance(x, Buffer) and self.device.owns(x):
            return x
        buf = self.device.array(np.ascontiguousarray(x, dtype=dtype))
        self.temporaries.append(buf)
        return buf

    def temporary(self, shape, dtype=np.float32):
        """A zero-filled buffer for this call."""
        buf = self.device.alloc(shape, dtype)
        self.temporaries.append(buf)
        return buf

    def zeros(self, shape, dtype=np.float32):
        """A zero-filled buffer this call's kernels only read: from the ``shared_zeros`` pool
        when one is lent (every layer reads the same bytes), else a temporary."""
        if _zeros is None or _zeros.device is not self.device:
            return self.temporary(shape, dtype)
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape)) * dtype.itemsize
        return _zeros.take(nbytes)[:nbytes].view(dtype).reshape(shape)

    def workspace(self, shape, dtype=np.float32):
        """A buffer for this call that its kernels write before they read it (so not zeroed):
        taken from the ``scratch`` region when one is lent and it fits there."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape)) * dtype.itemsize
        if _scratch is not None:
            region, used = _scratch
            if region.device is self.device and used + nbytes <= region.nbytes:
                _scratch[1] = _aligned(used + nbytes)
                return region[used:used + nbytes].view(dtype).reshape(shape)
        return self.temporary(shape, dtype)

    def result_buffer(self, out, shape, dtype=np.float32):
        """``out`` if given, else a new buffer (a temporary when the result goes to the host)."""
        if out is not None:
            return out
        buf = self.device.alloc(shape, dtype)
        if self.host_result:
            self.temporaries.append(buf)
        return buf

    def finish(self, y, out, run, return_run):
        """The layer's return value: ``out``, a host copy, or the device buffer."""
        if out is None and self.host_result:
            y = np.array(y)
        return (y, run) if return_run else y


def chain(runs):
    """The RunResult of launches run one after the other (None entries skipped)."""
    runs = [run for run in runs if run is not None]
    total = runs[0]
    for run in runs[1:]:
        total = total.followed_by(run)
    return total


def upload(device, data, placement=None):
    """``data`` (a kernel layout) in device memory: a buffer of its own, or placed in
    ``placement`` (a WeightArena, or WeightLayouts while an arena is being sized)."""
    if placement is None:
        return device.array(data)
    if not isinstance(placement, (WeightArena, WeightLayouts)):
        raise DeviceError(f"placement must be a WeightArena (or None), got "
                          f"{type(placement).__name__}")
    return placement.array(data)


def release(device, buf, placement):
    """Free a buffer made by ``upload``; one placed in an arena goes with the arena."""
    if buf is not None and placement is None:
        device.free(buf)


def _aligned(nbytes):
    return -(-nbytes // WEIGHT_ALIGN) * WEIGHT_ALIGN


class WeightLayouts:
    """The first pass of filling a WeightArena: layouts stay in host memory and are counted, so
    that the arena is one allocation of the right size."""

    def __init__(self):
        self.nbytes = 0

    def array(self, data):
        data = np.array(data)
        self.nbytes += _aligned(data.nbytes)
        return data


class WeightArena:
    """One device allocation holding many layers' weights in their kernels' layouts.

    Give it as ``placement=`` to the ``prepare_*`` functions, in the order of the sizing pass
    (WeightLayouts): each layout lands at the next 64-byte boundary. Prepared objects placed
    here free nothing themselves; ``free()`` gives the whole arena back.
    """

    def __init__(self, device, nbytes):
        self.device = device
        self.buffer = device.alloc(max(int(nbytes), 1), np.uint8)
        self.used = 0

    @property
    def nbytes(self):
        return 0 if self.buffer is None else int(self.buffer.nbytes)

    def array(self, data):
        data = np.asarray(data)
        end = self.used + data.nbytes
        if end > self.nbytes:
            raise DeviceError(f"weight arena of {self.nbytes} bytes is full: a {data.shape} "
                              f"{data.dtype} layout needs bytes {self.used}..{end}")
        view = Buffer(self.device, self.buffer.allocation, data.shape, data.dtype, self.used)
        view[...] = data
        self.used = _aligned(end)
        return view

    def free(self):
        if self.buffer is not None:
            self.device.free(self.buffer)
            self.buffer = None


class PreparedWeights:
    """A layer's weights (and bias) in its kernel's layout in device memory, laid out once
    (in buffers of their own, or in ``placement``, a WeightArena)."""

    def __init__(self, device, weights, bias, placement=None):
        self.device = device
        self.weights = weights
        self.bias = bias
        self.placement = placement

    @property
    def nbytes(self):
        return self.weights.nbytes + (self.bias.nbytes if self.bias is not None else 0)

    def free(self):
        for buf in (self.weights, self.bias):
            release(self.device, buf, self.placement)
