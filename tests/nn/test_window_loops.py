"""The sliding-window kernels' loop shapes (docs/kernels.md "Schedule"): rolled loops (one
output row per iteration, the accumulator sets shifted by moves) and unrolled ones (a period
of rows, the sets renamed), odd chunk counts (the load buffers' registers swapped between
iterations), padding rows filled with zeros in the VPM; against the direct float64 loops of
tests/nn/spatial_reference.py with every dynamic check of the emulator raising."""

import dataclasses

import numpy as np
import pytest

from vc4nn.kernels.window import program_for
from vc4nn.kernels.window_plan import PlanError, make_plan
from vc4nn.nn import avg_pool, depthwise
from vc4nn.nn.layer_args import resolve_padding

from . import spatial_reference
from .reference import assert_close
from .test_depthwise import FAST, run_case
from .test_fp16_spatial import check

F16 = np.float16


@pytest.mark.parametrize("rolled", [True, False])
@pytest.mark.parametrize("case", FAST, ids=str)
def test_depthwise_loops_match_the_direct_loop(device, case, rolled):
    run_case(device, *case, tiling=dict(rolled=rolled))


# (H, W, C, stride, padding, layout, tiling): odd chunk counts per row (in_chunk 1 with 9 or 7
# input columns, 2 with 5), two output rows per rolled body (two store buffers, an odd store
# count per row), channel-major results, tiles shorter than the image.
ODD = [
    (9, 11, 20, 1, "same", "hwc", dict(tile_cols=7, in_chunk=1, out_chunk=1, store_buffers=2)),
    (13, 7, 17, 1, (1, 1, 1, 1), "chw", dict(tile_cols=5, tile_rows=4, in_chunk=2)),
    (15, 15, 33, 2, "same", "chw", dict(tile_cols=4, tile_rows=3, in_chunk=1)),
    (14, 9, 16, 2, (0, 2, 1, 0), "hwc", dict(tile_cols=3, in_chunk=2, out_chunk=3,
                                               store_buffers=2)),
    # every accumulator (3 x 10, 2 x 15), 3 edge variants
    (11, 23, 19, 1, "same", "chw", dict(tile_cols=10, in_chunk=3)),
    (17, 29, 17, 2, "same", "hwc", dict(tile_cols=15, in_chunk=2, out_chunk=2)),
]


@pytest.mark.parametrize("rolled", [True, False])
@pytest.mark.parametrize("case", ODD, ids=str)
def test_odd_chunk_and_store_counts(device, case, rolled):
    h, w, c, stride, padding, layout, tiling = case
    rng = np.random.default_rng(h * w)
    x = rng.standard_normal((h, w, c)).astype(np.float32)
    wt = rng.standard_normal((3, 3, c)).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float32)
    y = depthwise(x, wt, bias, stride=stride, padding=padding, activation="relu6",
                  device=device, num_qpus=4, tiling=dict(tiling, rolled=rolled),
                  out_layout=layout)
    pads, _ = resolve_padding("test", padding, h, w, 3, 3, stride, stride)
    expected, magnitude = spatial_reference.depthwise(x, wt, bias, stride, pads, "relu6")
    if layout == "chw":             # (C, OH, OW)
        expected = np.moveaxis(expected, 2, 0)
        magnitude = np.moveaxis(magnitude, 2, 0) if np.ndim(magnitude) == 3 else magnitude
    assert_close(y, expected, magnitude, terms=9)


@pytest.mark.parametrize("rolled", [True, False])
@pytest.mark.parametrize("case", [(7, 14, 3, 3, 2, "same", 4, np.float32),
                                  (15, 2, 144, (2, 1), (1, 2), (1, 0, 0, 0), 12, F16),
                                  (9, 9, 5, 3, 1, (1, 1, 1, 1), 1, np.float32)], ids=str)
def test_avg_pool_loops(device, case, rolled):
    h, w, c, size, stride, padding, qpus, dtype = case
    x = np.random.default_rng(5).standard_normal((h, w, c)).astype(dtype)
    y = avg_pool(x, size, stride, padding, device=device, num_qpus=qpus,
                 tiling=dict(rolled=rolled))
    size2 = size if isinstance(size, tuple) else (size, size)
    stride2 = stride if isinstance(stride, tuple) else (stride, stride)
    pads, _ = resolve_padding("test", padding, h, w, *size2, *stride2)
    expected, magnitude = spatial_reference.avg_pool(x, size2, stride2, pads)
    check(y, expected, magnitude, terms=size2[0] * size2[1] + 2)


def test_rolled_loops_fit_the_instruction_cache():
    """MobileNet's stride-1 depthwise layers (112x112x32 as channel-major result: three edge
    variants): rolled, every variant's loop is under 256 instructions (a QPU instruction cache
    holds 512), the whole program about a third of the unrolled one (the same 10-column
    strips); so are the 14-column loops of split accumulators."""
    plans = [make_plan("depthwise", 112, 112, 32, (3, 3), (1, 1), (1, 1, 1, 1), "relu6",
                       out_layout="chw", rolled=rolled, split_accumulators=split)
             for rolled, split in ((True, 0), (False, 0), (True, 1))]
    rolled, unrolled, split = (program_for(plan) for plan in plans)
    assert [len(plan.variants) for plan in plans] == [3, 3, 3]
    assert plans[2].tile_cols == 14
    for program in (rolled, split):
        for index in range(3):
            start = program.labels[f"loop{index}"]
            end = min(address for name, address in program.labels.items()
                      if name.startswith("zero_") and address > start)
            assert (end - start) // 8 < 256
    assert len(rolled.words) * 2 < len(unrolled.words)


def test_fp16_storage_has_30_accumulators_too():
    """fp16 results are packed into the accumulators they come from, so halves take no
    accumulator: 3 x 10 of them in both storages, 3 x 11 refused (split accumulators: 3 x 14,
    3 x 15 refused)."""
    for storage in ("fp32", "fp16"):
        for split, cols in ((0, 10), (1, 14)):
            make_plan("depthwise", 9, 30, 16, (3, 3), (1, 1), (1, 1, 1, 1), tile_cols=cols,
                      in_storage=storage, out_storage=storage, split_accumulators=split)
            with pytest.raises(PlanError, match=f"{3 * cols} registers"):
                make_plan("depthwise", 9, 30, 16, (3, 3), (1, 1), (1, 1, 1, 1),
                          tile_cols=cols + 1, in_storage=storage, out_storage=storage,
                          split_accumulators=split)


# (H, W, C, stride, layout, activation, tiling): every accumulator in use (3 x 10, 2 x 15),
# halves packed into them one pixel per word ("hwc") or two ("chw" pixel pairs, an odd last
# store), relu6 (two ops per result) and none (one: the word is written two ops after its pack).
FP16_WIDE = [
    (11, 23, 19, 1, "chw", "relu6", dict(tile_cols=10, in_chunk=3, out_chunk=5)),
    (11, 23, 17, 1, "hwc", None, dict(tile_cols=10, in_chunk=3, out_chunk=3)),
    (17, 29, 17, 2, "hwc", "relu6", dict(tile_cols=15, in_chunk=2, out_chunk=2)),
    (17, 29, 33, 2, "chw", None, dict(tile_cols=15, in_chunk=2, out_chunk=7)),
]


@pytest.mark.parametrize("rolled", [True, False])
@pytest.mark.parametrize("case", FP16_WIDE, ids=str)
def test_fp16_storage_with_every_accumulator(device, case, rolled):
    h, w, c, stride, layout, activation, tiling = case
    rng = np.random.default_rng(h * w + c)
    x = rng.standard_normal((h, w, c)).astype(F16)
    wt = rng.standard_normal((3, 3, c)).astype(F16)
    bias = rng.standard_normal(c).astype(F16)
    y = depthwise(x, wt, bias, stride=stride, padding="same", activation=activation,
                  device=device, num_qpus=3, tiling=dict(tiling, rolled=rolled),
                  out_layout=layout)
    assert y.dtype == F16
    pads, _ = resolve_padding("test", "same", h, w, 3, 3, stride, stride)
    expected, magnitude = spatial_reference.depthwise(x, wt, bias, stride, pads, activation)
    if layout == "chw":
        expected = np.moveaxis(expected, 2, 0)
        magnitude = np.moveaxis(magnitude, 2, 0) if np.ndim(magnitude) == 3 else magnitude
    check(y, expected, magnitude, terms=9)


@pytest.mark.parametrize("by_variant", [0, 1])
@pytest.mark.parametrize("rolled", [True, False])
def test_tiles_variant_by_variant(device, by_variant, rolled):
    """Three variants (left edge, middle, narrower right edge) over 3 QPUs, in strips or variant
    by variant: the same result as the direct loop."""
    run_case(device, 9, 29, 33, 1, "same", "relu6", True, 3,
             tiling=dict(tile_cols=5, by_variant=by_variant, rolled=rolled))


@pytest.mark.parametrize("qpus", [1, 3, 4, 12])
@pytest.mark.parametrize("by_variant", [0, 1])
def test_every_tile_goes_to_one_qpu(qpus, by_variant):
    """Each tile to exactly one QPU, counts within one; variant by variant, every QPU's tiles
    in variant order (all QPUs go through the variants in step)."""
    plan = make_plan("depthwise", 30, 47, 40, (3, 3), (1, 1), (1, 1, 1, 1), num_qpus=qpus,
                     tile_cols=8, tile_rows=10, by_variant=by_variant)
    assert len(plan.variants) == 3
    shares = plan.qpu_tiles()
    assert sorted(map(dataclasses.astuple, (t for share in shares for t in share))) == \
        sorted(map(dataclasses.astuple, plan.tiles))
    assert max(map(len, shares)) - min(map(len, shares)) <= 1
    if by_variant:
        assert all([t.variant for t in share] == sorted(t.variant for t in share)
                   for share in shares)


def test_long_runs_take_the_tiles_variant_by_variant():
    """The default order: variant by variant where a QPU's contiguous run would span a whole
    block's strips of three variants or more (a channel-major plan on 3 QPUs), or of two in a
    channel-major plan (28 columns in two 14-column strips), or where the QPUs of a slice
    would run tiles of different variants at once (their k-th tiles); in strips where each
    slice's QPUs take the same variant in step, or there is one variant."""
    pads = (1, 1, 1, 1)
    assert make_plan("depthwise", 28, 28, 256, (3, 3), (1, 1), pads, out_layout="chw",
                     split_accumulators=0).by_variant == 1
    assert make_plan("depthwise", 28, 28, 256, (3, 3), (1, 1), pads,
                     out_layout="chw").by_variant == 1
    two = make_plan("depthwise", 28, 28, 64, (3, 3), (1, 1), pads, tile_cols=14, max_qpus=4)
    assert len(two.variants) == 2 and two.by_variant == 0
    assert all(len({run[k].variant for run in contiguous(two)}) == 1 for k in (0, 1))
    assert make_plan("depthwise", 14, 14, 512, (3, 3), (1, 1), pads,
                     out_layout="chw").by_variant == 0
    fp16 = dict(in_storage="fp16", out_storage="fp16", w_storage="fp16")
    # 8 QPUs, a block's 8 strips of 7 columns, two each: QPU 3's second tile is the right
    # edge's while QPUs 0-2 take interior strips (v1 1.0/224 dw2).
    mixed = make_plan("depthwise", 112, 112, 64, (3, 3), (2, 2), (0, 1, 0, 1), **fp16)
    assert (mixed.qpus, len(mixed.variants)) == (8, 2)
    assert len({run[1].variant for run in contiguous(mixed)[:4]}) == 2
    assert mixed.by_variant == 1
    # 8 QPUs, each a block's two strips: every QPU of a slice on the same variant (v1 dw6).
    in_step = make_plan("depthwise", 28, 28, 256, (3, 3), (2, 2), (0, 1, 0, 1), **fp16)
    assert all(len({run[k].variant for run in contiguous(in_step)[:4]}) == 1 for k in (0, 1))
    assert in_step.by_variant == 0


def contiguous(plan):
    """The QPUs' runs of the tile list in strips (``by_variant`` 0)."""
    return dataclasses.replace(plan, by_variant=0).qpu_tiles()


def test_loops_roll_where_that_shortens_them():
    """The default loop shape: rolled where its body is shorter than the unrolled period (every
    stride-1 3x3 layer; a stride-2 layer with an even store count per row), unrolled where two
    store buffers make the rolled body two output rows anyway (7 one-pixel stores per row on
    12 QPUs at stride 2: MobileNet v2's 14x14x576 layer with two store buffers)."""
    same = (1, 1, 1, 1)
    assert make_plan("depthwise", 14, 14, 512, (3, 3), (1, 1), same, out_layout="chw").rolled
    assert make_plan("depthwise", 112, 112, 32, (3, 3), (1, 1), same).rolled
    assert make_plan("depthwise", 28, 28, 192, (3, 3), (2, 2), (0, 1, 0, 1)).rolled
    assert make_plan("depthwise", 14, 14, 576, (3, 3), (2, 2), (0, 1, 0, 1)).rolled
    unrolled = make_plan("depthwise", 14, 14, 576, (3, 3), (2, 2), (0, 1, 0, 1), max_qpus=12,
                         store_buffers=2)
    assert (unrolled.rolled, unrolled.out_chunk, unrolled.store_buffers) == (0, 1, 2)


def test_nhwc_plans_spread_over_the_qpus_their_chunks_fit():
    """The default "hwc" plan: tiles as wide as the accumulators allow (evened out; split
    accumulators at stride 1: 14 columns), 3-pixel loads into two buffers and 2-pixel stores
    from one: 8 rows of the 64 each, so 8 QPUs of 12 (of 4: 16 rows each, which hold two store
    buffers; the chunks grow to fill them)."""
    plan = make_plan("depthwise", 112, 112, 32, (3, 3), (1, 1), (1, 1, 1, 1))
    assert (plan.tile_cols, plan.qpus, plan.in_chunk, plan.out_chunk, plan.store_buffers) == \
        (14, 8, 3, 2, 1)
    plan = make_plan("depthwise", 28, 28, 256, (3, 3), (2, 2), (0, 1, 0, 1), num_qpus=4)
    assert (plan.tile_cols, plan.qpus, plan.in_chunk, plan.out_chunk, plan.store_buffers) == \
        (14, 4, 4, 4, 2)
