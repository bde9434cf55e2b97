"""Where the model's input lives in the arena and how a run writes it.

When the input's one reader is a convolution (the stem), the input is stored as a padded
*frame*: the image with the stem's padding around it, so the stem reads no padding of its own.
The border holds what the stem must see there: 0, or the normalisation's mean when the
normalisation is folded into the stem (the folded conv sees the mean where the original sees 0).
A model fed planar input (ONNX's NCHW, no image frame) gets its frame as planes, (C, H, W): a run then
copies the input row by row instead of transposing it, a few times less host work per
inference (docs/runtime.md "Host work"), and the stem reads the planes (``x_layout="chw"``).
Otherwise the input is stored (H, W, C) as the graph shapes it.
"""

import numpy as np


class InputFrame:
    """The input of ``graph`` as the session stores it. ``stem``: the conv2d reading the frame
    (None: no frame); ``folded``: True when ``normalization`` is folded into the stem."""

    def __init__(self, graph, normalization):
        name = graph.inputs[0].name
        self.name, self.shape = name, tuple(graph.shapes[name])
        readers = [n for n in graph.nodes if name in n.inputs]
        stem = readers[0] if len(readers) == 1 and readers[0].op == "conv2d" \
            and readers[0].inputs[0] == name else None
        channels = self.shape[2]
        self.folded = stem is not None and normalization is not None \
            and channels == len(normalization.mean)
        self.stem = stem if normalization is None or self.folded else None
        # An image frame (a normalisation) comes as (H, W, 3) pixels whatever the file's layout
        planar = graph.inputs[0].layout == "NCHW" and normalization is None
        self.layout = "chw" if self.stem is not None and planar else "hwc"
        self.pads = tuple(self.stem.attrs["pads"]) if self.stem is not None else (0, 0, 0, 0)
        self.border = np.asarray(normalization.mean if self.folded else (0.0,) * channels,
                                 np.float32)
        self.view = self.interior = None

    @property
    def storage_shape(self):
        """The frame's shape in the arena."""
        h, w, c = self.shape
        t, b, l, r = self.pads
        h, w = h + t + b, w + l + r
        return (c, h, w) if self.layout == "chw" else (h, w, c)

    def bind(self, view):
        """Use ``view`` (the arena's bytes, ``storage_shape``) for the frame."""
        h, w, _ = self.shape
        t, _, l, _ = self.pads
        self.view = view
        self.interior = view[:, t:t + h, l:l + w] if self.layout == "chw" \
            else view[t:t + h, l:l + w]

    def write(self, x):
        """Write the image ``x``, (H, W, C), or (C, H, W) for a planar frame."""
        if self.stem is not None:
            # The border is rewritten every run: the arena lends its bytes to later layers.
            t, b, l, r = self.pads
            v = self.view
            if self.layout == "chw":
                border = self.border[:, None, None]
                v[:, :t], v[:, v.shape[1] - b:] = border, border
                v[:, :, :l], v[:, :, v.shape[2] - r:] = border, border
            else:
                v[:t], v[v.shape[0] - b:] = self.border, self.border
                v[:, :l], v[:, v.shape[1] - r:] = self.border, self.border
        _copy_into(self.interior, x)


def _copy_into(view, x):
    """``view[...] = x``; a transposed view of planar (C, H, W) data goes one plane at a time,
    a few times faster than one strided copy."""
    if x.ndim == 3 and view.ndim == 3 and x.strides[2] > x.strides[0]:
        for channel in range(x.shape[2]):
            view[..., channel] = x[..., channel]
    else:
        view[...] = x
