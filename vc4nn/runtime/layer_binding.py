"""From a graph node to the call of its layer kernel (``vc4nn.nn``) on a session's arena."""

import functools

import numpy as np

from . import precision as precision_choice
from .errors import UnsupportedModelError, unsupported


def layer_call(session, node, placement):
    """The call that runs ``node``'s layer on ``session``'s device, reading and writing its
    arena, with its weights laid out (``vc4nn.nn.prepare_*``) into ``placement``."""
    nn, g, a = session.nn, session.graph, node.attrs
    common = dict(device=session.device, num_qpus=session.num_qpus, return_run=True)
    if node.op == "reshape":
        return None
    out = session._view(node.outputs[0])
    x = session._view(node.inputs[0])
    storage = session.storage.weights(node)
    w = precision_choice.weights_for(
        g.const(node.inputs[1]) if len(node.inputs) > 1 else None, storage)
    bias = precision_choice.weights_for(
        g.const(node.inputs[2]) if len(node.inputs) > 2 else None, storage)
    if node.op in ("conv2d", "depthwise", "avg_pool"):
        stride = _square(g, node, a["stride"], "stride")
        padding = tuple(a["pads"])
    if node.op == "conv2d":
        frame = session._frame
        x_layout = "hwc"
        if node is frame.stem:          # it reads the padded input frame (input_frame.py)
            x, padding, x_layout = frame.view, (0, 0, 0, 0), frame.layout
            if frame.folded:
                w, bias = _fold_normalization(w, bias, session._normalization)
        prepared = _prepare(session, placement, nn.prepare_conv2d, w, bias)
        return functools.partial(nn.conv2d, x, prepared, stride=stride, padding=padding,
                                 activation=a.get("activation"), out=out, x_layout=x_layout,
                                 **common)
    if node.op == "depthwise":
        prepared = _prepare(session, placement, nn.prepare_depthwise, w, bias)
        return functools.partial(nn.depthwise, x, prepared, stride=stride, padding=padding,
                                 activation=a.get("activation"), out=out,
                                 out_layout=session._layout(node.outputs[0]), **common)
    if node.op == "pointwise":
        prepared = _prepare(session, placement, nn.prepare_pointwise, w, bias)
        residual = session._view(node.inputs[3]) if len(node.inputs) > 3 else None
        return functools.partial(nn.pointwise, x, prepared, activation=a.get("activation"),
                                 residual=residual, out=out,
                                 x_layout=session._layout(node.inputs[0]), **common)
    if node.op == "fully_connected":
        prepared = _prepare(session, placement, nn.prepare_fully_connected, w, bias)
        return functools.partial(nn.fully_connected, x.reshape(-1), prepared,
                                 activation=a.get("activation"), out=out.reshape(-1),
                                 **common)
    if node.op == "add":
        return functools.partial(nn.add, x, session._view(node.inputs[1]),
                                 activation=a.get("activation"), out=out, **common)
    if node.op == "global_avg_pool":
        return functools.partial(nn.global_avg_pool, x, out=out.reshape(-1), **common)
    if node.op == "avg_pool":
        if a.get("count_include_pad") and any(padding):
            raise unsupported(g, node, "counting padded zeros (count_include_pad=1) is not "
                                       "supported")
        size = _square(g, node, a["size"], "window")
        return functools.partial(nn.avg_pool, x, size, stride, padding=padding, out=out,
                                 **common)
    raise UnsupportedModelError(f"no kernel for IR op {node.op}", g.path, node.name)


def _prepare(session, placement, fn, *args):
    return fn(*args, device=session.device, placement=placement)


def _square(graph, node, pair, what):
    if pair[0] != pair[1]:
        raise unsupported(graph, node, f"{what} {tuple(pair)} is not square; the kernels take "
                                       f"one value")
    return int(pair[0])


def _fold_normalization(w, bias, norm):
    """Weights and bias of conv((pixel - mean) / std) as a conv of the pixels."""
    w = w.astype(np.float64)
    mean = np.asarray(norm.mean, np.float64)
    std = np.asarray(norm.std, np.float64)
    folded = w / std[None, None, :, None]
    b = (np.zeros(w.shape[3]) if bias is None else bias.astype(np.float64)) \
        - np.einsum("ijco,c->o", folded, mean)
    return folded.astype(np.float32), b.astype(np.float32)
