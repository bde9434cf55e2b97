"""Graph passes: from what a file says to what the kernels run.

``optimize(graph)`` removes identities, folds constant bias adds and batch norms into the conv or
fully connected layer before them, fuses activations, folds zero padding into the next conv,
splits convs into conv2d / depthwise / pointwise, fuses residual adds into the pointwise layer
that produces one operand, and infers every shape. What cannot be folded or run is an
``UnsupportedModelError`` naming the node and the file.
"""

import numpy as np

from .errors import unsupported
from .ir import ACTIVATION_OPS, WEIGHTED_OPS
from .shapes import infer_shapes


def optimize(graph):
    remove_identities(graph)
    infer_shapes(graph)
    fold_flatten_orders(graph)
    fold_bias_adds(graph)
    fold_batch_norms(graph)
    fuse_activations(graph)
    fold_pads(graph)
    lower_convs(graph)
    fuse_residuals(graph)
    infer_shapes(graph)
    return graph


def sole_consumer(graph, name):
    """The only node reading ``name``, or None if several do or it is a graph output."""
    users = graph.consumers().get(name, [])
    return users[0] if len(users) == 1 and name not in graph.outputs else None


def _bypass(graph, node):
    """Remove a one-input node whose output equals its input."""
    graph.nodes.remove(node)
    src, dst = node.inputs[0], node.outputs[0]
    if dst in graph.outputs:               # keep the file's output name: rename the producer's
        producer = graph.producers().get(src)
        if producer is None or src in graph.outputs:
            raise unsupported(graph, node, "a graph output that is a graph input or another "
                                           "output")
        producer.outputs = [dst if o == src else o for o in producer.outputs]
        graph.rename(src, dst)
    else:
        graph.rename(dst, src)


def _absorb(graph, node, what):
    """The weighted node producing node's input, if node is its sole consumer."""
    producer = graph.producers().get(node.inputs[0])
    if producer is not None and producer.op in WEIGHTED_OPS and \
            sole_consumer(graph, node.inputs[0]) is node and producer.attrs.get("activation") \
            is None:
        return producer
    raise unsupported(graph, node, f"{what} that does not directly follow a convolution or fully "
                                   "connected layer (it cannot be folded into one)")


def _bias(graph, node, cout):
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        return graph.constants[node.inputs[2]].astype(np.float64)
    return np.zeros(cout)


def _set_bias(graph, node, bias):
    name = node.name + ":b"
    graph.constants[name] = bias.astype(np.float32)
    node.inputs = node.inputs[:2] + [name] + node.inputs[3:]


def remove_identities(graph):
    for node in [n for n in graph.nodes if n.op == "identity"]:
        _bypass(graph, node)


def fold_flatten_orders(graph):
    """An ONNX flatten of a C x H x W map lists values in NCHW order, the runtime's vector is in
    NHWC order: permute the rows of the fully connected layer reading it instead of the data."""
    for node in [n for n in graph.nodes if "chw_order" in n.attrs]:
        h, w, c = node.attrs.pop("chw_order")
        fc = sole_consumer(graph, node.outputs[0])
        if fc is None or fc.op != "fully_connected" or fc.inputs[0] != node.outputs[0]:
            raise unsupported(graph, node, f"a flatten of a {c}x{h}x{w} map read by something "
                                           "other than one fully connected layer (its NCHW order "
                                           "cannot be folded into the weights)")
        weights = graph.constants[fc.inputs[1]]
        name = fc.name + ":w"
        graph.constants[name] = np.ascontiguousarray(
            weights.reshape(c, h, w, -1).transpose(1, 2, 0, 3).reshape(h * w * c, -1))
        fc.inputs[1] = name


def fold_bias_adds(graph):
    for node in [n for n in graph.nodes if n.op == "bias_add"]:
        producer = _absorb(graph, node, "an addition of a constant")
        w = graph.constants[producer.inputs[1]]
        cout = w.shape[-1]
        c = graph.constants[node.inputs[1]]
        if c.size != cout and c.size != 1:
            raise unsupported(graph, node, f"a constant of shape {c.shape} added to {cout} "
                                           "channels")
        _set_bias(graph, producer, _bias(graph, producer, cout) + np.broadcast_to(
            c.reshape(-1).astype(np.float64), (cout,)))
        _bypass(graph, node)


def fold_batch_norms(graph):
    for node in [n for n in graph.nodes if n.op == "batch_norm"]:
        producer = _absorb(graph, node, "a batch normalization")
        scale = graph.constants[node.inputs[1]].astype(np.float64)
        offset = graph.constants[node.inputs[2]].astype(np.float64)
        w = graph.constants[producer.inputs[1]].astype(np.float64)
        name = producer.name + ":w"
        graph.constants[name] = (w * scale).astype(np.float32)   # Cout is the last axis
        producer.inputs[1] = name
        _set_bias(graph, producer, _bias(graph, producer, w.shape[-1]) * scale + offset)
        _bypass(graph, node)


def _activation_kind(graph, node):
    low, high = node.attrs.get("low"), node.attrs.get("high")
    if low == 0.0 and high == 6.0:
        return "relu6"
    if low == 0.0 and high == float("inf"):
        return "relu"
    raise unsupported(graph, node, f"clip to [{low}, {high}]; the kernels fuse ReLU (0, inf) and "
                                   "ReLU6 (0, 6)")


def fuse_activations(graph):
    for node in [n for n in graph.nodes if n.op == "activation"]:
        kind = _activation_kind(graph, node)
        producer = graph.producers().get(node.inputs[0])
        if producer is None or producer.op not in ACTIVATION_OPS or \
                sole_consumer(graph, node.inputs[0]) is not node:
            raise unsupported(graph, node, "an activation that does not directly follow a "
                                           "convolution, fully connected layer or add")
        if producer.attrs.get("activation") not in (None, kind):
            if {producer.attrs["activation"], kind} != {"relu", "relu6"}:
                raise unsupported(graph, node, f"{kind} after {producer.attrs['activation']}")
            kind = "relu6"                 # relu then relu6 (or back) is relu6
        producer.attrs["activation"] = kind
        _bypass(graph, node)


def fold_pads(graph):
    for node in [n for n in graph.nodes if n.op == "pad"]:
        consumer = sole_consumer(graph, node.outputs[0])
        if consumer is None or consumer.op != "conv" or node.attrs["value"] != 0.0:
            raise unsupported(graph, node, "padding that is not zero padding read only by a "
                                           "convolution (it cannot be folded into one)")
        consumer.attrs["pads"] = tuple(a + b for a, b in zip(consumer.attrs["pads"],
                                                             node.attrs["pads"]))
        _bypass(graph, node)


def lower_convs(graph):
    """conv -> pointwise (1x1, stride 1, no padding), depthwise (one group per channel, one
    output per channel) or conv2d (one group); any other grouping is unsupported."""
    for node in [n for n in graph.nodes if n.op == "conv"]:
        w = graph.constants[node.inputs[1]]
        kh, kw, cin_group, cout = w.shape
        group = node.attrs.get("group", 1)
        if tuple(node.attrs.get("dilation", (1, 1))) != (1, 1):
            raise unsupported(graph, node, f"dilation {node.attrs['dilation']} is not supported")
        if group == 1:
            if (kh, kw) == (1, 1) and tuple(node.attrs["stride"]) == (1, 1) and \
                    tuple(node.attrs["pads"]) == (0, 0, 0, 0):
                node.op = "pointwise"
                graph.constants[node.inputs[1]] = np.ascontiguousarray(w.reshape(cin_group, cout))
            else:
                node.op = "conv2d"
        elif cin_group == 1 and cout == group:
            node.op = "depthwise"
            graph.constants[node.inputs[1]] = np.ascontiguousarray(w.reshape(kh, kw, cout))
        else:
            multiplier = cout // group
            raise unsupported(graph, node, f"a grouped convolution ({group} groups of {cin_group} "
                                           f"inputs and {multiplier} outputs); depthwise with a "
                                           "multiplier of 1 and ordinary convolutions are "
                                           "supported")
        node.attrs.pop("group", None)
        node.attrs.pop("dilation", None)
        if len(node.inputs) == 2:
            _set_bias(graph, node, np.zeros(cout))


def fuse_residuals(graph):
    """add(a, b) -> pointwise(..., residual=other) when a pointwise layer without activation
    produces one operand only for this add, and the other operand is ready before it runs."""
    for node in [n for n in graph.nodes if n.op == "add"]:
        order = {n.name: i for i, n in enumerate(graph.nodes)}
        producers = graph.producers()
        for mine, other in ((0, 1), (1, 0)):
            pw = producers.get(node.inputs[mine])
            if pw is None or pw.op != "pointwise" or pw.attrs.get("activation") is not None \
                    or len(pw.inputs) > 3 or sole_consumer(graph, node.inputs[mine]) is not node:
                continue
            source = producers.get(node.inputs[other])
            if source is not None and order[source.name] > order[pw.name]:
                continue
            pw.inputs = pw.inputs + [node.inputs[other]]
            pw.attrs["activation"] = node.attrs.get("activation")
            node.inputs = [node.inputs[mine]]
            _bypass(graph, node)
            break
