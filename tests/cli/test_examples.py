"""Every file in examples/ runs as its header comment shows, and prints the right numbers.

The commands are read from the files themselves (lines starting with ``python`` or ``vc4nn``
in the header), run in a scratch directory where ``examples/`` is the repository's, with
``vc4nn`` as ``python -m vc4nn.cli`` (the installed console script runs the same main()).
"""

import os
import pathlib
import re
import shlex
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
FILES = sorted(p.name for p in EXAMPLES.iterdir() if p.suffix in (".py", ".s"))

# What each example computes, written independently of the kernels (their docstrings).
HELLO = np.arange(12 * 16).reshape(12, 16)
VPM_DMA = 6 * np.arange(256).reshape(16, 16) + 1
EXPECTED = {"hello.py": HELLO, "hello.s": HELLO, "vpm_dma.py": VPM_DMA, "vpm_dma.s": VPM_DMA}


def header_commands(path):
    """The shell commands shown in the file's leading docstring or comment block."""
    text = path.read_text()
    if path.suffix == ".py":
        header = text.split('"""')[1]
    else:
        header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    commands = []
    for line in header.splitlines():
        line = line.lstrip("# ").rstrip()
        if line.startswith(("python ", "vc4nn ")) and " > " not in line:
            commands.append(shlex.split(line, comments=True))
    return commands


def run_command(argv, cwd):
    if argv[0] == "vc4nn":
        argv = [sys.executable, "-m", "vc4nn.cli"] + argv[1:]
    elif argv[0] == "python":
        argv = [sys.executable] + argv[1:]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("VC4NN_DEVICE", None)
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def printed_matrix(out, shape):
    """The numpy integer matrix printed last in ``out`` (from its last "[[" on)."""
    values = [int(v) for v in re.findall(r"\d+", out[out.rindex("[["):])]
    return np.array(values).reshape(shape) if len(values) == np.prod(shape) else values


@pytest.mark.parametrize("name", FILES)
def test_example_runs_as_its_header_shows(name, tmp_path):
    (tmp_path / "examples").symlink_to(EXAMPLES)
    commands = header_commands(EXAMPLES / name)
    runs = [c for c in commands if c[0] == "vc4nn" or "--run" in c or name.endswith(".py")]
    assert runs, f"{name} shows no command to run it"
    checked = False
    for argv in commands:
        proc = run_command(argv, tmp_path)
        assert proc.returncode == 0, (argv, proc.stderr)
        assert "Traceback" not in proc.stderr
        if "--dump" in argv or "--run" in argv:
            expected = EXPECTED[name]
            assert np.array_equal(printed_matrix(proc.stdout, expected.shape), expected), \
                proc.stdout
            checked = True
    assert checked, f"{name} shows no command that prints its result"


def test_every_example_is_covered():
    assert set(FILES) == set(EXPECTED)


def test_the_readme_shows_what_vc4nn_run_prints(tmp_path):
    # The README's `vc4nn run` sample: every line it shows (its "..." elided) is printed.
    readme = (ROOT / "README.md").read_text()
    block = readme.split("    $ vc4nn run ", 1)[1].split("\n\n", 1)[0].splitlines()
    (tmp_path / "examples").symlink_to(EXAMPLES)
    proc = run_command(shlex.split("vc4nn run " + block[0]), tmp_path)
    assert proc.returncode == 0, proc.stderr
    printed = [line.strip() for line in proc.stdout.splitlines()]
    shown = [line.strip() for line in block[1:] if line.strip() != "..."]
    assert shown and all(line in printed for line in shown), (shown, proc.stdout)
