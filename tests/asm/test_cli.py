"""``python -m asm``: in a subprocess (exit codes, no tracebacks) and in-process (``main``)."""

import os
import subprocess
import sys

import pytest

from asm.__main__ import main

from .reference_words import alu

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROGRAM = """\
# r1 = 4 * uniform
        mov ra0, uniform
        ldi r1, 0
        ldi r2, 4
loop:   sub.sf r2, r2, 1
        add r1, r1, ra0
        branch.any_zc loop
        nop
        nop
        nop
        mov host_int, 1
        thrend
        nop
        nop
"""
HOST_INT_MOV = alu(sig=13, op_add=21, cond_add=1, waddr_add=38, raddr_b=1, add_a=7, add_b=7)  # or host_int, 1, 1


def run(*args):
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "asm", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=60)


def test_subprocess_assemble_and_disasm_round_trip(tmp_path):
    source = tmp_path / "prog.s"
    source.write_text(PROGRAM)
    done = run("assemble", source)
    assert done.returncode == 0, done.stderr
    code = (tmp_path / "prog.bin").read_bytes()
    assert len(code) == 13 * 8
    assert int.from_bytes(code[9 * 8:10 * 8], "little") == HOST_INT_MOV
    listing = run("disasm", tmp_path / "prog.bin")
    assert listing.returncode == 0, listing.stderr
    assert "branch.any_zc L24" in listing.stdout and "L24:" in listing.stdout
    (tmp_path / "again.s").write_text(listing.stdout)
    again = run("assemble", tmp_path / "again.s", "--format", "hex", "-o", tmp_path / "again.hex")
    assert again.returncode == 0, again.stderr
    hex_words = (tmp_path / "again.hex").read_text().split()
    assert [int(w, 16) for w in hex_words] == [int.from_bytes(code[i:i + 8], "little")
                                               for i in range(0, len(code), 8)]
    assert run("disasm", tmp_path / "again.hex").stdout == listing.stdout


@pytest.mark.parametrize("args, source, message", [
    (("assemble", "{dir}/bad.s"), "fadd r0, r1, rx2\n", "bad.s:1: column 14: unknown register 'rx2'"),
    (("assemble", "{dir}/bad.s"), "mov ra1, r0\nmov r1, ra1\nmov host_int, 1\nthrend\nnop\nnop\n",
     "bad.s:2: [regfile_raw]"),
    (("assemble", "{dir}/missing.s"), None, "No such file"),
    (("disasm", "{dir}/bad.s", "--format", "hex"), "zz\n", "bad.s:1: 'zz' is not a hex number"),
    (("disasm", "{dir}/bad.s", "--format", "bin"), "123456\n", "7 bytes, not a multiple of 8"),
    (("assemble",), None, "required: FILE"),
    (("frobnicate",), None, "invalid choice"),
])
def test_subprocess_errors_are_one_line_with_status_1(tmp_path, args, source, message):
    if source is not None:
        (tmp_path / "bad.s").write_text(source)
    done = run(*[a.format(dir=tmp_path) for a in args])
    assert done.returncode == 1
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_no_check_skips_the_hazard_checker(tmp_path):
    (tmp_path / "h.s").write_text("mov ra1, r0\nmov r1, ra1\n")
    assert main(["assemble", str(tmp_path / "h.s"), "--no-check", "-o", str(tmp_path / "h.bin")]) == 0
    assert len((tmp_path / "h.bin").read_bytes()) == 16


def test_in_process_main(tmp_path, capsys):
    (tmp_path / "p.s").write_text(PROGRAM)
    assert main(["assemble", str(tmp_path / "p.s"), "--format", "hex"]) == 0
    words = (tmp_path / "p.hex").read_text().split()
    assert len(words) == 13 and all(len(w) == 16 for w in words)
    assert main(["disasm", str(tmp_path / "p.hex"), "-o", str(tmp_path / "p.txt")]) == 0
    assert "mov host_int, 1" in (tmp_path / "p.txt").read_text()
    capsys.readouterr()
    assert main(["disasm", str(tmp_path / "nothing.bin")], prog="vc4nn") == 1
    assert capsys.readouterr().err.startswith("vc4nn disasm: error:")


def test_help(capsys):
    assert main(["--help"]) == 0        # a status to return, not an exit from inside main()
    out = capsys.readouterr().out
    assert "assemble" in out and "disasm" in out
    assert "python -m asm assemble prog.s --format hex" in out      # worked examples
    assert main(["disasm", "--help"]) == 0
    assert "--format {auto,bin,hex}" in capsys.readouterr().out
