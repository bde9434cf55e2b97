"""Shape inference on the IR: every value's (H, W, C) or (C,) shape from the input's, with each
node's constants checked against it. TF-style "same" padding becomes explicit pads here."""

import numpy as np

from ..nn.layer_args import resolve_padding
from ..errors import Vc4nnError
from .errors import ModelError, UnsupportedModelError, unsupported


def input_shape(graph_input):
    """The IR shape (H, W, C) of a file input given with batch in its layout."""
    if graph_input.layout == "NCHW":
        _, c, h, w = graph_input.shape
    else:
        _, h, w, c = graph_input.shape
    return (h, w, c)


def infer_shapes(graph):
    shapes = {i.name: input_shape(i) for i in graph.inputs}
    for node in graph.nodes:
        x = shapes.get(node.inputs[0]) if node.inputs else None
        try:
            out = _RULES[node.op](graph, node, x, shapes)
        except ModelError:
            raise
        except Vc4nnError as error:      # resolve_padding's window/padding checks
            raise UnsupportedModelError(str(error), graph.path, node.name) from None
        for name in node.outputs:
            shapes[name] = tuple(int(d) for d in out)
    graph.shapes = shapes
    return shapes


def _need_spatial(graph, node, x):
    if x is None or len(x) != 3:
        raise unsupported(graph, node, f"input shape {x}: expected a feature map (H, W, C)")


def _window(graph, node, x, kh, kw):
    pads = node.attrs["pads"]
    sh, sw = node.attrs["stride"]
    if pads == "same_lower":          # ONNX SAME_LOWER: the extra row/column at the top/left
        (t, b, l, r), _ = resolve_padding(node.name, "same", x[0], x[1], kh, kw, sh, sw)
        pads = (b, t, r, l)
    pads, (oh, ow) = resolve_padding(node.name, pads, x[0], x[1], kh, kw, sh, sw)
    node.attrs["pads"] = pads
    return oh, ow


def _conv(graph, node, x, shapes):
    _need_spatial(graph, node, x)
    w = graph.constants[node.inputs[1]]
    if node.op == "pointwise":
        kh = kw = 1
        cin_group, cout, group = w.shape[0], w.shape[1], 1
    elif node.op == "depthwise":
        kh, kw, cout = w.shape
        cin_group, group = 1, x[2]
    else:
        kh, kw, cin_group, cout = w.shape
        group = node.attrs.get("group", 1)
    if cin_group * group != x[2] or cout % group:
        raise unsupported(graph, node, f"weights {w.shape} (group {group}) do not fit an input "
                                       f"with {x[2]} channels")
    if node.op == "pointwise":
        oh, ow = x[0], x[1]
    else:
        if tuple(node.attrs.get("dilation", (1, 1))) != (1, 1):
            raise unsupported(graph, node, f"dilation {node.attrs['dilation']} is not supported")
        oh, ow = _window(graph, node, x, kh, kw)
    _check_bias(graph, node, cout)
    return (oh, ow, cout)


def _check_bias(graph, node, cout):
    b = graph.const(node.inputs[2]) if len(node.inputs) > 2 else None
    if b is not None and b.shape != (cout,):
        raise unsupported(graph, node, f"bias of shape {b.shape} for {cout} outputs")


def _same(graph, node, x, shapes):
    """The input's shape (a bias_add's constant is checked where it is folded,
    passes.fold_bias_adds)."""
    return x


def _add(graph, node, x, shapes):
    y = shapes.get(node.inputs[1])
    if x != y:
        raise unsupported(graph, node, f"operands of shapes {x} and {y}; broadcasting is not "
                                       "supported")
    return x


def _channels(graph, node, x, shapes):
    c = graph.constants[node.inputs[1]].size
    if x[-1] != c:
        raise unsupported(graph, node, f"{c} per-channel values for {x[-1]} channels")
    return x


def _avg_pool(graph, node, x, shapes):
    _need_spatial(graph, node, x)
    oh, ow = _window(graph, node, x, *node.attrs["size"])
    return (oh, ow, x[2])


def _global_avg_pool(graph, node, x, shapes):
    _need_spatial(graph, node, x)
    return (1, 1, x[2]) if node.attrs.get("keepdims") else (x[2],)


def _fully_connected(graph, node, x, shapes):
    w = graph.constants[node.inputs[1]]
    size = int(np.prod(x))
    if len(x) == 3 and (x[0], x[1]) != (1, 1):
        raise unsupported(graph, node, f"input of shape {x}: a fully connected layer takes a "
                                       "vector")
    if w.shape[0] != size:
        raise unsupported(graph, node, f"weights {w.shape} for an input of {size} values")
    _check_bias(graph, node, w.shape[1])
    return (w.shape[1],)


def _reshape(graph, node, x, shapes):
    size = int(np.prod(x))
    if "onnx_shape" in node.attrs:       # NCHW order: only reshapes that keep NHWC order
        target = list(node.attrs["onnx_shape"])
        batched = (1,) + ((x[2], x[0], x[1]) if len(x) == 3 else tuple(x))
        for i, d in enumerate(target):
            if d == 0:
                target[i] = batched[i]
        if -1 in target:
            known = int(np.prod([d for d in target if d != -1]))
            target[target.index(-1)] = size // max(known, 1)
        if int(np.prod(target)) != size or target[0] != 1:
            raise unsupported(graph, node, f"cannot reshape {batched} to {tuple(target)}")
        if len(target) == 4:
            target = [target[2], target[3], target[1]]
        else:
            target = target[1:]
        spatial = len(x) == 3 and x[0] * x[1] > 1
        if spatial and tuple(target) != tuple(x):
            if len(target) != 1:
                raise unsupported(graph, node, f"reshaping a {x[2]}x{x[0]}x{x[1]} (CxHxW) map to "
                                               f"{tuple(target)} reorders it between NCHW and "
                                               "NHWC; flattening to a vector (for a fully "
                                               "connected layer) and reshapes of 1x1 maps are "
                                               "supported")
            node.attrs["chw_order"] = tuple(x)     # NCHW flattening order; passes.py fixes it
    else:
        target = list(node.attrs["shape"])
        if -1 in target:
            known = int(np.prod([d for d in target if d != -1]))
            target[target.index(-1)] = size // max(known, 1)
        if int(np.prod(target)) != size:
            raise unsupported(graph, node, f"cannot reshape {x} to {tuple(target)}")
    return tuple(target)


def _pad(graph, node, x, shapes):
    _need_spatial(graph, node, x)
    t, b, l, r = node.attrs["pads"]
    return (x[0] + t + b, x[1] + l + r, x[2])


_RULES = {"conv": _conv, "conv2d": _conv, "depthwise": _conv, "pointwise": _conv,
          "batch_norm": _channels, "bias_add": _same, "activation": _same, "add": _add,
          "avg_pool": _avg_pool, "global_avg_pool": _global_avg_pool,
          "fully_connected": _fully_connected, "reshape": _reshape, "pad": _pad,
          "softmax": _same, "identity": _same}
