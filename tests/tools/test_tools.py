"""The tools under tools/ run as a user runs them and print their figures (kept small here)."""

import os
import re
import subprocess
import sys

import pytest

TOOLS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                     "tools")


def run_tool(name, *args):
    proc = subprocess.run([sys.executable, os.path.join(TOOLS, name), *args],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_bench_emulator_prints_both_cores_side_by_side():
    out = run_tool("bench_emulator.py", "--workload", "dma", "alu", "--blocks", "2",
                   "--iterations", "50")
    for workload in ("dma", "alu"):
        for timed in ("in launches", "end to end"):
            line = re.search(rf"{workload} +{timed} +\(([\d,]+) instructions\): (.*)", out)
            assert line and int(line.group(1).replace(",", "")) > 0
            assert re.search(r"python [\d,]+/s", line.group(2))
    assert "clocks (estimate)" in out


def test_bench_emulator_json():
    import json
    out = run_tool("bench_emulator.py", "--workload", "sgemm", "--n", "32", "--cores", "python",
                   "--json")
    record = json.loads(out.splitlines()[0])
    assert record["workload"] == "sgemm" and record["core"] == "python"
    assert record["instructions"] > 0 and record["instructions_per_second"] > 0
    # the launches are part of the whole call
    assert 0 < record["launch_cpu_seconds"] <= record["host_cpu_seconds"]
    assert record["end_to_end_instructions_per_second"] <= record["instructions_per_second"]


def test_profile_emulator_alu_loop():
    out = run_tool("profile_emulator.py", "--workload", "alu", "--iterations", "300")
    assert re.search(r"instructions/s; fingerprint [0-9a-f]{16}", out)


@pytest.mark.parametrize("case, reduced", [("sgemm1", True), ("dma", True), ("fft", True),
                                            pytest.param("fft", False, marks=pytest.mark.slow),
                                            pytest.param("sgemm12", False, marks=pytest.mark.slow)])
def test_calibration_table_stays_within_25_percent_of_the_published_figures(case, reduced):
    """tools/calibrate.py's table: a change to the timing table that moves a modelled figure more
    than 25% off its published hardware figure fails here. The 12-QPU SGEMM runs at its published
    shape: at the reduced N = 384 the model is ~55% above it (the shape dependence issue 11
    found), and the full shape takes seconds on the C core. The reduced FFT case runs five of
    GPU_FFT's rows (256, 1024, 4096, 8192 points in batches of 1; 256 in a batch of 10), the
    full one every size the workload builds."""
    import json
    table = json.loads(run_tool("calibrate.py", *(["--reduced"] if reduced else []),
                                "--case", case, "--json"))
    rows = table["rows"]
    assert rows and table["reduced"] == reduced
    for row in rows:
        assert abs(row["model"] / row["published"] - 1) <= 0.25, row


def test_bench_pi_launch_times_both_paths_through_the_real_backend():
    import json
    from vc4nn.runtime.bench import PI_ZERO_HOST_FACTOR
    reports = json.loads(run_tool("bench_pi_launch.py", "--launches", "3", "--qpus", "4",
                                  "--runs", "3", "--json"))
    assert [r["launch_path"] for r in reports] == ["mailbox", "direct"]
    for r in reports:
        assert (r["launches"], r["qpus"]) == (3, 4)
        assert 0 < r["host_seconds_per_launch"] < 0.01
        assert r["pi_zero_ms_per_sequence_estimate"] == \
            pytest.approx(r["host_seconds_per_launch"] * 3 * PI_ZERO_HOST_FACTOR * 1e3)
