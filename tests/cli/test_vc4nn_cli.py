"""The ``vc4nn`` command as a user runs it: one-line errors, exit codes, real output."""

import re
import subprocess
import sys

import numpy as np
import pytest

from vc4nn.cli import main

COUNTER = """\
# each QPU: r0 = uniform + element_number, then exit
mov r0, uniform
mov r1, element_number
add r0, r0, r1
mov host_int, 1
thrend
nop
nop
"""


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "k.s"
    path.write_text(COUNTER)
    return path


def test_asm_then_disasm_round_trip(source, tmp_path, capsys):
    out = tmp_path / "k.bin"
    assert main(["asm", str(source), "-o", str(out)]) == 0
    words = np.frombuffer(out.read_bytes(), dtype="<u8")
    assert len(words) == 7
    # thrend: sig 3 in bits 63:60, no ops, both writes to nop (39), reads nop (39), muxes 0
    assert int(words[4]) == (3 << 60) | (39 << 38) | (39 << 32) | (39 << 18) | (39 << 12)
    capsys.readouterr()
    assert main(["disasm", str(out)]) == 0
    text = capsys.readouterr().out
    assert "mov r0, uniform" in text and "thrend" in text


def test_run_reports_each_qpu(source, capsys):
    assert main(["run", str(source), "--qpus", "3", "--uniforms", "7"]) == 0
    out = capsys.readouterr().out
    assert "host interrupts: 3 of 3" in out
    for qpu in range(3):
        assert f"QPU {qpu}: 7 instructions" in out
    assert "estimate" in out


def failed_run_stderr(tmp_path, name, text):
    """Run ``vc4nn run`` on ``text`` in a subprocess; it must fail with a one-line error."""
    path = tmp_path / name
    path.write_text(text)
    proc = subprocess.run([sys.executable, "-m", "vc4nn.cli", "run", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    return proc.stderr


def test_run_error_names_the_line(tmp_path):
    assert "bad.s:2" in failed_run_stderr(tmp_path, "bad.s", "mov r0, uniform\nfrobnicate r0, r1\n")


def test_run_program_without_host_interrupt_is_reported(tmp_path):
    # A warning, not a failure (docs/hardware-choices.md "Launch paths").
    path = tmp_path / "silent.s"
    path.write_text("thrend\nnop\nnop\n")
    proc = subprocess.run([sys.executable, "-m", "vc4nn.cli", "run", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    assert "missing_host_interrupt" in proc.stderr and "host interrupts: 0 of 1" in proc.stdout


def test_doctor_off_a_pi_says_what_to_do(capsys):
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "not a Raspberry Pi" in out and "fix:" in out


def test_run_report_of_a_real_pi_says_what_is_measured(capsys):
    from vc4nn.cli import _print_run
    from vc4nn.device import QpuStats, RunResult
    _print_run(RunResult(num_qpus=2, host_interrupts=2, qpus=[QpuStats(), QpuStats()],
                         seconds=0.00025, board="pi3", clock_hz=300e6, estimated=False))
    out = capsys.readouterr().out
    assert "QPU 1: instruction count not available" in out
    assert "250.0 us measured on pi3" in out and "estimate" not in out


def test_sgemm_main_job_checks_against_numpy(capsys):
    assert main(["sgemm", "--m", "5", "--n", "7", "--k", "3", "--qpus", "2"]) == 0
    out = capsys.readouterr().out
    error = float(re.search(r"max relative error vs numpy ([0-9.e+-]+)", out).group(1))
    assert error < 1e-6
    assert "GFLOPS on the QPUs" in out and "cycle-model estimate" in out
