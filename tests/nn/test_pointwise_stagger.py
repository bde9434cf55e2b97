"""Staggered retirement (``stagger``, vc4nn/kernels/panel_stagger.py) against the float64
reference (tests/nn/reference.py), emulator checks on."""

import numpy as np
import pytest

from vc4nn.kernels import panel_stagger
from vc4nn.kernels import pointwise as kernel
from vc4nn.nn import pointwise

from .reference import assert_close, assert_close_fp16, dense
from .test_pointwise import tensors

DTYPES = {"fp16": np.float16, "fp32": np.float32}


def run_staggered(device, h, w, cin, cout, num_qpus, activation, layout="chw", x_storage="fp32",
                  y_storage="fp32", **tiling):
    """The layer with ``stagger`` forced, x and y in their storages (the weights and the bias
    float32), checked against the reference on the values the kernel read (x rounded to
    halves where stored so); its panel plan."""
    tiling = dict(tiling, stagger=True)
    plan = kernel.PointwisePlan(h, w, cin, cout, num_qpus, True, False, activation,
                                x_storage=x_storage, y_storage=y_storage, input_layout=layout,
                                **tiling)
    assert plan.staggers
    x, wt, b, _ = tensors(h * w + cin + cout + num_qpus, h, w, cin, cout, True, False)
    x = x.astype(DTYPES[x_storage])
    xin = np.ascontiguousarray(x.transpose(2, 0, 1)) if layout == "chw" else x
    y = pointwise(xin, wt, b, activation, device=device, num_qpus=num_qpus, tiling=tiling,
                  x_layout=layout, dtype=DTYPES[y_storage])
    check = assert_close_fp16 if y_storage == "fp16" else assert_close
    check(y, *dense(x, wt, b, None, activation), cin + 1)
    return plan.panel


# Pixels M = 60 (B - 1) + E on 12 QPUs (blocks of 5 rows x 12): the last cycle ends after the
# segment of the last row with a pixel (row (E - 1) // 12; 4: a whole cycle), odd pixel counts,
# every activation, two panels (each with its warm-up and last cycles), x transposed by the
# layer itself (NHWC given).
@pytest.mark.parametrize("h,w,cout,activation,layout,last", [
    (7, 9, 128, "relu6", "chw", 0),         # 63 pixels: 3 in the last block
    (1, 61, 128, "relu", "chw", 0),         # one pixel in the last block
    (9, 9, 128, None, "chw", 1),
    (10, 10, 128, "relu6", "chw", 3),
    (10, 12, 128, "relu6", "chw", 4),       # 120: two whole blocks
    (11, 13, 256, "relu6", "chw", 1),       # two panels
    (9, 7, 128, "relu6", "hwc", 0),         # NHWC x, transposed first
])
def test_staggered_shapes(device, h, w, cout, activation, layout, last):
    tiling = {"transpose_input": True} if layout == "hwc" else {}
    panel = run_staggered(device, h, w, 128, cout, 12, activation, layout, **tiling)
    assert panel.k == 129 and panel_stagger.last_row(panel) == last


# fp16 x and y (float32 weights and bias): odd pixel counts, whose k step of an odd number of
# halves flips the half bit of A's address at every k (the copies' flags), an even one (pw3's
# case: the flags the same at every k), x in halves with a float32 result and the reverse,
# x transposed by the layer itself, relu6 and the others.
@pytest.mark.parametrize("h,w,activation,layout,x_storage,y_storage", [
    (7, 9, "relu6", "chw", "fp16", "fp16"),     # 63 pixels: 3 in the last block
    (10, 12, "relu6", "chw", "fp16", "fp16"),   # 120: two whole blocks, even M
    (1, 61, "relu", "chw", "fp16", "fp16"),
    (9, 9, None, "chw", "fp16", "fp32"),
    (11, 13, "relu6", "chw", "fp32", "fp16"),
    (9, 7, "relu6", "hwc", "fp16", "fp16"),
])
def test_staggered_halves(device, h, w, activation, layout, x_storage, y_storage):
    tiling = {"transpose_input": True} if layout == "hwc" else {}
    panel = run_staggered(device, h, w, 128, 128, 12, activation, layout, x_storage, y_storage,
                          **tiling)
    assert (panel.a_halves, panel.c_halves) == (x_storage == "fp16", y_storage == "fp16")


@pytest.mark.parametrize("num_qpus,cin,cout,vectors,x_storage", [
    (6, 65, 64, 4, "fp16"),     # two gathered rows per QPU
    (3, 20, 16, 1, "fp32"),     # one park register, no conveyor: the retirement packs alone
])
def test_staggered_halves_narrow_panels(device, num_qpus, cin, cout, vectors, x_storage):
    """fp16 y (and x) with narrow panels in chunks of 3 k-rows."""
    run_staggered(device, 6, 11, cin, cout, num_qpus, "relu6", x_storage=x_storage,
                  y_storage="fp16", panel_vectors=vectors, chunk_depth=3)


@pytest.mark.parametrize("num_qpus,cout", [(6, 64), (12, 64), (6, 128)])
def test_staggered_narrow_panels(device, num_qpus, cout):
    """4-vector panels in chunks of 3 k-rows (2 or 1 gathered rows per QPU), K = 65: 22
    chunks, the loop's 20 in segments of 4 chunks."""
    panel = run_staggered(device, 6, 11, 65, cout, num_qpus, "relu6", panel_vectors=4,
                          chunk_depth=3)
    assert panel_stagger.segments(panel) == [4] * panel_stagger.ROWS


def test_stagger_default_and_limits():
    """By default on one panel where it runs (pw3, also with x and y in halves: the staggered
    8-vector panel then wins the width), not on two (pw4) nor with fp16 weights (the bias row
    would be gathered as halves), a residual, no bias, 8 QPUs (the weights' rows do not split),
    fewer pixels than 5 per QPU, a K whose chunks do not make 5 segments or fp16 x on an odd
    number of QPUs; forced there, it says why."""
    def plan(h, w, cin, cout, qpus=12, bias=True, residual=False, **options):
        return kernel.PointwisePlan(h, w, cin, cout, qpus, bias, residual, "relu6",
                                    input_layout="chw", **options)

    assert plan(56, 56, 128, 128).staggers
    halves = plan(56, 56, 128, 128, x_storage="fp16", y_storage="fp16")
    assert halves.staggers and halves.vectors == 8
    assert not plan(28, 28, 128, 256).staggers
    assert plan(28, 28, 128, 256, stagger=True).staggers
    odd = {"x_storage": "fp16", "panel_vectors": 1, "chunk_depth": 3}
    assert plan(3, 11, 20, 16, 3, stagger=True, **dict(odd, x_storage="fp32")).staggers
    for args, options, why in [((56, 56, 128, 128), {"x_storage": "fp16", "y_storage": "fp16",
                                                     "w_storage": "fp16"}, "float32 B"),
                               ((3, 11, 20, 16, 3), odd, "even number"),
                               ((56, 56, 128, 128), {"residual": True}, "residual"),
                               ((56, 56, 128, 128), {"bias": False}, "bias"),
                               ((56, 56, 128, 128, 8), {}, "split"),  # (b_gather says)
                               ((5, 11, 128, 128), {}, "less than"),
                               ((56, 56, 143, 128), {}, "segments"),
                               ((56, 56, 256, 128), {}, "the chunk after the loop")]:
        assert not plan(*args, **options).staggers
        with pytest.raises(ValueError, match=why):
            plan(*args, stagger=True, **options).panel


def test_stagger_code_fits_the_instruction_cache():
    """pw3's staggered program with its barrier code: the cycle's code, the chunk loop and the
    master's code within a slice's 4 KB instruction cache, so a cycle fetches nothing again."""
    program = panel_stagger.program_for(plan_panel(56, 56, 128, 128))
    labels = {str(name).split(".")[-1]: address for name, address in program.labels.items()}
    assert labels["finish"] - labels["cycle"] <= 4096


def plan_panel(h, w, cin, cout):
    return kernel.PointwisePlan(h, w, cin, cout, 12, True, False, "relu6",
                                input_layout="chw").panel
