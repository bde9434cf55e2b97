"""A depthwise layer writing its result channel-major (``out_layout="chw"``) and a pointwise
layer reading such an input (``x_layout="chw"``) without its transpose launch: against the
direct float64 loops of tests/nn/spatial_reference.py and reference.py (transposed by numpy),
emulator checks on."""

import numpy as np
import pytest

from vc4nn.errors import DeviceError
from vc4nn.kernels.pointwise import PointwisePlan
from vc4nn.kernels.spatial import PlanError
from vc4nn.kernels.window_plan import make_plan
from vc4nn.nn import depthwise, pointwise, prepare_pointwise
from vc4nn.nn.layer_args import LayerArgumentError, ShapeError, resolve_padding
from vc4nn.nn.tuned_plans import plan_key

from . import spatial_reference
from .reference import assert_close, assert_close_fp16, dense

F16, F32 = np.float16, np.float32

# (H, W, C, stride, padding, activation, bias, QPUs, x dtype, result dtype, tiling): odd H/W,
# C not a multiple of 16 (1, 17, 33), both strides, every padding form, float32 and float16
# results, one and two store buffers, stores of fewer pixels than a tile row (and a last,
# shorter one), fp16 pixel pairs with an odd pixel count.
DEPTHWISE = [
    (7, 9, 17, 1, "same", "relu6", True, 12, F32, F32, None),
    (9, 7, 33, 2, "same", "relu", True, 4, F32, F32, None),
    (5, 6, 33, 2, (1, 1, 0, 1), None, False, 1, F32, F32, None),
    (6, 5, 1, 1, "valid", None, True, 12, F32, F32, None),
    (8, 11, 20, 1, (0, 2, 1, 0), "relu6", True, 12, F32, F32,
     {"tile_cols": 5, "out_chunk": 2, "store_buffers": 2}),
    (7, 9, 17, 1, "same", "relu6", True, 12, F16, F16, None),
    (5, 6, 33, 2, "same", None, True, 1, F16, F16, None),
    (9, 7, 17, 2, "valid", "relu", False, 12, F32, F16, {"tile_cols": 3, "out_chunk": 3}),
    (11, 8, 40, 1, (1, 0, 2, 1), None, True, 4, F16, F32, {"store_buffers": 1}),
]


@pytest.mark.parametrize("case", DEPTHWISE, ids=str)
def test_depthwise_writes_channel_major(device, case):
    h, w, c, stride, padding, activation, with_bias, qpus, xd, yd, tiling = case
    rng = np.random.default_rng(c + h)
    x = rng.standard_normal((h, w, c)).astype(xd)
    wt = rng.standard_normal((3, 3, c)).astype(F32)
    bias = rng.standard_normal(c).astype(F32) if with_bias else None
    y = depthwise(x, wt, bias, stride=stride, padding=padding, activation=activation,
                  device=device, num_qpus=qpus, dtype=yd, out_layout="chw", tiling=tiling)
    pads, (oh, ow) = resolve_padding("test", padding, h, w, 3, 3, stride, stride)
    expected, magnitude = spatial_reference.depthwise(x, wt, bias, stride, pads, activation)
    assert y.shape == (c, oh, ow)
    check = assert_close_fp16 if yd == F16 else assert_close
    check(y, expected.transpose(2, 0, 1), magnitude.transpose(2, 0, 1), terms=9)


def test_depthwise_channel_major_into_out(device):
    """``out=`` takes the (C, OH, OW) buffer; bytes around it are not touched."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 7, 19)).astype(F32)
    wt = rng.standard_normal((3, 3, 19)).astype(F32)
    whole = device.array(np.full((19 * 3 * 4 + 32,), 7.0, F32))
    out = whole[16:16 + 19 * 12].reshape(19, 3, 4)
    y = depthwise(device.array(x), wt, stride=2, out=out, out_layout="chw", device=device)
    assert y is out
    pads, _ = resolve_padding("test", "same", 6, 7, 3, 3, 2, 2)
    expected, magnitude = spatial_reference.depthwise(x, wt, None, 2, pads, None)
    assert_close(np.asarray(out), expected.transpose(2, 0, 1), magnitude.transpose(2, 0, 1), 9)
    assert np.all(np.asarray(whole)[:16] == 7.0) and np.all(np.asarray(whole)[16 + 19 * 12:] == 7.0)


def test_channel_major_plan_spreads_over_fewer_qpus_to_stage_whole_rows():
    """The default "chw" plan gives each QPU the VPM rows for a whole tile row per store (one
    store buffer) and two 4-pixel loads, so it runs on fewer than 12 QPUs; the NHWC plan's
    2-pixel stores and 3-pixel loads fit 8 rows, 8 QPUs. (8-column strips: without split
    accumulators; with them a 14-column tile row stages in 14 rows, 2 QPUs, and the loads
    take the rest.)"""
    pads, _ = resolve_padding("t", "same", 14, 14, 3, 3, 1, 1)
    nhwc = make_plan("depthwise", 14, 14, 512, (3, 3), (1, 1), pads, "relu6", 12)
    chw = make_plan("depthwise", 14, 14, 512, (3, 3), (1, 1), pads, "relu6", 12,
                    out_layout="chw", split_accumulators=0)
    assert nhwc.qpus == 8 and nhwc.out_chunk == 2
    assert chw.out_chunk == chw.tile_cols == 8 and chw.store_buffers == 1
    assert chw.in_chunk == 4 and chw.qpus == 4      # 64 VPM rows // (2 x 4 + 8 staging)
    half = make_plan("depthwise", 14, 14, 512, (3, 3), (1, 1), pads, "relu6", 12, "fp16",
                     "fp16", "fp16", out_layout="chw", split_accumulators=0)
    assert half.stage_rows(half.out_chunk) == 4 and half.qpus == 5     # pixel pairs: 64 // 12
    wide = make_plan("depthwise", 14, 14, 512, (3, 3), (1, 1), pads, "relu6", 12,
                     out_layout="chw")
    assert (wide.tile_cols, wide.out_chunk, wide.qpus, wide.in_chunk) == (14, 14, 2, 9)
    half = make_plan("depthwise", 14, 14, 512, (3, 3), (1, 1), pads, "relu6", 12, "fp16",
                     "fp16", "fp16", out_layout="chw")
    assert (half.tile_cols, half.stage_rows(half.out_chunk), half.qpus) == (14, 7, 4)


@pytest.mark.parametrize("size, stride, cols, unsplit", [
    (112, 2, 14, 14), (56, 2, 14, 14), (112, 1, 14, 10), (56, 1, 14, 10), (14, 1, 14, 8),
    (28, 1, 14, 10), (7, 1, 7, 7), (20, 1, 10, 10), (12, 1, 12, 8)])
def test_tiles_are_as_wide_as_fewer_strips_need(size, stride, cols, unsplit):
    """A plan widens its tiles up to what the accumulators hold (30 // rows in flight; split
    accumulators at stride 1: 14 columns, where that takes fewer strips than 10) where that
    takes fewer strips than 8 columns, evenly (a strip re-reads its halo columns, and a "chw"
    store's memory rows are a strip row long); in both layouts and storages (the split not for
    fp16 NHWC plans)."""
    pads, _ = resolve_padding("t", "same", size, size, 3, 3, stride, stride)
    for layout in ("chw", "hwc"):
        for storage in ("fp32", "fp16"):
            plan = make_plan("depthwise", size, size, 64, (3, 3), (stride, stride), pads,
                             in_storage=storage, out_storage=storage, out_layout=layout)
            split = cols > 10 and stride == 1 and (storage, layout) != ("fp16", "hwc")
            assert plan.tile_cols == (cols if split or stride == 2 else unsplit)
            assert plan.split_accumulators == split
            assert plan.tile_cols * plan.acc_sets <= (42 if plan.split_accumulators else 30)


def test_channel_major_errors(device):
    x = np.zeros((4, 4, 3), F32)
    wt = np.zeros((3, 3, 3), F32)
    with pytest.raises(LayerArgumentError, match="out_layout"):
        depthwise(x, wt, out_layout="nchw", device=device)
    out = device.alloc((4, 4, 3), F32)
    with pytest.raises(ShapeError, match=r"\(3, 4, 4\)"):
        depthwise(x, wt, out=out, out_layout="chw", device=device)
    # A channel's row longer than one VDW stride reaches (16 bits of bytes): refused.
    with pytest.raises(PlanError, match="VDW stride"):
        make_plan("depthwise", 130, 130, 16, (3, 3), (1, 1), (1, 1, 1, 1), out_layout="chw")


POINTWISE = [
    # h, w, cin, cout, qpus, bias, residual, activation
    (3, 5, 17, 33, 12, True, False, "relu"),
    (4, 4, 256, 40, 12, True, True, "relu6"),
    (7, 7, 64, 16, 1, False, False, None),
    (5, 3, 128, 130, 4, True, False, "relu6"),
]


@pytest.mark.parametrize("storage", [F32, F16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("case", POINTWISE, ids=str)
def test_pointwise_reads_channel_major_in_one_launch(device, case, storage):
    """x in "chw" (with the residual and result in x's storage): the transposed path reads it as
    it reads its own transpose, in one launch."""
    h, w, cin, cout, qpus, with_bias, with_residual, activation = case
    rng = np.random.default_rng(cin)
    x = rng.standard_normal((h, w, cin)).astype(storage)
    wt = rng.standard_normal((cin, cout)).astype(F32)
    bias = rng.standard_normal(cout).astype(F32) if with_bias else None
    res = rng.standard_normal((h, w, cout)).astype(storage) if with_residual else None
    y, run = pointwise(np.ascontiguousarray(x.transpose(2, 0, 1)), wt, bias, activation, res,
                       device=device, num_qpus=qpus, return_run=True, x_layout="chw")
    check = assert_close if storage == F32 else assert_close_fp16
    check(y, *dense(x, wt, bias, res, activation), cin)
    assert run.launches == 1 and y.dtype == storage


def test_depthwise_hands_over_to_pointwise(device):
    """The pair as the runtime runs it: the depthwise result stays on the device in "chw", the
    pointwise reads it; one launch each, and the same values as the NHWC pair (whose pointwise
    transposes: Cin*4 a multiple of 1 KB on 12 QPUs)."""
    rng = np.random.default_rng(9)
    x = device.array(rng.standard_normal((8, 9, 256)).astype(F32))
    wt = rng.standard_normal((3, 3, 256)).astype(F32)
    pw = prepare_pointwise(rng.standard_normal((256, 32)).astype(F32),
                           rng.standard_normal(32).astype(F32), device=device)
    mid, _ = depthwise(x, wt, stride=1, activation="relu6", device=device, return_run=True,
                       out_layout="chw")
    y, run = pointwise(mid, pw, activation="relu6", device=device, return_run=True,
                       x_layout="chw")
    nhwc = depthwise(x, wt, stride=1, activation="relu6", device=device)
    y_ref, run_ref = pointwise(nhwc, pw, activation="relu6", device=device, return_run=True)
    assert run.launches == 1 and run_ref.launches == 2
    np.testing.assert_array_equal(np.asarray(y), np.asarray(y_ref))
    pw.free()


def test_fp16_pair_matches_the_transposing_pair(device):
    """Halves: the depthwise layer's pixel-pair stores give the same [C, H*W] halves the
    pointwise layer's own transpose of halves would (8x9x512 fp16: that layer transposes), so
    the two routes give the same bits; and against numpy."""
    rng = np.random.default_rng(11)
    x16 = rng.standard_normal((8, 9, 512)).astype(F16)
    x = device.array(x16)
    wd = rng.standard_normal((3, 3, 512)).astype(F16)
    wp = (rng.standard_normal((512, 24)) / 8).astype(F16)
    mid = depthwise(x, wd, activation="relu6", device=device, out_layout="chw")
    nhwc = depthwise(x, wd, activation="relu6", device=device)
    assert mid.dtype == F16
    np.testing.assert_array_equal(np.asarray(mid), np.asarray(nhwc).transpose(2, 0, 1))
    y, run = pointwise(mid, wp, device=device, return_run=True, x_layout="chw")
    y_ref, run_ref = pointwise(nhwc, wp, device=device, return_run=True)
    assert (run.launches, run_ref.launches) == (1, 2) and y.dtype == F16
    np.testing.assert_array_equal(np.asarray(y), np.asarray(y_ref))
    pads, _ = resolve_padding("test", "same", 8, 9, 3, 3, 1, 1)
    dw_exp, _ = spatial_reference.depthwise(x16, wd, None, 1, pads, "relu6")
    mid16 = np.asarray(mid).transpose(1, 2, 0)        # the halves the pointwise layer read
    expected, magnitude = dense(mid16, wp, None, None, None)
    assert_close_fp16(np.asarray(y), expected, magnitude, 512)
    assert np.max(np.abs(mid16 - dw_exp)) <= 6.0 * 2.0 ** -10 + 2.0 ** -14


@pytest.mark.parametrize("storage", [F32, F16], ids=["fp32", "fp16"])
def test_pointwise_channel_major_takes_fewer_rows_per_qpu(device, storage):
    """max_rows caps a "chw" input's rows per QPU as on the NHWC transposed route: 3 rows (4
    passes on 4 QPUs), and the parking default's own (12x16x32->64 on 12 QPUs: 6 rows, 5 of
    them parked) given back as its tuned record gives it, the same run."""
    rng = np.random.default_rng(9)
    for (h, w, cin, cout, qpus), tiling in [((6, 8, 17, 33, 4), {"max_rows": 3}),
                                            ((12, 16, 32, 64, 12), None)]:
        x = rng.standard_normal((h, w, cin)).astype(storage)
        wt = rng.standard_normal((cin, cout)).astype(storage)
        bias = rng.standard_normal(cout).astype(F32)
        chw = np.ascontiguousarray(x.transpose(2, 0, 1))
        name = "fp16" if storage == F16 else "fp32"
        plan = PointwisePlan(h, w, cin, cout, qpus, True, False, "relu6", name, name, "fp32",
                             name, input_layout="chw")
        if tiling is None:
            default = pointwise(chw, wt, bias, "relu6", device=device, num_qpus=qpus,
                                return_run=True, x_layout="chw", tiling={})[1]
            assert plan.panel.park_rows and plan.most_rows < 8
            tiling = {"max_rows": plan.most_rows, "park_rows": plan.parks}
        y, run = pointwise(chw, wt, bias, "relu6", device=device, num_qpus=qpus,
                           return_run=True, x_layout="chw", tiling=tiling)
        check = assert_close if storage == F32 else assert_close_fp16
        check(y, *dense(x, wt, bias, None, "relu6"), cin)
        assert run.launches == 1
        if "park_rows" in tiling:
            assert run.cycles == default.cycles


def test_pointwise_channel_major_errors(device):
    x = np.zeros((8, 2, 3), F32)                    # (Cin, H, W)
    with pytest.raises(LayerArgumentError, match="x_layout"):
        pointwise(x, np.zeros((8, 4), F32), x_layout="whc", device=device)
    with pytest.raises(ShapeError, match="x_layout 'chw'"):
        pointwise(x, np.zeros((3, 4), F32), x_layout="chw", device=device)
    with pytest.raises(DeviceError, match="transposed route only"):
        pointwise(x, np.zeros((8, 4), F32), x_layout="chw", device=device,
                  tiling={"transpose_input": False})


def test_tuned_plan_keys_keep_nhwc_layers_and_separate_channel_major_ones():
    """The layout fields stay out of the tuned-plan cache's key at their NHWC default (records
    written before they existed still apply); a channel-major plan has a key of its own."""
    pads = (1, 1, 1, 1)
    nhwc = plan_key(make_plan("depthwise", 14, 14, 512, (3, 3), (1, 1), pads), "pi_zero")
    chw = plan_key(make_plan("depthwise", 14, 14, 512, (3, 3), (1, 1), pads,
                             out_layout="chw"), "pi_zero")
    assert "layout" not in nhwc and "out_layout=chw" in chw and nhwc != chw
    assert "layout" not in plan_key(PointwisePlan(14, 14, 512, 512, 12), "pi_zero")
    assert "input_layout=chw" in plan_key(PointwisePlan(14, 14, 512, 512, 12,
                                                        input_layout="chw"), "pi_zero")


def test_hand_over_rule(device):
    """Which pairs hand over (vc4nn/nn/handoff.py): float32 pairs whose pointwise layer reads
    x directly (not transposing) after a stride-1 depthwise layer, or a stride-2 one with at
    least 64 channels and 28x28 pixels (7x7 when the pointwise layer narrows, as v2's
    projections do), unless the route is forced; halves where the pointwise layer transposes
    anyway (1 KB rows of halves: Cin 512) or after a stride-1 depthwise layer of at least 64
    channels, a multiple of 32 channels or 112x112 pixels."""
    from vc4nn.nn.handoff import hands_over

    def pair(cin, storage="fp32", stride=1, size=28, cout=64, **forced):
        pads, _ = resolve_padding("test", "same", size, size, 3, 3, stride, stride)
        dw = make_plan("depthwise", size, size, cin, (3, 3), (stride, stride), pads, "relu6",
                       12, in_storage=storage, out_storage=storage, w_storage=storage)
        out = (size + stride - 1) // stride
        pw = PointwisePlan(out, out, cin, cout, 12, x_storage=storage, **forced)
        assert pw.transposed == (storage == "fp16" and cin == 512)
        return hands_over(dw, pw, device)

    assert pair(128) and pair(32)
    assert pair(64, stride=2, size=56) and not pair(32, stride=2, size=56)
    assert not pair(64, stride=2, size=54)                  # 27x27 pixels
    assert pair(128, stride=2, size=14) and not pair(128, stride=2, size=14, cout=128)
    assert not pair(128, stride=2, size=12)                 # 6x6 pixels
    assert not pair(48, stride=2, size=28, cout=16)         # 48 channels
    assert not pair(128, transpose_input=False) and not pair(128, max_rows=4)
    assert pair(512, "fp16") and pair(128, "fp16") and pair(64, "fp16")
    assert pair(32, "fp16") and pair(16, "fp16", size=112) and not pair(128, "fp16", stride=2, size=56)
    assert not pair(16, "fp16", size=64) and not pair(48, "fp16", size=56)
