"""One layer call's device side: inputs copied in, the result's buffer, temporaries freed.

Every layer of ``vc4nn.nn`` runs the same way: host arrays are copied into device buffers for
the call, device buffers are used in place, the result lands in ``out=`` or a new buffer, and the
call returns a host array when the input activation was a host array (contract: NN-CONTRACT.md).
"""

import numpy as np

from ..device import Buffer


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
        buf = self.device.alloc(shape, dtype)
        self.temporaries.append(buf)
        return buf

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


class PreparedWeights:
    """A layer's weights (and bias) in its kernel's layout in device memory, laid out once."""

    def __init__(self, device, weights, bias):
        self.device = device
        self.weights = weights
        self.bias = bias

    @property
    def nbytes(self):
        return self.weights.nbytes + (self.bias.nbytes if self.bias is not None else 0)

    def free(self):
        for buf in (self.weights, self.bias):
            if buf is not None:
                self.device.free(buf)
