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


def test_bench_emulator_dma_prints_speed_and_estimated_bandwidth():
    out = run_tool("bench_emulator.py", "--kernel", "dma", "--blocks", "2")
    assert re.search(r"[\d,]+ instructions/s", out)
    assert re.search(r"DMA traffic \d+ MB/s \(estimate\)", out)


def test_bench_emulator_sgemm_small():
    out = run_tool("bench_emulator.py", "--n", "32", "--qpus", "4")
    assert re.search(r"\d+\.\d+ GFLOPS \(estimate\)", out)


def test_profile_emulator_alu_loop():
    out = run_tool("profile_emulator.py", "--workload", "alu", "--iterations", "300")
    assert re.search(r"instructions/s; fingerprint [0-9a-f]{16}", out)


@pytest.mark.parametrize("case", ["sgemm1", "dma",
                                  pytest.param("sgemm12", marks=pytest.mark.slow)])
def test_calibration_table_stays_within_25_percent_of_the_published_figures(case):
    """tools/calibrate.py's table on the reduced shapes: a change to the timing table that moves
    a modelled figure more than 25% off its published hardware figure fails here."""
    import json
    table = json.loads(run_tool("calibrate.py", "--reduced", "--case", case, "--json"))
    rows = table["rows"]
    assert rows and table["reduced"]
    for row in rows:
        assert abs(row["model"] / row["published"] - 1) <= 0.25, row
