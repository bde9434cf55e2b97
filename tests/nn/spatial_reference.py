"""Float64 references of the spatial layers written from their definitions: a direct loop over
every output and every window position, padding as explicit (top, bottom, left, right)
offsets (positions outside the image contribute nothing). Error bounds: tests/nn/reference.py."""

import numpy as np

from .reference import activate


def windows(in_hw, kernel, stride, pads):
    """For each output (i, j): the in-image (row, col, kh, kw) of its window."""
    (h, w), (kh_, kw_), (sh, sw), (top, bottom, left, right) = in_hw, kernel, stride, pads
    oh, ow = (h + top + bottom - kh_) // sh + 1, (w + left + right - kw_) // sw + 1
    out = np.empty((oh, ow), dtype=object)
    for i in range(oh):
        for j in range(ow):
            out[i, j] = [(i * sh + kh - top, j * sw + kw - left, kh, kw)
                         for kh in range(kh_) for kw in range(kw_)
                         if 0 <= i * sh + kh - top < h and 0 <= j * sw + kw - left < w]
    return out


def window_sums(win, term, channels, bias, activation):
    """(expected, magnitude) of act(bias + the sum of term(row, col, kh, kw) over each window)."""
    y = np.zeros(win.shape + (channels,))
    mag = np.zeros_like(y)
    for (i, j), taps in np.ndenumerate(win):
        for r, q, kh, kw in taps:
            value = term(r, q, kh, kw)
            y[i, j] += value.sum(axis=0)
            mag[i, j] += np.abs(value).sum(axis=0)
    if bias is not None:
        y += np.asarray(bias, np.float64)
        mag += np.abs(np.asarray(bias, np.float64))
    return activate(y, activation), mag


def depthwise(x, w, bias, stride, pads, activation):
    """(expected, magnitude) of y[i, j, c] = act(bias[c] + sum x[r, q, c] w[kh, kw, c])."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    win = windows(x.shape[:2], w.shape[:2], (stride, stride), pads)
    return window_sums(win, lambda r, q, kh, kw: (x[r, q] * w[kh, kw])[None], x.shape[2], bias,
                       activation)


def conv2d(x, w, bias, stride, pads, activation):
    """(expected, magnitude) of y[i, j, o] = act(bias[o] + sum x[r, q, c] w[kh, kw, c, o])."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    win = windows(x.shape[:2], w.shape[:2], (stride, stride), pads)
    # one term per input channel c: x[r, q, c] * w[kh, kw, c, :]
    return window_sums(win, lambda r, q, kh, kw: x[r, q][:, None] * w[kh, kw], w.shape[3],
                       bias, activation)


def avg_pool(x, size, stride, pads):
    """(expected, magnitude): the mean over the window's in-image elements (TFLite
    AVERAGE_POOL_2D, ONNX count_include_pad=0)."""
    x = np.asarray(x, np.float64)
    win = windows(x.shape[:2], size, stride, pads)
    y = np.zeros(win.shape + (x.shape[2],))
    mag = np.zeros_like(y)
    for (i, j), taps in np.ndenumerate(win):
        for r, q, _, _ in taps:
            y[i, j] += x[r, q] / len(taps)
            mag[i, j] += np.abs(x[r, q])
    return y, mag
