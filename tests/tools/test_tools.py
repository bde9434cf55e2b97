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


@pytest.mark.parametrize("case", ["sgemm1", "dma"])
def test_calibrate_compares_with_published(case):
    args = ["--case", case] + (["--n", "64"] if case == "sgemm1" else [])
    out = run_tool("calibrate.py", *args)
    assert "published" in out


def test_bench_gemm_layers_small():
    out = run_tool("bench_gemm_layers.py", "--only", "pw1,pool", "--pixels", "16", "--alpha",
                   "0.25", "--size", "128")
    assert "ESTIMATES" in out
    assert re.search(r"pw1 +1x16x8->16 .* D2 +12 +\d+ .*%", out)     # 16 pixels: 2 per QPU
    assert re.search(r"pool +4x4x256->256 ", out)
