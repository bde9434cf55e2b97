"""Which depthwise results the runtime hands to the next pointwise layer channel-major (C, H, W)
instead of NHWC: where the pointwise layer would otherwise transpose its input in a launch of
its own (the rule and its measurements: vc4nn/nn/handoff.py, docs/kernels.md "Handing over
transposed"). The session stores those values channel-major in the arena and calls the pair
with ``out_layout="chw"`` / ``x_layout="chw"``.
"""

from ..nn.depthwise import depthwise_plan
from ..nn.handoff import hands_over
from ..nn.pointwise import pointwise_plan
from .passes import sole_consumer


def transposed_handoffs(graph, storage, num_qpus, device):
    """Names of the values (depthwise results) to store channel-major: those whose only reader
    is a pointwise layer taking them as x, where ``hands_over`` says the pair gains.
    ``storage``: the session's StoragePlan."""
    out = set()
    for node in graph.nodes:
        value = node.outputs[0]
        reader = sole_consumer(graph, value) if node.op == "depthwise" else None
        if reader is not None and reader.op == "pointwise" and reader.inputs[0] == value \
                and value not in reader.inputs[1:] \
                and hands_over(_depthwise_plan(graph, node, storage, num_qpus),
                               _pointwise_plan(graph, reader, storage, num_qpus), device):
            out.add(value)
    return out


def _depthwise_plan(graph, node, storage, num_qpus):
    """The plan ``nn.depthwise`` makes for the node as the session calls it (NHWC result)."""
    in_h, in_w, channels = graph.shapes[node.inputs[0]]
    return depthwise_plan(in_h, in_w, channels, node.attrs["stride"], node.attrs["pads"],
                          node.attrs.get("activation"), num_qpus,
                          _stored(storage, node.inputs[0]), _stored(storage, node.outputs[0]),
                          storage.weights(node))


def _pointwise_plan(graph, node, storage, num_qpus):
    """The plan ``nn.pointwise`` makes for the node as the session calls it (NHWC input)."""
    h, w, cin = graph.shapes[node.inputs[0]]
    cout = graph.constants[node.inputs[1]].shape[1]
    residual = len(node.inputs) > 3
    return pointwise_plan(h, w, cin, cout, num_qpus, len(node.inputs) > 2, residual,
                          node.attrs.get("activation"), _stored(storage, node.inputs[0]),
                          _stored(storage, node.outputs[0]),
                          _stored(storage, node.inputs[3]) if residual else "fp32",
                          storage.weights(node))


def _stored(storage, value):
    return storage.values.get(value, "fp32")
