"""Bad input, generated for the public functions beyond the device (vc4nn.nn's layers and
prepare_* functions, vc4nn.InferenceSession and its methods): each argument of a call that works
is replaced in turn by wrong types, sizes, NaN/inf, empty and huge values, and the call must end
in a typed error (vc4nn.errors.Vc4nnError) whose message names the argument.

The call with the good arguments runs first in every case, so a bad value is the only change.
"""

import math

import numpy as np
import pytest

import vc4nn
import vc4nn.nn as nn

from .test_bad_inputs import expect_typed_error

HUGE = 1 << 70
F32 = np.float32
X = np.ones((4, 4, 16), F32)                      # an (H, W, C) activation


def bad_arrays(shape):
    """Arrays that are not a float tensor of ``shape``: other types, dtypes, ranks, empty, and
    last a strided view (which the prepare_* functions copy into their layout)."""
    return [None, "x", 5, [[1.0]], np.ones(shape, np.int32), np.ones(shape, np.float64),
            np.ones(shape + (2,), F32), np.ones((0,) + shape[1:], F32),
            np.ones(shape, F32)[..., ::2] if shape[-1] > 1 else np.ones((2,), F32)]


QPUS = [0, 13, -1, 4.5, math.nan, "12", None, HUGE]
SCALARS = [0, -1, 4.5, math.nan, math.inf, "1", None, HUGE, (1, 1, 1)]
COMMON = {"num_qpus": QPUS, "device": ["emulator", 5, object()],
          "out": ["x", 5, np.ones((4, 4, 16), F32)]}

# function -> (good arguments, {argument: bad values})
LAYERS = {
    "conv2d": (dict(x=np.ones((5, 5, 3), F32), w=np.ones((3, 3, 3, 16), F32),
                    bias=np.ones(16, F32), stride=2),
               dict(x=bad_arrays((5, 5, 3)), w=bad_arrays((3, 3, 3, 16)),
                    bias=bad_arrays((16,))[1:] + [np.ones(15, F32)], stride=SCALARS,
                    padding=["bogus", 5, (1,), (-1, -1, -1, -1), (HUGE,) * 4],
                    activation=["sigmoid", 5], dtype=[object, "U4", np.int32, "frob"])),
    "depthwise": (dict(x=X, w=np.ones((3, 3, 16), F32), bias=np.ones(16, F32)),
                  dict(x=bad_arrays((4, 4, 16)), w=bad_arrays((3, 3, 16)) + [
                      np.ones((5, 5, 16), F32), np.ones((3, 3, 8), F32)],
                      bias=bad_arrays((16,))[1:] + [np.ones(15, F32)], stride=SCALARS,
                      padding=["bogus", 5, (-1, -1, -1, -1)], activation=["sigmoid", 5],
                      tiling=["x", 5, object(), {"frob": 1}], dtype=[object, "U4", np.int32])),
    "pointwise": (dict(x=X, w=np.ones((16, 32), F32), bias=np.ones(32, F32)),
                  dict(x=bad_arrays((4, 4, 16)), w=bad_arrays((16, 32)) + [
                      np.ones((8, 32), F32)], bias=bad_arrays((32,))[1:] + [np.ones(31, F32)],
                      residual=["x", 5, np.ones((4, 4, 16), F32), np.ones((4, 4, 32), F32)[1:]],
                      activation=["sigmoid", 5], tiling=["x", 5, object()])),
    "fully_connected": (dict(x=np.ones(64, F32), w=np.ones((64, 10), F32),
                             bias=np.ones(10, F32)),
                        dict(x=[None, "x", 5, np.ones(64, np.int32), np.ones(0, F32),
                                np.ones(63, F32)],
                             w=bad_arrays((64, 10))[:-1] + [np.ones((63, 10), F32)],
                             bias=bad_arrays((10,))[1:] + [np.ones(9, F32)],
                             activation=["sigmoid", 5])),
    "avg_pool": (dict(x=X, size=2, stride=2),
                 dict(x=bad_arrays((4, 4, 16)), size=SCALARS + [(2,)], stride=SCALARS,
                      padding=["bogus", 5], tiling=["x", 5], dtype=[object, np.int32])),
    "global_avg_pool": (dict(x=X), dict(x=bad_arrays((4, 4, 16)), dtype=[object, np.int32])),
    "add": (dict(a=X, b=X), dict(a=bad_arrays((4, 4, 16)), b=bad_arrays((4, 4, 16)) + [
        np.ones((4, 4, 8), F32)], activation=["sigmoid", 5], dtype=[object, np.int32])),
    "prepare_conv2d": (dict(w=np.ones((3, 3, 3, 16), F32)),
                       dict(w=bad_arrays((3, 3, 3, 16))[:-1], bias=["x", np.ones(15, F32)],
                            taps_per_pass=[-1, 4.5, "x", math.nan, HUGE],
                            placement=["x", 5])),
    "prepare_depthwise": (dict(w=np.ones((3, 3, 16), F32)),
                          dict(w=bad_arrays((3, 3, 16))[:-1], bias=["x", np.ones(15, F32)],
                               placement=["x", 5])),
    "prepare_pointwise": (dict(w=np.ones((16, 32), F32)),
                          dict(w=bad_arrays((16, 32))[:-1], bias=["x", np.ones(31, F32)],
                               placement=["x", 5])),
    "prepare_fully_connected": (dict(w=np.ones((64, 10), F32)),
                                dict(w=bad_arrays((64, 10))[:-1], bias=["x", np.ones(9, F32)],
                                     placement=["x", 5])),
}
# A size too large for the input is named by what it makes: a window bigger than the input.
NAMED_AS = {("avg_pool", "size"): ("window",)}
CASES = [(name, argument) for name, (good, bad) in LAYERS.items()
         for argument in list(bad) + [a for a in COMMON if not name.startswith("prepare")
                                      or a == "device"]]


@pytest.fixture(scope="module")
def device():
    with vc4nn.open_device("emulator") as d:
        yield d


@pytest.mark.parametrize("name, argument", CASES)
def test_layer_functions_refuse_bad_arguments_by_name(name, argument, device):
    function = getattr(nn, name)
    good, bad = LAYERS[name]
    function(**good, device=device)
    values = bad[argument] if argument in bad else COMMON[argument]
    for value in values:
        if argument == "out" and name in ("fully_connected", "conv2d") and value is not None \
                and getattr(value, "shape", None) == X.shape:
            continue        # a host array where a device buffer belongs: covered by "x"/5
        kwargs = dict(good, device=device)
        kwargs[argument] = value
        expect_typed_error(lambda: function(**kwargs), argument,
                           also=NAMED_AS.get((name, argument), ()))
