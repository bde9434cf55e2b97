"""Linear algebra on the QPUs: the user-facing API of the kernels in ``vc4nn.kernels``."""

import dataclasses
import numbers

import numpy as np

from .device import Buffer, Device, qpu_count, streams_in_buffer
from .errors import Vc4nnError
from .kernels import sgemm as _sgemm
from .kernels import sgemm_panel as _panel
from .kernels import transpose as _transpose


class ShapeError(Vc4nnError):
    """Operands whose shapes do not fit together."""


class DtypeError(Vc4nnError):
    """Operands that are not float32."""


class ForeignBufferError(Vc4nnError):
    """A device buffer that belongs to another device than the one the call runs on."""


def sgemm(A, B, C=None, alpha=1.0, beta=0.0, trans_a=False, trans_b=False, device=None,
          num_qpus=12, return_run=False):
    """``C = alpha * op(A) @ op(B) + beta * C`` in float32 on the QPUs; op(X) is X or X.T.

    A, B, C: 2-D float32 arrays, row-major (C-contiguous): numpy arrays or device buffers.
    device: where to run; by default the device of the first buffer given, else
        ``vc4nn.open_device()``. Buffers of another device are an error (no silent copies).
    C: updated in place and returned. If None, a new result is returned: a device buffer when A
        and B are device buffers, else a numpy array. With beta == 0, C is never read.
    num_qpus: 1..12 QPUs share the work.
    return_run: also return the launch's RunResult (cycle-model figures in the emulator):
        ``(C, run)``.
    """
    for name, flag in (("trans_a", trans_a), ("trans_b", trans_b)):
        if not isinstance(flag, (bool, np.bool_)) and flag not in (0, 1):
            raise Vc4nnError(f"sgemm: {name} must be True or False, got {flag!r}")
    trans_a, trans_b = bool(trans_a), bool(trans_b)
    operands = {"A": A, "B": B, "C": C}
    device = _pick_device(device, operands)
    for name, x in operands.items():
        if x is not None or name != "C":
            _check_operand(name, x, device)
    if C is None and beta != 0:
        raise ShapeError(f"sgemm: beta={beta} but no C was given to scale")
    for name, value in (("alpha", alpha), ("beta", beta)):
        if not isinstance(value, numbers.Real) or isinstance(value, bool) or not np.isfinite(value):
            raise Vc4nnError(f"sgemm: {name} must be a finite real number, got {value!r}")
    m, k = A.shape[::-1] if trans_a else A.shape
    kb, n = B.shape[::-1] if trans_b else B.shape
    if k != kb:
        raise ShapeError(f"sgemm: op(A) is {m}x{k} but op(B) is {kb}x{n}: inner dimensions differ "
                         f"(trans_a={trans_a}, trans_b={trans_b})")
    if min(m, n, k) < 1:
        raise ShapeError(f"sgemm: op(A) is {m}x{k} and op(B) is {kb}x{n}; M, N, K must be >= 1")
    if C is not None and C.shape != (m, n):
        raise ShapeError(f"sgemm: C is {C.shape[0]}x{C.shape[1]} but op(A) @ op(B) is {m}x{n}")
    num_qpus = qpu_count(num_qpus)

    # Which kernel (docs/sgemm.md, "Which kernel runs"): when op(B) is B (NN, TN), B is the
    # operand all QPUs share and the panel kernel reads it once; otherwise the general kernel.
    transposed_a = None
    if not trans_b:
        plan = _panel.PanelPlan(m, n, k, trans_a, int(num_qpus), alpha == 1, beta == 0)
        if _panel.transpose_a_first(plan):      # A^T on the GPU, then the TN path reads it
            transposed_a = _transpose.TransposePlan(m, k, int(num_qpus))
            plan = dataclasses.replace(plan, trans_a=True)
        program = _panel.program_for(plan)
    else:
        plan = _sgemm.SgemmPlan(m, n, k, trans_a, trans_b, int(num_qpus), alpha == 1, beta == 0)
        program = _sgemm.program_for(plan)
    temporaries = []
    try:
        a_buf = _on_device(device, A, temporaries)
        b_buf = _on_device(device, B, temporaries)
        if C is not None:
            c_buf = _on_device(device, C, temporaries, copy=beta != 0)
        else:
            c_buf = device.alloc((m, n), np.float32)
            return_host = not (isinstance(A, Buffer) and isinstance(B, Buffer))
            if return_host:
                temporaries.append(c_buf)
        first_run = None
        if transposed_a:
            first_run, a_buf = _transposed(device, transposed_a, a_buf, temporaries)
        if isinstance(plan, _panel.PanelPlan):
            addresses = (a_buf.address, b_buf.address, c_buf.address)
            uniforms = _panel.uniform_streams(plan, addresses, alpha, beta)
        else:
            ws = device.alloc(max(plan.workspace_words, 1), np.float32)
            temporaries.append(ws)
            addresses = (a_buf.address, b_buf.address, c_buf.address, ws.address)
            uniforms = _uniform_buffers(device, plan, addresses, alpha, beta, temporaries)
        run = device.execute(program, plan.num_qpus, uniforms)
        if first_run is not None:
            run = first_run.followed_by(run)
        if C is None:
            C = np.array(c_buf) if return_host else c_buf
        elif c_buf is not C:
            C[...] = c_buf
        return (C, run) if return_run else C
    finally:
        for buf in temporaries:
            device.free(buf)


def _transposed(device, plan, x_buf, temporaries):
    """(RunResult, buffer holding X^T): X (plan.rows x plan.k) transposed on the QPUs."""
    out = device.alloc((plan.k, plan.rows), np.float32)
    temporaries.append(out)
    run = device.execute(_transpose.program_for(plan), plan.qpus,
                         plan.uniform_streams(x_buf.address, out.address))
    return run, out


def _pick_device(device, operands):
    if device is not None:
        if not isinstance(device, Device):
            raise Vc4nnError(f"sgemm: device must be a vc4nn device (vc4nn.open_device()), got "
                             f"{device!r}")
        return device
    for x in operands.values():
        if isinstance(x, Buffer) and x.device is not None:
            return x.device
    from . import open_device       # the package imports this module; resolve at call time
    return open_device()


def _check_operand(name, x, device):
    if not isinstance(x, np.ndarray):
        raise DtypeError(f"sgemm: {name} is a {type(x).__name__}; give a float32 numpy array or "
                         f"device buffer")
    if x.dtype != np.float32:
        raise DtypeError(f"sgemm: {name} has dtype {x.dtype}; sgemm takes float32 "
                         f"(convert with {name}.astype(numpy.float32))")
    if x.ndim != 2:
        raise ShapeError(f"sgemm: {name} has {x.ndim} dimensions (shape {x.shape}); it must be a matrix")
    if not x.flags.c_contiguous:
        raise ShapeError(f"sgemm: {name} is not row-major contiguous; pass trans_a/trans_b instead "
                         f"of a transposed view, or copy it with numpy.ascontiguousarray")
    if isinstance(x, Buffer) and x.device is not None and not device.owns(x):
        raise ForeignBufferError(f"sgemm: {name} is a buffer of {x.device.name!r}, not of the "
                                 f"device the call runs on ({device.name!r})")


def _on_device(device, x, temporaries, copy=True):
    if isinstance(x, Buffer) and device.owns(x):
        return x
    buf = device.array(x) if copy else device.alloc(x.shape, np.float32)
    temporaries.append(buf)
    return buf


def _uniform_buffers(device, plan, addresses, alpha, beta, temporaries):
    """Every QPU's uniform stream in one device buffer; records hold addresses inside it."""
    def alloc(words):
        buf = device.alloc(words, np.uint32)
        temporaries.append(buf)
        return buf
    return streams_in_buffer(alloc, plan.num_qpus,
                             lambda bases: _sgemm.uniform_streams(plan, addresses, alpha, beta,
                                                                  bases))
