"""fully_connected with fp16 weights (channel-pair words, two accumulators per gather) against
a float64 x @ w on the same half weights."""

import numpy as np
import pytest

from vc4nn.linalg import DtypeError
from vc4nn.nn import fully_connected, prepare_fully_connected

from .reference import assert_close, dense


@pytest.mark.parametrize("cin, cout, bias, activation, qpus", [
    (1, 1, False, None, 1),
    (17, 5, True, "relu", 12),              # one block of 32 columns, its high half past Cout
    (33, 48, True, "relu6", 4),             # a last block whose high half is 0 columns
    (64, 144, False, None, 12),             # 4.5 blocks: 144 = 4 x 32 + 16
    (100, 1000, True, None, 12),            # the classifier's 1000 outputs
])
def test_fp16_weights(device, cin, cout, bias, activation, qpus):
    rng = np.random.default_rng(cout)
    x = rng.standard_normal(cin).astype(np.float32)
    w = rng.standard_normal((cin, cout)).astype(np.float16)
    b = rng.standard_normal(cout).astype(np.float32) if bias else None
    prepared = prepare_fully_connected(w, b, device=device)
    y = fully_connected(x, prepared, activation=activation, num_qpus=qpus)
    expected, magnitude = dense(x, w, b, None, activation)
    assert_close(y, expected, magnitude, terms=cin)
    prepared.free()


def test_fp16_weights_halve_the_bytes_and_the_time(device):
    """The layer is bound by the weights' bytes: fp16 storage halves them and (cycle model) the
    time."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal(512).astype(np.float32)
    w = rng.standard_normal((512, 512)).astype(np.float32)
    runs, sizes = [], []
    for weights in (w, w.astype(np.float16)):
        prepared = prepare_fully_connected(weights, device=device)
        _, run = fully_connected(x, prepared, return_run=True)
        runs.append(run.cycles)
        sizes.append(prepared.nbytes)
        prepared.free()
    assert 2 * sizes[1] == sizes[0]
    if runs[0] is not None:
        assert runs[1] < 0.7 * runs[0]


def test_bad_weight_dtype(device):
    with pytest.raises(DtypeError, match="w has dtype float64"):
        prepare_fully_connected(np.zeros((4, 4)), device=device)
