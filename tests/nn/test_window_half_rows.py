"""Half-row load buffers in the window kernels (docs/kernels.md "Half-row load buffers"): with
fp16 input and one channel per lane a pixel's load row is 16 halves, half a VPM row, so the two
load buffers share rows (buffer 1 in words 8..15). Against the direct float64 loop of
tests/nn/spatial_reference.py, with every dynamic check of the emulator on its default (the
race check reads words: a load into one half racing a read of the other would be flagged)."""

import numpy as np
import pytest

from vc4nn.kernels.spatial import PlanError
from vc4nn.kernels.window_plan import make_plan
from vc4nn.nn import avg_pool
from vc4nn.nn.layer_args import resolve_padding

from . import spatial_reference
from .reference import assert_close_fp16
from .window_check import check_fp16_depthwise

F16, F32 = np.float16, np.float32

# (H, W, C, stride, padding, QPUs, layout, result dtype, tiling): padding rows zero-filled into
# either half (tiles starting at the top, ramp-down rows past the image), odd chunk counts per
# row (the buffers' registers swapped between iterations), short last chunks, partial blocks,
# both strides and layouts, rolled and unrolled loops, one to twelve QPUs, chunks of 16 pixels.
CASES = [
    (9, 14, 16, 1, "same", 3, "chw", F16, {}),
    (7, 13, 17, 1, (1, 0, 0, 1), 12, "chw", F16, dict(in_chunk=5, tile_rows=3)),
    (6, 11, 33, 2, "same", 4, "hwc", F16, dict(in_chunk=3)),
    (8, 9, 16, 1, "valid", 1, "hwc", F32, dict(in_chunk=16, rolled=0)),
    (5, 20, 18, 2, (0, 2, 1, 0), 2, "chw", F16, dict(in_chunk=2, tile_cols=7)),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_half_row_buffers_match_the_direct_loop(device, case):
    h, w, c, stride, padding, qpus, layout, dtype, tiling = case
    run = check_fp16_depthwise(device, h, w, c, stride, padding, "relu6", True, qpus,
                               dict(tiling, half_row_buffers=1), layout, dtype)
    assert not run.warnings


def test_avg_pool_with_half_row_buffers(device):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((9, 10, 20)).astype(F16)
    y = avg_pool(x, 3, 1, "same", device=device, num_qpus=5,
                 tiling=dict(half_row_buffers=1, in_chunk=3))
    pads, _ = resolve_padding("test", "same", 9, 10, 3, 3, 1, 1)
    expected, magnitude = spatial_reference.avg_pool(x, (3, 3), (1, 1), pads)
    assert_close_fp16(y, expected, magnitude, terms=11)


def plan(c=512, storage="fp16", layout="chw", w_storage=None, **tiling):
    return make_plan("depthwise", 14, 14, c, (3, 3), (1, 1), (1, 1, 1, 1), "relu6", 12,
                     storage, storage, w_storage or storage, layout, **tiling)


def test_half_row_buffers_are_the_default_for_16_bit_loads():
    """fp16 input with one channel per lane: the same VPM rows as two 4-pixel buffers take
    twice the pixels ("chw": dw7's 4 QPUs stage a 14-pixel row in 7 rows, the loads fill the
    other 9); channel pairs (32-bit loads) and float32 keep whole-row buffers."""
    chw = plan()
    assert (chw.half_row_buffers, chw.max_qpus, chw.in_chunk, chw.out_chunk) == (1, 4, 9, 14)
    assert chw.load_rows(chw.in_chunk) + chw.stage_rows(chw.out_chunk) <= 16
    hwc = plan(c=48, layout="hwc")
    assert (hwc.half_row_buffers, hwc.max_qpus, hwc.in_chunk) == (1, 8, 6)
    assert plan(layout="hwc").channel_pairs == 1 and plan(layout="hwc").half_row_buffers == 0
    fp32 = plan(storage="fp32")     # 14 float32 pixels staged: 2 QPUs with 9-pixel loads
    assert (fp32.half_row_buffers, fp32.max_qpus, fp32.in_chunk) == (0, 2, 9)


def test_half_row_buffers_need_16_bit_loads():
    with pytest.raises(PlanError, match="half_row_buffers=1: needs loads of 16-bit"):
        plan(storage="fp32", half_row_buffers=1)
    with pytest.raises(PlanError, match="half_row_buffers=1: needs loads of 16-bit"):
        plan(layout="hwc", channel_pairs=1, half_row_buffers=1)
    with pytest.raises(PlanError, match="half_row_buffers=2: 0 or 1"):
        plan(half_row_buffers=2)
    # without them the same chunks need twice the load rows: 2 x 9 + 7 > 16
    with pytest.raises(PlanError, match="exceed the 64 rows"):
        plan(half_row_buffers=0, in_chunk=9, max_qpus=4)
