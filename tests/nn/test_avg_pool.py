"""vc4nn.nn.avg_pool against a direct float64 loop: the mean over the window's valid elements
(TFLite AVERAGE_POOL_2D; ONNX AveragePool count_include_pad=0)."""

import numpy as np
import pytest

from vc4nn.errors import Vc4nnError
from vc4nn.nn import avg_pool
from vc4nn.nn.layer_args import resolve_padding

from . import spatial_reference
from .reference import assert_close

# (H, W, C, size, stride, padding, QPUs)
FAST = [
    (7, 7, 17, 7, 1, "valid", 1),           # MobileNet v1's 7x7 pool, reduced channels
    (7, 14, 3, 3, 2, "same", 4),            # padded windows count only their valid elements
    (15, 2, 144, (2, 1), (1, 2), (1, 0, 0, 0), 12),
    (1, 1, 1, 1, 1, "valid", 12),
]


@pytest.mark.parametrize("case", FAST, ids=str)
def test_avg_pool_matches_the_direct_loop(device, case):
    h, w, c, size, stride, padding, qpus = case
    x = np.random.default_rng(2).standard_normal((h, w, c)).astype(np.float32)
    y = avg_pool(x, size, stride, padding, device=device, num_qpus=qpus)
    size2 = size if isinstance(size, tuple) else (size, size)
    stride2 = stride if isinstance(stride, tuple) else (stride, stride)
    pads, _ = resolve_padding("test", padding, h, w, *size2, *stride2)
    expected, magnitude = spatial_reference.avg_pool(x, size2, stride2, pads)
    assert_close(y, expected, magnitude, terms=size2[0] * size2[1] + 2)


@pytest.mark.slow
def test_avg_pool_mobilenet_size(device):
    x = np.random.default_rng(4).standard_normal((7, 7, 1024)).astype(np.float32)
    y = avg_pool(x, 7, 7, device=device)
    assert_close(y, x.astype(np.float64).mean(axis=(0, 1), keepdims=True),
                 np.abs(x.astype(np.float64)).sum(axis=(0, 1), keepdims=True), terms=51)


def test_padding_counts_only_valid_elements(device):
    # A 3x3 window at a corner with "same" padding holds 4 valid elements: their mean, not the
    # sum over 9.
    x = np.ones((2, 2, 1), np.float32)
    y = avg_pool(x, 3, 1, "same", device=device)
    assert np.array_equal(y, np.ones((2, 2, 1), np.float32))


@pytest.mark.parametrize("kwargs, message", [(dict(size=0), "size"), (dict(stride=(1, 2, 3)), "stride"),
                                             (dict(padding="full"), "padding")])
def test_bad_arguments(device, kwargs, message):
    args = dict(x=np.zeros((4, 4, 2), np.float32), size=2, stride=2, device=device)
    args.update(kwargs)
    with pytest.raises(Vc4nnError, match=message):
        avg_pool(**args)
