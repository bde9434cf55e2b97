"""tools/bench_layers.py (= vc4nn bench-layers) and vc4nn tune run as a user runs them (cheap
layers only: the 7x7 pool, the tiny v1 0.25/128 depthwise)."""

import json
import re

import numpy as np
import pytest

from vc4nn.cli import main

from .test_tools import run_tool


def test_bench_layers_table_json_markdown_and_chart(tmp_path):
    out = run_tool("bench_layers.py", "--net", "v1", "--only", "pool", "--quick", "--boards",
                   "pi_zero", "--json")
    data = json.loads(out)
    (record,) = data["layers"]
    assert record["name"] == "pool" and record["board"] == "pi_zero"
    assert data["totals"][0]["board"] == "pi_zero" and data["meta"]["estimate"].startswith("cycle")
    assert {r["board"] for r in json.loads(run_tool(
        "bench_layers.py", "--net", "v1", "--only", "pool", "--boards", "pi_zero,pi1",
        "--json"))["layers"]} == {"pi_zero", "pi1"}
    # 7x7x1024 floats in, 1024 out: the bytes are the layer's, not the run's.
    assert record["bytes_moved"] == 4 * (7 * 7 * 1024 + 1024)
    assert 0 < record["ms"] < 5 and not record["reduced"]
    saved = tmp_path / "pool.json"
    saved.write_text(out)
    table = run_tool("bench_layers.py", "--from-json", str(saved))
    assert "ESTIMATES" in table and re.search(r"pool\s+global_avg_pool\s+7x7x1024->1024", table)
    assert re.search(r"v1 1/224 on pi_zero 300 MHz: \d+\.\d+ ms of kernels", table)
    md = run_tool("bench_layers.py", "--from-json", str(saved), "--markdown")
    assert md.count("| pool |") == 1


def test_bench_layers_chart(tmp_path):
    pytest.importorskip("matplotlib")     # an optional extra (plots)
    saved = tmp_path / "pool.json"
    saved.write_text(run_tool("bench_layers.py", "--net", "v1", "--only", "pool", "--quick",
                              "--boards", "pi_zero", "--json"))
    png = tmp_path / "layers.png"
    run_tool("bench_layers.py", "--from-json", str(saved), "--png", str(png))
    assert png.stat().st_size > 1000


def test_tune_cli_stores_and_reports(tmp_path, capsys):
    cache = tmp_path / "plans.json"
    assert main(["tune", "--net", "v1", "--alpha", "0.25", "--size", "128", "--only", "dw13",
                 "--qpus", "4", "--cache", str(cache), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    (row,) = report["layers"]
    assert row["layer"] == "dw13" and row["tuned_ms"] <= row["default_ms"]
    plans = json.loads(cache.read_text())["plans"]
    assert list(plans) == [row["key"]] and "board=pi_zero" in row["key"]
    assert main(["tune", "--show", "--cache", str(cache)]) == 0
    shown = capsys.readouterr().out
    assert "1 tuned layers" in shown and "depthwise" in shown and "board=pi_zero" in shown


def test_tune_tunes_handed_over_layers_as_they_run(tmp_path, capsys, monkeypatch):
    """v1 0.5/128's dw7 -> pw7 hand over channel-major: vc4nn tune searches the depthwise
    layer's QPU spread and the pointwise layer's panel widths in that layout, under keys of
    their own, and the layer calls then take those records."""
    from vc4nn import open_device
    from vc4nn.nn import depthwise, mobilenet_shapes
    from vc4nn.nn.layer_plans import plan_for
    from vc4nn.nn.tuned_plans import plan_key, tuned_plan
    cache = tmp_path / "plans.json"
    assert main(["tune", "--net", "v1", "--alpha", "0.5", "--size", "128", "--only",
                 "dw7,pw7", "--cache", str(cache), "--json"]) == 0
    rows = {r["layer"]: r for r in json.loads(capsys.readouterr().out)["layers"]}
    assert "out_layout=chw" in rows["dw7"]["key"] and "input_layout=chw" in rows["pw7"]["key"]
    assert rows["dw7"]["candidates"] > 5 and rows["pw7"]["candidates"] >= 2
    assert all(r["tuned_ms"] <= r["default_ms"] for r in rows.values())
    monkeypatch.setenv("VC4NN_TUNE_CACHE", str(cache))
    layers = {layer.name: layer for layer in mobilenet_shapes.mobilenet_v1(0.5, 128)}
    with open_device(board="pi_zero") as device:
        for name in ("dw7", "pw7"):
            layer = layers[name]
            plan, _ = plan_for(layer, layer.height, layer.width, 12, device, {}, layout="chw")
            assert plan_key(plan, "pi_zero") == rows[name]["key"]
            tuned = tuned_plan(plan, device)
            assert {k: getattr(tuned, k) for k in rows[name]["tuned"]} == rows[name]["tuned"]
        x = np.zeros((8, 8, 256), np.float32)
        _, run = depthwise(x, np.zeros((3, 3, 256), np.float32), np.zeros(256, np.float32),
                           activation="relu6", device=device, return_run=True,
                           out_layout="chw")
        assert run.num_qpus == rows["dw7"]["tuned"]["max_qpus"]


def test_bench_layers_kind_subsets_and_stalls():
    """--kind picks the GEMM half or the spatial half (what tools/bench_gemm_layers.py and
    bench_spatial.py measured); --stalls prints each cause's share, the bus occupancy and the
    tiling that ran."""
    out = run_tool("bench_layers.py", "--net", "v1", "--alpha", "0.25", "--size", "128",
                   "--kind", "gemm", "--only", "pw1,pool,dw1", "--quick", "--pixels", "16",
                   "--boards", "pi_zero", "--stalls")
    # (read channel-major: its depthwise writer hands it over, vc4nn/nn/handoff.py)
    assert re.search(r"pw1 +pointwise +64x64x8->16 +1x16x8->16 x256, chw in ", out)
    assert re.search(r"pool +global_avg_pool ", out) and "dw1" not in out
    header = next(line for line in out.splitlines() if line.startswith("net "))
    assert header.split()[-12:] == ["issue", "dma", "vpm", "unifo", "icach", "tmu", "semap",
                                    "mutex", "sfu", "idle", "bus", "tiling"]
    row = next(line for line in out.splitlines() if " pw1 " in line)
    *shares, bus = [int(cell[:-1]) for cell in row.split() if re.fullmatch(r"\d+%", cell)][2:]
    assert len(shares) == 10 and 90 <= sum(shares) <= 110 and "panel_vectors=" in row
    assert 0 < bus <= 100
    assert "target" not in out          # a subset: no verdict on the network total
    spatial = json.loads(run_tool("bench_layers.py", "--net", "v1", "--alpha", "0.25", "--size",
                                  "128", "--kind", "spatial", "--only", "conv0,pw1,pool",
                                  "--rows", "4", "--quick", "--boards", "pi_zero", "--json"))
    assert [r["name"] for r in spatial["layers"]] == ["conv0", "pool"]
    assert spatial["layers"][0]["reduced"] and spatial["target_lines"] == []


def test_bench_layers_bad_kind_is_one_line_error(capsys):
    assert main(["bench-layers", "--kind", "pointwise,dense"]) == 1
    assert "'dense' is not one of" in capsys.readouterr().err


def test_bench_layers_bad_network_is_one_line_error(capsys):
    assert main(["bench-layers", "--net", "v3"]) == 1
    assert "unknown network(s) v3" in capsys.readouterr().err


def test_bench_layers_fp16_storage(capsys):
    """--storage fp16: the depthwise, pointwise (activations and weights) and pool layers run
    with halves (half the bytes; less time for depthwise and pool)."""
    args = ["bench-layers", "--net", "v1", "--alpha", "0.25", "--size", "128", "--only",
            "dw13,pw13,pool", "--boards", "pi_zero", "--json", "--quick", "--pixels", "16"]
    records = {}
    for storage in ("fp32", "fp16"):
        assert main(args + ["--storage", storage]) == 0
        records[storage] = {r["name"]: r for r in json.loads(capsys.readouterr().out)["layers"]}
    for name in ("dw13", "pool", "pw13"):
        r16, r32 = records["fp16"][name], records["fp32"][name]
        assert r16["storage"] == "fp16"
        assert 2 * r16["bytes_moved"] == r32["bytes_moved"]
        # pw13's float32 weights are gathered through the TMU, its fp16 ones DMA'd and widened
        # by loaders (docs/kernels.md "the weights through the TMU"): not faster in the model
        assert name == "pw13" or r16["ms"] < r32["ms"]


def test_bench_layers_fp32_weights(capsys):
    """--storage fp16 --fp32-weights: a pointwise layer's activations as halves, its weights
    float32 (precision="auto"'s fp16/fp32 candidate), said by its record's storage and counted
    as 4 bytes each; the depthwise layer as with --storage fp16."""
    args = ["bench-layers", "--net", "v1", "--alpha", "0.25", "--size", "128", "--only",
            "dw13,pw13", "--boards", "pi_zero", "--json", "--quick", "--pixels", "16",
            "--storage", "fp16"]
    records = {}
    for extra in ([], ["--fp32-weights"]):
        assert main(args + extra) == 0
        records[bool(extra)] = {r["name"]: r for r in json.loads(capsys.readouterr().out)["layers"]}
    halves, mixed = records[False], records[True]
    assert mixed["dw13"]["storage"] == "fp16" and mixed["dw13"]["ms"] == halves["dw13"]["ms"]
    assert mixed["pw13"]["storage"] == "fp16/fp32"
    weights = 256 * 256         # pw13 at alpha 0.25: 256 -> 256 channels
    assert mixed["pw13"]["bytes_moved"] - halves["pw13"]["bytes_moved"] == 2 * weights


def test_bench_layers_kind_add_lists_v2_residual_adds(capsys):
    """--kind add: v2's residual adds as layers of their own (never in the default list, where
    the projection's fused residual stands for them); fp16 halves their bytes."""
    args = ["bench-layers", "--net", "v1,v2", "--alpha", "0.25", "--size", "128", "--kind",
            "add", "--boards", "pi_zero", "--json"]
    records = {}
    for storage in ("fp32", "fp16"):
        assert main(args + ["--storage", storage]) == 0
        records[storage] = json.loads(capsys.readouterr().out)["layers"]
    names = [r["name"] for r in records["fp32"]]
    # at alpha 0.25 the first block keeps 8 channels at stride 1: it has a residual too
    assert names == ["b0.add", "b2.add", "b4.add", "b5.add", "b7.add", "b8.add", "b9.add",
                     "b11.add", "b12.add", "b14.add", "b15.add"]
    b2 = records["fp32"][1]
    assert b2["shape"] == "32x32x8->8" and b2["bytes_moved"] == 3 * 32 * 32 * 8 * 4
    for r16, r32 in zip(records["fp16"], records["fp32"]):
        assert r16["storage"] == "fp16" and 2 * r16["bytes_moved"] == r32["bytes_moved"]
        assert r16["ms"] < r32["ms"]


def test_bench_layers_hands_depthwise_results_over_channel_major(capsys):
    """v1 0.5/128's dw7 -> pw7 (8x8x256: the pointwise layer would transpose its input): by
    default the depthwise layer writes channel-major and the pointwise layer runs in one launch
    instead of two, as the runtime runs them; --no-handoff measures the NHWC pair."""
    args = ["bench-layers", "--net", "v1", "--alpha", "0.5", "--size", "128", "--only",
            "dw7,pw7,dw12", "--boards", "pi_zero", "--json", "--full"]
    runs = {}
    for extra in ([], ["--no-handoff"]):
        assert main(args + extra) == 0
        runs[bool(extra)] = {r["name"]: r for r in json.loads(capsys.readouterr().out)["layers"]}
    fused, plain = runs[False], runs[True]
    assert fused["dw7"]["layout"] == fused["pw7"]["layout"] == "chw"
    assert fused["dw7"]["tiling"]["max_qpus"] < 12      # it stages whole tile rows
    assert fused["dw12"]["layout"] == "hwc"          # its pointwise reader (4x4) is direct
    assert (fused["pw7"]["launches"], plain["pw7"]["launches"]) == (1, 2)
    assert plain["dw7"]["layout"] == plain["pw7"]["layout"] == "hwc"
    assert fused["dw7"]["ms"] + fused["pw7"]["ms"] < plain["dw7"]["ms"] + plain["pw7"]["ms"]
