"""An independent float64 numpy evaluation of the runtime's optimized IR (plain loops over the
window, no shared code with the kernels), so tests can check the loaders and passes against
onnxruntime at the graph level."""

import numpy as np

ACT = {None: lambda y: y, "relu": lambda y: np.maximum(y, 0), "relu6": lambda y: np.clip(y, 0, 6)}


def pad_hw(x, pads, value=0.0):
    t, b, l, r = pads
    return np.pad(x, ((t, b), (l, r), (0, 0)), constant_values=value)


def windows(x, kh, kw, stride, pads):
    """(oh, ow, kh, kw, C) windows of the zero-padded map."""
    xp = pad_hw(x, pads)
    sh, sw = stride
    oh = (xp.shape[0] - kh) // sh + 1
    ow = (xp.shape[1] - kw) // sw + 1
    out = np.empty((oh, ow, kh, kw, x.shape[2]))
    for i in range(kh):
        for j in range(kw):
            out[:, :, i, j] = xp[i:i + sh * oh:sh, j:j + sw * ow:sw]
    return out


def evaluate(graph, x_hwc):
    g = graph
    vals = {g.inputs[0].name: np.asarray(x_hwc, np.float64)}
    c = lambda n: g.constants[n].astype(np.float64)
    for node in g.nodes:
        x = vals[node.inputs[0]]
        a = node.attrs
        if node.op == "conv2d":
            w = c(node.inputs[1])
            y = np.einsum("hwijc,ijco->hwo", windows(x, w.shape[0], w.shape[1], a["stride"],
                                                     a["pads"]), w) + c(node.inputs[2])
        elif node.op == "depthwise":
            w = c(node.inputs[1])
            y = np.einsum("hwijc,ijc->hwc", windows(x, w.shape[0], w.shape[1], a["stride"],
                                                    a["pads"]), w) + c(node.inputs[2])
        elif node.op == "pointwise":
            y = x @ c(node.inputs[1]) + c(node.inputs[2])
            if len(node.inputs) > 3:
                y = y + vals[node.inputs[3]]
        elif node.op == "fully_connected":
            y = x.reshape(-1) @ c(node.inputs[1])
            if len(node.inputs) > 2:
                y = y + c(node.inputs[2])
        elif node.op == "add":
            y = x + vals[node.inputs[1]]
        elif node.op == "global_avg_pool":
            y = x.mean(axis=(0, 1))
        elif node.op == "avg_pool":
            win = windows(x, *a["size"], a["stride"], a["pads"])
            ones = windows(np.ones(x.shape[:2] + (1,)), *a["size"], a["stride"], a["pads"])
            count = np.prod(a["size"]) if a.get("count_include_pad") else ones.sum(axis=(2, 3))
            y = win.sum(axis=(2, 3)) / count
        elif node.op == "reshape":
            y = x
        elif node.op == "softmax":
            e = np.exp(a.get("beta", 1.0) * (x - x.max()))
            y = e / e.sum()
        else:
            raise AssertionError(f"reference: op {node.op} left after optimize")
        vals[node.outputs[0]] = ACT[a.get("activation")](y).reshape(g.shapes[node.outputs[0]])
    return [vals[o] for o in g.outputs]
