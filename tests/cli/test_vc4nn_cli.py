"""The ``vc4nn`` command as a user runs it: one-line errors, exit codes, real output."""

import argparse
import pathlib
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
    from vc4nn.cli_common import print_run
    from vc4nn.device import QpuStats, RunResult
    print_run(RunResult(num_qpus=2, host_interrupts=2, qpus=[QpuStats(), QpuStats()],
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


# -- what the first hour shows ---------------------------------------------------------------------

SPIN = """\
# r0 = uniform; loop until r0 reaches 0 (5 instructions an iteration), then exit
mov r0, uniform
top:
sub.sf r0, r0, 1
branch.any_zc top
nop
nop
nop
mov host_int, 1
thrend
nop
nop
"""


def subcommands():
    """Every subcommand, as the command itself lists them when given an unknown one."""
    import contextlib
    import io
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["no-such-command"]) == 1
    return re.findall(r"'([\w-]+)'", err.getvalue().split("choose from", 1)[1])


def test_every_subcommand_has_a_line_of_help(capsys):
    assert {"asm", "disasm", "run", "sgemm", "classify", "bench-layers", "tune"} <= \
        set(subcommands())
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "see vc4nn" not in out and "vc4nn.runtime" not in out


@pytest.mark.parametrize("command", [[]] + [[name] for name in subcommands()])
def test_help_texts_name_the_command_and_have_no_markup(command, capsys):
    assert main(command + ["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: " + " ".join(["vc4nn"] + command) + " ")
    assert "``" not in out and "**" not in out and ":func:" not in out, out
    assert "usage: vc4nn assemble" not in out or command == ["assemble"]


def test_version(capsys):
    import vc4nn
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"vc4nn {vc4nn.__version__}"


def test_summary_lists_issue_apart_from_stalls_and_the_launch_overhead(source, capsys):
    from vc4nn.emulator.timing import Timing
    assert main(["run", str(source), "--uniforms", "7"]) == 0
    out = capsys.readouterr().out
    timing = Timing()
    # 7 instructions at the model's issue cost; nothing else stalls this program but uniforms.
    qpu = re.search(r"QPU 0: 7 instructions, (\d+) cycles \(estimate\); issue (\d+); "
                    r"stalls: (.*)", out)
    assert qpu and int(qpu.group(2)) == 7 * timing.issue_clocks
    assert "issue" not in qpu.group(3)
    overhead_us = timing.launch_overhead * 1e6
    assert f"+ {overhead_us:.1f} us launch overhead" in out


def spin_file(tmp_path):
    path = tmp_path / "spin.s"
    path.write_text(SPIN)
    return path


def test_long_runs_show_progress_and_quiet_hides_it(tmp_path, monkeypatch, capsys):
    from vc4nn import progress
    from vc4nn.emulator.machine import PROGRESS_INTERVAL
    monkeypatch.setattr(progress, "DELAY_S", 0)     # show the bar at once
    # tqdm redraws at most every 0.1 s: the C core finishes this run before any redraw, so the
    # bar is watched on the Python core (the C core's progress calls: test_ccore_hooks.py).
    monkeypatch.setenv("VC4NN_EMULATOR_CORE", "python")
    iterations = 3 * PROGRESS_INTERVAL // 5
    argv = ["run", str(spin_file(tmp_path)), "--uniforms", str(iterations)]
    assert main(argv) == 0
    err = capsys.readouterr().err
    counts = [float(c) for c in re.findall(r"(\d+(?:\.\d+)?)k instr", err)]
    assert counts and max(counts) * 1000 >= 2 * PROGRESS_INTERVAL, err
    assert main(argv + ["--quiet"]) == 0
    assert "instr" not in capsys.readouterr().err


def test_the_instruction_budget_is_a_flag_named_in_its_error(tmp_path, capsys):
    argv = ["run", str(spin_file(tmp_path)), "--uniforms", "1000", "--max-instructions", "500"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "executed 500 instructions" in err and "--max-instructions" in err
    assert main(argv[:-2] + ["--max-instructions", "none"]) == 0


def test_sgemm_estimate_is_close_to_what_runs(capsys):
    from vc4nn.cli_sgemm import estimated_instructions
    assert main(["sgemm", "--m", "40", "--n", "40", "--k", "24", "--qpus", "4"]) == 0
    out = capsys.readouterr().out
    executed = sum(int(n) for n in re.findall(r"QPU \d+: (\d+) instructions", out))
    assert 0.6 < estimated_instructions(40, 40, 24, 4) / executed < 1.5


def test_run_dumps_and_saves_what_the_program_wrote(tmp_path, capsys):
    saved = tmp_path / "out.npy"
    hello = pathlib.Path(__file__).resolve().parents[2] / "examples" / "hello.s"
    assert main(["run", str(hello), "--qpus", "3", "--buffer", "out=3x16", "--uniforms",
                 "out[q]", "q", "--save", f"out={saved}", "--dump", "out"]) == 0
    out = capsys.readouterr().out
    assert np.array_equal(np.load(saved), np.arange(48).reshape(3, 16))
    assert "out (3x16 uint32 at 0x" in out and "[32 33 34" in out


def test_uniform_expressions_give_addresses_floats_and_per_qpu_values():
    from vc4nn.cli_run import Uniform
    from vc4nn.emulator import EmulatorDevice
    with EmulatorDevice() as device:
        buffers = {"a": device.alloc((4, 8), np.float32)}
        base = buffers["a"].address
        values = [Uniform(t).value(buffers, 2, 3) for t in
                  ("a", "a[q]", "a + 4*q", "q", "num_qpus - 1", "1.5", "-1", "0x10 << 2")]
    assert values == [base, base + 2 * 32, base + 8, 2, 2, 1.5, -1, 64]


HELLO_S = pathlib.Path(__file__).resolve().parents[2] / "examples" / "hello.s"


def test_qpu_uniforms_replace_the_shared_ones_for_one_qpu(tmp_path):
    saved = tmp_path / "out.npy"
    # QPU 1 writes row 0 with index 7 instead of row 1 with index 1; row 1 stays zero.
    assert main(["run", str(HELLO_S), "--qpus", "2", "--buffer", "out=2x16", "--uniforms",
                 "out[q]", "q", "--qpu-uniforms", "1", "out[0]", "7", "--save",
                 f"out={saved}", "--quiet"]) == 0
    out = np.load(saved)
    assert np.array_equal(out[0], 16 * 7 + np.arange(16)) and not out[1].any()


def test_big_endian_input_is_converted_not_reinterpreted(tmp_path):
    # vpm_dma.s: dst = 2 * src + 1, per word
    src, dst = tmp_path / "src.npy", tmp_path / "dst.npy"
    values = np.arange(256, dtype=">u4").reshape(16, 16) * 3
    np.save(src, values)
    program = HELLO_S.parent / "vpm_dma.s"
    assert main(["run", str(program), "--input", f"src={src}", "--buffer", "dst=16x16",
                 "--uniforms", "src", "dst", "--save", f"dst={dst}", "--quiet"]) == 0
    assert np.array_equal(np.load(dst), 2 * values.astype(np.int64) + 1)


def test_an_overrun_past_a_buffer_faults_naming_it(tmp_path, capsys):
    # hello.s stores 64 bytes at its first uniform: one row past the end of a 1-row buffer.
    assert main(["run", str(HELLO_S), "--buffer", "out=1x16", "--buffer", "next=1x16",
                 "--uniforms", "out + 64", "0", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "runs 64 bytes past the end of the 64-byte buffer" in err and "(1x16 uint32)" in err


def test_reading_past_the_uniforms_names_whose_uniforms(capsys):
    # hello.s reads two uniforms; given none (the launch passes one 0), the fault says so
    # rather than naming an anonymous "4 uint8" buffer.
    assert main(["run", str(HELLO_S), "--qpus", "2", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "QPU 0, PC" in err and "uniform access" in err
    assert "past the end of the 4-byte buffer" in err and "(the uniforms of QPU 0: 1 word)" in err


def test_guard_bytes_is_a_run_option(tmp_path, capsys):
    # hello.s stores 64 bytes at out + 64: in out's guard gap by default; with no gap it is
    # outside every allocation (the next buffer starts at the next 4 KiB), naming no buffer.
    argv = ["run", str(HELLO_S), "--buffer", "out=1x16", "--uniforms", "out + 64", "0", "--quiet"]
    assert main(argv) == 1
    assert "past the end of the 64-byte buffer" in capsys.readouterr().err
    assert main(argv + ["--guard-bytes", "0"]) == 1
    err = capsys.readouterr().err
    assert "outside every allocation" in err and "past the end" not in err
    assert main(argv + ["--guard-bytes", "0", "--device", "pi"]) == 1
    assert "--guard-bytes applies to the emulator" in capsys.readouterr().err


def test_pi_timeout_none_is_the_longest_the_mailbox_allows():
    from vc4nn.pi.backend import MAX_TIMEOUT_MS, timeout_to_ms
    assert timeout_to_ms(None) == MAX_TIMEOUT_MS
    assert timeout_to_ms(0.0015) == 2


@pytest.mark.parametrize("command", ["run", "sgemm"])
def test_max_instructions_none_means_no_budget(command, monkeypatch):
    # "none" must lift the budget, not fall back to the command's default (it did: a run past
    # 50M instructions stopped with --max-instructions none).
    from vc4nn import cli_common
    opened = []
    monkeypatch.setattr("vc4nn.open_device", lambda name, **options: opened.append(options))
    args = argparse.Namespace(device="emulator", max_instructions=None)
    for given, expected in ((None, {}), ("none", {"max_instructions": None}),
                            ("500", {"max_instructions": 500})):
        if given is not None:
            args.max_instructions = cli_common.instruction_budget(given)
        cli_common.open_for(args, 1000 if command == "sgemm" else None)
        if given is None and command == "sgemm":
            expected = {"max_instructions": 1000}
        assert opened.pop() == expected, (command, given)


def test_png_without_matplotlib_names_the_extra(monkeypatch):
    from vc4nn import cli_common
    from vc4nn.errors import Vc4nnError
    monkeypatch.setitem(sys.modules, "matplotlib", None)        # import matplotlib fails
    with pytest.raises(Vc4nnError, match=r"--png needs matplotlib: pip install 'vc4nn\[plots\]'"):
        cli_common.pyplot()


@pytest.mark.parametrize("command", ["ops", "doctor", "disasm"])
def test_subcommands_parsing_their_own_arguments_report_like_the_others(command, monkeypatch,
                                                                          capsys):
    """Ctrl-C and running out of memory in a subcommand that parses its own arguments (the
    runtime's, doctor, asm's) end with one line and a status, as in run or sgemm."""
    import vc4nn.cli as cli_module

    def stopped(_):
        raise stop

    for stop, status, said in ((KeyboardInterrupt(), 130, f"vc4nn {command}: interrupted"),
                               (MemoryError("2 GB"),
                                1, f"vc4nn {command}: error: out of memory (2 GB)")):
        monkeypatch.setattr(cli_module, "_runtime_main", lambda name: stopped)
        monkeypatch.setattr(cli_module, "_own_parser", lambda load: stopped)
        monkeypatch.setattr(cli_module, "_asm_main", lambda name: stopped)
        assert main([command]) == status
        assert capsys.readouterr().err.strip() == said
