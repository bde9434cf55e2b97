"""Channel pairs in the depthwise kernel (docs/kernels.md "fp16 depthwise: channel pairs"): with
fp16 input, weights and NHWC result and whole 32-channel blocks, a lane's word holds channels
2i (16a) and 2i + 1 (16b) of a 32-channel tile, as they lie in memory: one 64-byte DMA row and
one VPM row per pixel, both halves' sums in the accumulators. Against the direct float64 loop
of tests/nn/spatial_reference.py on the same half-rounded inputs, with every dynamic check of
the emulator raising."""

import numpy as np
import pytest

from vc4nn.kernels.spatial import PlanError
from vc4nn.kernels.window_plan import make_plan
from vc4nn.nn import depthwise, prepare_depthwise
from vc4nn.nn.layer_args import resolve_padding

from . import spatial_reference
from .reference import assert_close_fp16
from .window_check import check_fp16_depthwise

F16 = np.float16

# (H, W, C, stride, padding, activation, bias, QPUs, tiling): both strides, several blocks,
# padding on every side or none, odd chunk counts (the buffers' registers swapped), one- and
# two-buffer stores, rolled and unrolled loops, tiles shorter than the image.
CASES = [
    (9, 13, 32, 2, "same", "relu6", True, 4, {}),
    (9, 13, 64, 1, "same", "relu6", True, 3, {}),
    (10, 11, 32, 2, "same", None, False, 12, dict(rolled=0)),
    (7, 9, 96, 1, (0, 2, 1, 0), "relu", True, 1, dict(rolled=0, in_chunk=1)),
    (12, 10, 64, 2, "valid", "relu6", True, 5, dict(tile_cols=3, tile_rows=2, in_chunk=2,
                                                     out_chunk=3, store_buffers=2)),
    (11, 17, 32, 1, (1, 1, 1, 1), None, True, 2, dict(tile_cols=4, in_chunk=5, out_chunk=1)),
    (8, 16, 64, 1, "same", "relu6", True, 3, dict(tile_cols=5, rolled=0)),      # every register
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_channel_pairs_match_the_direct_loop(device, case):
    *shape, tiling = case
    check_fp16_depthwise(device, *shape, dict(tiling, channel_pairs=1))


def test_channel_pairs_with_prepared_weights(device):
    """Prepared weights in device memory: the tile's 32-channel row is one word per lane."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 6, 64)).astype(F16)
    wt = rng.standard_normal((3, 3, 64)).astype(F16)
    bias = rng.standard_normal(64).astype(F16)
    prepared = prepare_depthwise(wt, bias, device=device)
    y = depthwise(x, prepared, stride=2, activation="relu6", device=device, num_qpus=2)
    prepared.free()
    pads, _ = resolve_padding("test", "same", 6, 6, 3, 3, 2, 2)
    expected, magnitude = spatial_reference.depthwise(x, wt, bias, 2, pads, "relu6")
    assert_close_fp16(y, expected, magnitude, terms=9)


def plan(channels=64, storage=("fp16", "fp16", "fp16"), layout="hwc", **tiling):
    return make_plan("depthwise", 28, 28, channels, (3, 3), (1, 1), (1, 1, 1, 1), "relu6", 12,
                     *storage, out_layout=layout, **tiling)


def test_channel_pairs_are_the_default_where_they_can_be():
    """Both strides; not for float32 tensors, a channel-major result or channels that are not
    whole 32-channel blocks. The tiles hold both channels' accumulators: 5 columns x 3 rows x
    2 (the odd channels' bias waits in regfile B)."""
    paired = plan()
    assert paired.channel_pairs == 1 and paired.blocks == 2 and paired.tile_cols == 5
    assert make_plan("depthwise", 28, 28, 64, (3, 3), (2, 2), (0, 1, 0, 1), "relu6", 12,
                     "fp16", "fp16", "fp16").channel_pairs == 1
    for other in (plan(storage=("fp32", "fp32", "fp32")), plan(storage=("fp16", "fp16", "fp32")),
                  plan(storage=("fp16", "fp32", "fp16")), plan(layout="chw"), plan(channels=48)):
        assert other.channel_pairs == 0


@pytest.mark.parametrize("tiling, message", [
    (dict(channels=48, channel_pairs=1), "multiple of 32"),
    (dict(layout="chw", channel_pairs=1), "NHWC"),
    (dict(storage=("fp32", "fp32", "fp32"), channel_pairs=1), "fp16"),
    (dict(channel_pairs=1, tile_cols=6), "30 registers"),
    (dict(channel_pairs=2), "0 or 1"),
])
def test_impossible_channel_pairs_are_refused(tiling, message):
    with pytest.raises(PlanError, match=message):
        plan(**tiling)


def test_the_tuned_plan_cache_carries_the_choice(tmp_path, monkeypatch, device):
    """``channel_pairs`` is a tiling field of the tuned-plan cache: a record saying 0 makes the
    fp16 layer run 16-channel tiles (the cycles of that explicit tiling); on a float32 layer a
    record saying 1 is not a legal plan: a warning and the default plan."""
    from vc4nn.nn.mobilenet_shapes import Layer
    from vc4nn.nn.layer_plans import plan_for, resolved_tiling
    from vc4nn.nn.tuned_plans import ENV_VAR, TuneCache, TuneCacheWarning, plan_key

    path = tmp_path / "plans.json"
    monkeypatch.setenv(ENV_VAR, str(path))
    layer = Layer("dw", "depthwise", 6, 8, 64, 64, 1, "relu6")
    rng = np.random.default_rng(5)

    def run(dtype, **kw):
        x = rng.standard_normal((6, 8, 64)).astype(dtype)
        wt = rng.standard_normal((3, 3, 64)).astype(dtype)
        return depthwise(x, wt, stride=1, activation="relu6", device=device, num_qpus=4,
                         return_run=True, **kw)[1].cycles

    def resolved(storage, tiling):
        return resolved_tiling(plan_for(layer, 6, 8, 4, device, tiling, storage=storage)[0])

    def store(storage, tiling):
        """A record as `vc4nn tune` writes it (a resolved tiling) for the layer's plan."""
        plan, _ = plan_for(layer, 6, 8, 4, device, {}, storage=storage)
        cache = TuneCache(path)
        cache.put(plan_key(plan, "pi_zero"), {"tiling": tiling, "clocks": 1})
        cache.save()

    paired, single = run(F16, tiling={}), run(F16, tiling={"channel_pairs": 0})
    assert paired != single
    store("fp16", resolved("fp16", {"channel_pairs": 0}))
    assert run(F16) == single
    store("fp32", dict(resolved("fp32", {}), channel_pairs=1))
    with pytest.warns(TuneCacheWarning, match="not a legal plan"):
        assert run(np.float32) == run(np.float32, tiling={})
