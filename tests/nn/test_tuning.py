"""The tuned-plan cache and `vc4nn tune`: round trip, key separation, the layer functions using a
tuned plan (same cycles as the tuned record, correct results against float64 references), and a
damaged cache being a warning, not a crash. Shapes are tiny."""

import json
import warnings

import numpy as np
import pytest

from vc4nn.kernels.window_plan import make_plan
from vc4nn.nn import depthwise, pointwise
from vc4nn.nn.layer_plans import plan_for, resolved_tiling
from vc4nn.nn.mobilenet_shapes import Layer
from vc4nn.nn.tuned_plans import (ENV_VAR, TuneCache, TuneCacheWarning, layer_key, plan_key,
                                  plans_version, tuned_tiling)
from vc4nn.nn.tuning import candidates, replayed, tune_layers

from . import spatial_reference
from .reference import assert_close, assert_close_fp16, dense

DW = Layer("dw", "depthwise", 6, 9, 16, 16, 1, "relu6")
PW = Layer("pw", "pointwise", 2, 6, 16, 24, 1, "relu")


@pytest.fixture
def cache_file(tmp_path, monkeypatch):
    path = tmp_path / "plans.json"
    monkeypatch.setenv(ENV_VAR, str(path))
    return path


def store(path, plan, board, tiling, clocks=1):
    cache = TuneCache(path)
    cache.put(plan_key(plan, board), {"tiling": tiling, "clocks": clocks})
    cache.save()


def run_depthwise(device, qpus=4, **kw):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((DW.height, DW.width, DW.cin)).astype(np.float32)
    w = rng.standard_normal((3, 3, DW.cin)).astype(np.float32)
    b = rng.standard_normal(DW.cin).astype(np.float32)
    y, run = depthwise(x, w, b, 1, "same", "relu6", device=device, num_qpus=qpus,
                       return_run=True, **kw)
    expected, magnitude = spatial_reference.depthwise(x, w, b, 1, (1, 1, 1, 1), "relu6")
    assert_close(y, expected, magnitude, terms=9)
    return run


def run_pointwise(device, qpus=4, **kw):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((PW.height, PW.width, PW.cin)).astype(np.float32)
    w = rng.standard_normal((PW.cin, PW.cout)).astype(np.float32)
    b = rng.standard_normal(PW.cout).astype(np.float32)
    y, run = pointwise(x, w, b, "relu", device=device, num_qpus=qpus, return_run=True, **kw)
    expected, magnitude = dense(x, w, b, None, "relu")
    assert_close(y, expected, magnitude, terms=PW.cin)
    return run


def test_cache_round_trip(tmp_path):
    path = tmp_path / "sub" / "plans.json"
    cache = TuneCache(path)
    cache.put("k1", {"tiling": {"tile_cols": 4}, "clocks": 123})
    cache.save()
    assert json.loads(path.read_text())["plans"]["k1"]["clocks"] == 123
    assert TuneCache(path).get("k1") == {"tiling": {"tile_cols": 4}, "clocks": 123,
                                         "version": plans_version()}
    assert TuneCache(path).get("k2") is None


def test_records_of_another_version_are_ignored_with_a_warning(tmp_path):
    """A record tuned with other kernels or another cycle model (this session's instruction
    cache moved many winners) is stale: ignored, with one warning naming the file."""
    path = tmp_path / "plans.json"
    path.write_text(json.dumps({"format": 1, "plans": {
        "old": {"tiling": {"tile_cols": 4}, "clocks": 1, "version": "0" * 16},
        "unversioned": {"tiling": {"tile_cols": 4}, "clocks": 1},
        "new": {"tiling": {"tile_cols": 2}, "clocks": 1, "version": plans_version()}}}))
    with pytest.warns(TuneCacheWarning, match=r"2 record\(s\) were tuned with other kernels"):
        cache = TuneCache(path)
    assert cache.get("old") is None and cache.get("unversioned") is None
    assert cache.get("new")["tiling"] == {"tile_cols": 2}


def test_keys_separate_boards_shapes_and_qpus(cache_file, device):
    plan, _ = plan_for(DW, DW.height, DW.width, 4, device, {})
    store(cache_file, plan, "pi1", {"tile_cols": 2, "tile_rows": 3, "in_chunk": 4,
                                    "out_chunk": 1})
    shape = {"in_h": 6}
    assert layer_key("depthwise", shape, 4, "pi1") != layer_key("depthwise", shape, 4, "pi_zero")
    assert layer_key("depthwise", shape, 4, "pi1") != layer_key("depthwise", {"in_h": 7}, 4,
                                                                 "pi1")
    assert layer_key("depthwise", shape, 4, "pi1") != layer_key("depthwise", shape, 12, "pi1")
    # The device is a pi_zero preset: the pi1 record is not used.
    assert device.timing.name == "pi_zero"
    assert plan_for(DW, DW.height, DW.width, 4, device)[1] == "default"
    store(cache_file, plan, "pi_zero", {"tile_cols": 2, "tile_rows": 3, "in_chunk": 4,
                                        "out_chunk": 1})
    tuned, source = plan_for(DW, DW.height, DW.width, 4, device)
    assert source == "tuned" and tuned.tile_cols == 2
    # Another shape does not pick it up.
    other = Layer("dw", "depthwise", 7, 9, 16, 16, 1, "relu6")
    assert plan_for(other, 7, 9, 4, device)[1] == "default"


def test_the_layer_runs_the_tuned_depthwise_plan(cache_file, device):
    default = run_depthwise(device)
    tiling = {"tile_cols": 2, "tile_rows": 2, "in_chunk": 4, "out_chunk": 1}
    explicit = run_depthwise(device, tiling=tiling)
    assert explicit.cycles != default.cycles and explicit.instructions != default.instructions
    plan, _ = plan_for(DW, DW.height, DW.width, 4, device, {})
    # As `vc4nn tune` stores it: every field resolved (the tile order, say, follows the strips).
    resolved = resolved_tiling(plan_for(DW, DW.height, DW.width, 4, device, tiling)[0])
    store(cache_file, plan, "pi_zero", resolved, explicit.cycles)
    tuned = run_depthwise(device)
    assert tuned.cycles == explicit.cycles == TuneCache(cache_file).get(
        plan_key(plan, "pi_zero"))["clocks"]
    assert run_depthwise(device, tiling={}).cycles == default.cycles    # explicit overrides


def test_the_layer_runs_the_tuned_pointwise_route(cache_file, device):
    default = run_pointwise(device)
    tiling = {"transpose_input": True, "max_rows": 8}
    explicit = run_pointwise(device, tiling=tiling)
    assert explicit.launches == 2 and default.launches == 1
    plan, _ = plan_for(PW, PW.height, PW.width, 4, device, {})
    store(cache_file, plan, "pi_zero", tiling)
    tuned = run_pointwise(device)
    assert tuned.launches == 2 and tuned.cycles == explicit.cycles


def test_the_layer_runs_the_tuned_panel_width(cache_file, device):
    """The panel width is a tiling field: not part of the key, taken from the record."""
    plan, _ = plan_for(PW, PW.height, PW.width, 4, device, {})
    assert "panel_vectors" not in plan_key(plan, "pi_zero")
    widths = {vectors: run_pointwise(device, tiling={"panel_vectors": vectors})
              for vectors in (4, 8)}
    assert widths[4].instructions != widths[8].instructions
    store(cache_file, plan, "pi_zero", {"panel_vectors": 4})
    assert run_pointwise(device).instructions == widths[4].instructions


def run_recorded_depthwise(x, w, record, device):
    """(y, float64 reference, its magnitudes) of the stride-2 relu6 layer the tune tests tune,
    run by the layer with the cache: its cycles are the record's."""
    y, run = depthwise(x, w, None, 2, "same", "relu6", device=device, num_qpus=4,
                       return_run=True)
    assert run.cycles == record["clocks"]
    expected, magnitude = spatial_reference.depthwise(x, w, None, 2, (1, 1, 0, 1), "relu6")
    return y, expected, magnitude


def test_tune_stores_the_fastest_and_the_layer_reproduces_it(cache_file, device):
    layer = Layer("dw", "depthwise", 5, 8, 16, 16, 2, "relu6")
    tried = candidates(layer, 5, 8, 4, device)
    assert len(tried) >= 2 and tried[0] == resolved_tiling(plan_for(layer, 5, 8, 4, device,
                                                                    {})[0])
    result, again = tune_layers([layer, layer], device, None, num_qpus=4)
    assert again.tried is result.tried          # one search per distinct key
    assert result.best_clocks == min(clocks for _, clocks in result.tried)
    assert len(result.tried) == len(tried)
    record = TuneCache(cache_file).get(result.key)
    assert record["tiling"] == result.best and record["clocks"] == result.best_clocks
    rng = np.random.default_rng(5)
    x = rng.standard_normal((5, 8, 16)).astype(np.float32)
    w = rng.standard_normal((3, 3, 16)).astype(np.float32)
    y, expected, magnitude = run_recorded_depthwise(x, w, record, device)
    assert_close(y, expected, magnitude, terms=9)


def test_tune_fp16_keeps_its_own_records_and_the_layer_runs_them(cache_file, device):
    """`vc4nn tune --storage fp16`: the candidates are the fp16 kernels' plans (channel pairs
    here), the winner goes under the fp16 plan's key, which the fp32 layer never reads, and the
    fp16 layer runs it (the record's clocks) with results against the float64 loop."""
    layer = Layer("dw", "depthwise", 5, 8, 32, 32, 2, "relu6")
    tried = candidates(layer, 5, 8, 4, device, storage="fp16")
    assert tried[0]["channel_pairs"] == 1
    (result,) = tune_layers([layer], device, None, num_qpus=4, storage="fp16")
    plans = {s: plan_for(layer, 5, 8, 4, device, {}, s)[0] for s in ("fp16", "fp32")}
    assert result.key == plan_key(plans["fp16"], "pi_zero") != plan_key(plans["fp32"],
                                                                         "pi_zero")
    assert plan_for(layer, 5, 8, 4, device, None, "fp32")[1] == "default"
    assert plan_for(layer, 5, 8, 4, device, None, "fp16")[1] in ("tuned", "default")
    record = TuneCache(cache_file).get(result.key)
    assert record["clocks"] == result.best_clocks == min(c for _, c in result.tried)
    rng = np.random.default_rng(6)
    x = rng.standard_normal((5, 8, 32)).astype(np.float16)
    w = rng.standard_normal((3, 3, 32)).astype(np.float16)
    y, expected, magnitude = run_recorded_depthwise(x, w, record, device)
    assert_close_fp16(y, expected, magnitude, terms=9)


def test_tune_tries_with_and_without_split_accumulators(device):
    """A stride-1 layer wider than 10 columns: the default (split, one 14-column strip) and the
    10-column plan without the split are both candidates; at stride 2 the split is illegal."""
    tried = candidates(Layer("dw", "depthwise", 6, 14, 16, 16, 1, "relu6"), 6, 14, 4, device)
    assert tried[0]["split_accumulators"] == 1 and tried[0]["tile_cols"] == 14
    assert any(t["split_accumulators"] == 0 and t["tile_cols"] <= 10 for t in tried)
    tried = candidates(Layer("dw", "depthwise", 6, 14, 16, 16, 2, "relu6"), 6, 14, 4, device)
    assert all(t["split_accumulators"] == 0 for t in tried)


def test_a_corrupt_cache_warns_and_the_layer_still_runs(cache_file, device):
    cache_file.write_text("{not json")
    with pytest.warns(TuneCacheWarning, match="unreadable"):
        run_depthwise(device)
    cache_file.write_text(json.dumps({"format": 1, "plans": {"k": "junk"}}))
    with pytest.warns(TuneCacheWarning, match="malformed"):
        assert tuned_tiling("depthwise", {}, 4, device) is None


def test_an_illegal_tuned_tiling_warns_and_falls_back(cache_file, device):
    plan = make_plan("depthwise", DW.height, DW.width, DW.cin, (3, 3), (1, 1), (1, 1, 1, 1),
                     "relu6", 4)
    store(cache_file, plan, "pi_zero", {"tile_cols": 99, "tile_rows": 1, "in_chunk": 1,
                                        "out_chunk": 1})
    default = run_depthwise(device, tiling={})
    with pytest.warns(TuneCacheWarning, match="not a legal plan"):
        assert run_depthwise(device).cycles == default.cycles


def test_cache_off_and_missing_file(tmp_path, monkeypatch, device):
    monkeypatch.setenv(ENV_VAR, "off")
    assert tuned_tiling("depthwise", {}, 4, device) is None
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "absent.json"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tuned_tiling("depthwise", {}, 4, device) is None


# The parking default takes fewer rows per QPU than the route (pointwise.parking_default): v1
# 1.0/224's pw1 and pw2 on 12 QPUs, and a reduced pw1-like shape (192 pixels: 3 passes of 6
# rows per QPU, 5 of them parked, where the route's 8 rows would make 2 passes and leave no
# registers for them).
PARKING = [Layer("pw1", "pointwise", 112, 112, 32, 64, 1, "relu6"),
           Layer("pw2", "pointwise", 56, 56, 64, 128, 1, "relu6"),
           Layer("pw", "pointwise", 12, 16, 32, 64, 1, "relu6")]


@pytest.mark.parametrize("layout", ["hwc", "chw"])
@pytest.mark.parametrize("storage", ["fp32", "fp16"])
@pytest.mark.parametrize("layer", PARKING, ids=lambda layer: layer.name)
def test_the_default_pointwise_tiling_rebuilds_the_plan_that_ran(layer, storage, layout, device):
    """The tiling `vc4nn tune` records for a default plan says the rows per QPU the panel ran
    (max_rows 7, not the route's 8, for pw1's 5 parked rows), so that the record, given back
    as a tiling, builds the same panel."""
    plan, _ = plan_for(layer, layer.height, layer.width, 12, device, {}, storage, layout)
    tiling = resolved_tiling(plan)
    if layer.name != "pw2" or storage == "fp32":        # (fp16 pw2 spreads, parks nothing)
        assert plan.panel.park_rows and plan.panel.max_rows < 8
    assert tiling["max_rows"] == plan.panel.max_rows and tiling["park_rows"] == plan.parks
    again, _ = plan_for(layer, layer.height, layer.width, 12, device, tiling, storage, layout)
    assert again.panel == plan.panel and again.transposed == plan.transposed
    assert resolved_tiling(again) == tiling


@pytest.mark.parametrize("storage", ["fp32", "fp16"])
def test_the_layer_runs_a_recorded_parking_plan(storage, cache_file, device):
    """The default plan's record of a parking shape, stored as `vc4nn tune` stores it, is run
    by the layer as it is (no "not a legal plan" fallback): the same cycles as the default,
    results against the float64 loop."""
    layer = PARKING[-1]
    plan, _ = plan_for(layer, layer.height, layer.width, 12, device, {}, storage)
    store(cache_file, plan, "pi_zero", resolved_tiling(plan))
    dtype = np.float16 if storage == "fp16" else np.float32
    rng = np.random.default_rng(7)
    x = rng.standard_normal((layer.height, layer.width, layer.cin)).astype(dtype)
    w = rng.standard_normal((layer.cin, layer.cout)).astype(dtype)
    b = rng.standard_normal(layer.cout).astype(np.float32)
    default = pointwise(x, w, b, "relu6", device=device, num_qpus=12, return_run=True,
                        tiling={})[1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert plan_for(layer, layer.height, layer.width, 12, device, None, storage)[1] == \
            "tuned"
        y, run = pointwise(x, w, b, "relu6", device=device, num_qpus=12, return_run=True)
    assert run.cycles == default.cycles
    expected, magnitude = dense(x, w, b, None, "relu6")
    check = assert_close_fp16 if storage == "fp16" else assert_close
    check(y, expected, magnitude, terms=layer.cin)


def test_a_layer_that_cannot_be_tuned_is_reported_and_the_others_are_tuned(cache_file, device):
    """On 64 pixels (--pixels) the parking default of a pw1-like layer has one pass, where no
    rows can be parked: that layer is reported as not tuned, the next one is still tuned."""
    lines = []
    dw = Layer("dw", "depthwise", 5, 8, 16, 16, 2, "relu6")
    results = tune_layers([PARKING[-1], dw], device, None, num_qpus=12, pixels=64,
                          progress=lines.append)
    assert [result.layer.name for result in results] == ["dw"]
    assert any(line.startswith("pw: not tuned") and "park_rows" in line for line in lines)
    assert TuneCache(cache_file).get(results[0].key) is not None
    # The record main's tuner wrote for it (the route's 8 rows, 5 parked): skipped, with why.
    layer = PARKING[-1]
    plan, _ = plan_for(layer, layer.height, layer.width, 12, device, {})
    assert replayed(layer, layer.height, layer.width, 12, device,
                    dict(resolved_tiling(plan), max_rows=8)) == (
        None, "cannot be built: park_rows: 20 vectors do not fit in the registers left")


def test_a_partial_record_takes_the_choices_of_its_own_tiling(cache_file, device):
    """A record holding some fields only (tile_cols) gives the plan that tiling gives when it
    is passed explicitly: the other fields chosen for it, not kept from the default plan."""
    plan, _ = plan_for(DW, DW.height, DW.width, 4, device, {})
    explicit, _ = plan_for(DW, DW.height, DW.width, 4, device, {"tile_cols": 2})
    assert explicit.tile_rows != plan.tile_rows or explicit.in_chunk != plan.in_chunk
    store(cache_file, plan, "pi_zero", {"tile_cols": 2})
    tuned, source = plan_for(DW, DW.height, DW.width, 4, device)
    assert source == "tuned" and tuned == explicit


def test_the_staggered_tiling_rebuilds_the_plan_that_ran(device):
    """pw3's default retires its rows staggered with 5 rows per QPU (panel_stagger.ROWS): its
    record says so (stagger, max_rows 5), and given back as a tiling builds the same panel."""
    layer = Layer("pw3", "pointwise", 56, 56, 128, 128, 1, "relu6")
    plan, _ = plan_for(layer, layer.height, layer.width, 12, device, {}, "fp32", "chw")
    tiling = resolved_tiling(plan)
    assert tiling["stagger"] and tiling["max_rows"] == 5
    again, _ = plan_for(layer, layer.height, layer.width, 12, device, tiling, "fp32", "chw")
    assert again.panel == plan.panel and resolved_tiling(again) == tiling
