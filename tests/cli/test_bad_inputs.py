"""Bad input, generated for every public function and CLI subcommand of the first hour, ends in
a typed error (vc4nn.errors.Vc4nnError / asm.errors.AsmError, or a one-line CLI error with
status 1) whose message names the argument: never a traceback from inside, a crash or a hang.

The values are the usual suspects: wrong types, negative and zero sizes, NaN and infinities,
empty things, huge numbers and Python objects where numbers belong.
"""

import math

import numpy as np
import pytest

import vc4nn
from asm import code_files, disasm, parser
from asm.errors import AsmError
from vc4nn.cli import main
from vc4nn.emulator import EmulatorDevice
from vc4nn.errors import Vc4nnError

from .test_vc4nn_cli import COUNTER

HUGE = 1 << 70
NOT_NUMBERS = [None, "10", b"x", [], {}, object(), np.array([1, 2]), 1j]
BAD_NUMBERS = [-1, 0, math.nan, math.inf, -math.inf, HUGE, -HUGE, True, 4.5]


def program():
    return parser.assemble_text(COUNTER, "counter.s")


@pytest.fixture
def device():
    with EmulatorDevice() as d:
        yield d


def expect_typed_error(call, argument, error=(Vc4nnError, AsmError), also=()):
    """``call()`` raises ``error`` whose message names ``argument`` (or one of the words in
    ``also``); returns the error."""
    try:
        call()
    except error as caught:
        assert any(name in str(caught) for name in (argument,) + tuple(also)), \
            f"message does not name {argument!r}: {caught}"
        return caught
    except Exception as caught:      # the failure being tested for
        pytest.fail(f"{argument}: untyped {type(caught).__name__}: {caught}")
    pytest.fail(f"{argument}: accepted")


# -- device calls -------------------------------------------------------------------------------

DEVICE_CASES = {
    "shape": (lambda d, v: d.alloc(v), ["10", b"x", {}, object(), 1j, [1.5], -1, HUGE, 4.5,
                                         math.nan, (2, -3), (HUGE, HUGE)]),
    "dtype": (lambda d, v: d.alloc(4, v), [object, "U8", "frobnicate", [("a", "i4")], 5]),
    "align": (lambda d, v: d.alloc(4, np.uint32, v), NOT_NUMBERS + BAD_NUMBERS + [3, 48]),
    "num_qpus": (lambda d, v: d.execute(program(), num_qpus=v), NOT_NUMBERS + BAD_NUMBERS + [13]),
    "uniforms": (lambda d, v: d.execute(program(), uniforms=v),
                 [5, "abc", b"x", {}, object(), [[1], [2]], [5], [["x"]], [[HUGE]], [[None]],
                  [[1.5j]], [[1], [2], [3]]]),
    "timeout": (lambda d, v: d.execute(program(), uniforms=[[1]], timeout=v),
                NOT_NUMBERS[1:] + [-1, 0, math.nan, math.inf, -math.inf, True]),
    "code": (lambda d, v: d.execute(v), [np.zeros(3, np.float32), np.zeros(3, np.uint32), b"",
                                         b"\0" * 12, [1, 2]]),
    "free": (lambda d, v: d.free(v), [np.zeros(4), 5, "x", [], object()]),
    "control_address": (lambda d, v: d.execute_control_list(1, v), ["x", None, 4.5, [1]]),
    "launch": (lambda d, v: d.execute_control_lists(v), [5, None, object(), [5], [(1,)],
                                                         [(13, 0)], [(1, "x")], [(True, 0)]]),
}


@pytest.mark.parametrize("argument", sorted(DEVICE_CASES))
def test_device_calls_refuse_bad_arguments_by_name(argument, device):
    call, values = DEVICE_CASES[argument]
    for value in values:
        expect_typed_error(lambda: call(device, value), argument)


def test_open_device_names_unknown_options_and_lists_the_valid_ones():
    error = expect_typed_error(lambda: vc4nn.open_device(frobnicate=1), "frobnicate")
    assert "max_instructions" in str(error) and "guard_bytes" in str(error)
    for name in (5, "gpu", b"emulator"):
        expect_typed_error(lambda: vc4nn.open_device(name), "device")


@pytest.mark.parametrize("option, values", [
    ("board", ["pi9", 5, None]),
    ("check", ["bogus", 5, {"nope": "warn"}, {"ldtmu_empty": "maybe"}]),
    ("max_instructions", [0, -1, 4.5, "10", math.nan]),
    ("guard_bytes", [-1, 4.5, HUGE, "4096"]),
    ("progress", [5, "bar"]),
    ("seed", ["x", 4.5, []]),
])
def test_emulator_options_are_checked_by_name(option, values):
    for value in values:
        keyword = "checks" if option == "check" else option
        expect_typed_error(lambda: EmulatorDevice(**{keyword: value}).close(), option)


def test_a_closed_device_says_it_is_closed():
    device = EmulatorDevice()
    buf = device.alloc(4)
    device.close()
    for call in (lambda: device.alloc(4), lambda: device.array([1]),
                 lambda: device.execute(program()), lambda: device.execute_control_list(1, 0),
                 lambda: device.execute_control_lists([(1, 0)])):
        expect_typed_error(call, "closed")
    device.free(buf)        # freeing what close() already freed stays harmless


def test_non_numeric_dtypes_are_refused_before_the_gpu_can_write_them(device):
    for dtype in (object, "U4", "S4", "M8[s]", [("a", "<i4")]):
        expect_typed_error(lambda: device.alloc(16, dtype), "dtype")
    expect_typed_error(lambda: device.array(["a", "b"]), "dtype")
    for dtype in ("frob", 5, object):
        expect_typed_error(lambda: device.array([1, 2], dtype=dtype), "dtype")
    expect_typed_error(lambda: device.array([{}, []]), "array")


# -- sgemm ----------------------------------------------------------------------------------------

A = np.ones((4, 3), np.float32)
B = np.ones((3, 5), np.float32)
SGEMM_CASES = {
    "A": [None, "x", np.ones((4, 3)), np.ones(3, np.float32), np.ones((0, 3), np.float32),
          np.ones((4, 3, 2), np.float32), [[1.0]]],
    "B": [None, np.ones((4, 5), np.float32), np.ones((3, 5), np.int32)],
    "alpha": [math.nan, math.inf, "2", None, 1j],
    "beta": [math.nan, -math.inf, "0"],
    "num_qpus": [0, 13, 4.5, "12", None],
    "C": [[[1.0]], np.ones((4, 4), np.float32), np.ones((4, 5), np.int32)],
    "trans_a": ["yes", math.nan, 2],
    "device": ["emulator", 5],
}


@pytest.mark.parametrize("argument", sorted(SGEMM_CASES))
def test_sgemm_refuses_bad_arguments_by_name(argument, device):
    for value in SGEMM_CASES[argument]:
        kwargs = dict(A=A, B=B, device=device, beta=1.0 if argument == "C" else 0.0)
        kwargs[argument] = value
        expect_typed_error(lambda: vc4nn.sgemm(**kwargs), argument)


# -- the assembler and disassembler -------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "ldi r0, 0x" + "f" * 200_000,
    "ldi r0, " + "9" * 5000,
    "ldi r0, 1e999",
    "add r0, r1, " + "(" * 10_000,
    "mov r0, " + "r1." * 1000 + "r1",
    "\0\0\0",
    "nop\n" * 3 + "x" * 100_000,
])
def test_assembler_junk_is_a_parse_error_with_a_line(text):
    with pytest.raises(AsmError) as caught:
        parser.assemble_text(text, "junk.s")
    assert "junk.s:" in str(caught.value) and len(str(caught.value)) < 1000


@pytest.mark.parametrize("words", [5, "x", None, [1.5], np.zeros(3, np.float32), [object()],
                                   [-1], [1 << 64], [True]])
def test_instruction_words_must_be_64_bit_ints(words):
    from asm import Program
    # a float word was silently truncated by int(); now every entry point refuses it
    for call in (lambda: Program.from_words(words), lambda: disasm.disassemble(words)):
        expect_typed_error(call, "word")


def test_asm_entry_points_refuse_wrong_types():
    for text in (5, None, b"nop"):
        expect_typed_error(lambda: parser.assemble_text(text, "t.s"), "program text")
    expect_typed_error(lambda: parser.assemble_file(None), "path")
    expect_typed_error(lambda: code_files.read_words("/etc/hostname", "frob"), "format")


def test_disassembling_a_device_file_is_bounded(tmp_path):
    with pytest.raises(AsmError, match="/dev/zero: larger than"):
        code_files.read_words("/dev/zero", "hex")
    with pytest.raises(AsmError, match="/dev/zero: larger than"):
        code_files.read_words("/dev/zero", "bin")
    with pytest.raises(AsmError, match="/dev/zero: longer than"):
        parser.assemble_file("/dev/zero")


# -- the command line -----------------------------------------------------------------------------

BAD_NUMBER_TEXT = ["-5", "0", "nan", "inf", "", "x", "1e400", "9" * 400]


def cli_error(argv, capsys):
    """Run the CLI; it must fail with status 1 and one error line (the usage line aside)."""
    status = main(argv)
    err = capsys.readouterr().err
    assert status == 1 or status == 2 and not err, (argv, status, err)
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("option", ["--m", "--n", "--k", "--qpus", "--seed", "--max-instructions"])
def test_sgemm_options_refuse_bad_numbers(option, capsys):
    for text in BAD_NUMBER_TEXT:
        if option == "--seed" and text in ("0", "9" * 400):
            continue        # valid seeds
        err = cli_error(["sgemm", option, text, "--quiet"], capsys)
        assert option in err or "--m/--n/--k" in err, (option, text, err)


@pytest.mark.parametrize("option, values", [
    ("--qpus", BAD_NUMBER_TEXT + ["13"]),
    ("--timeout", ["-5", "0", "nan", "inf", "", "x", "1e400"]),
    ("--max-instructions", BAD_NUMBER_TEXT[:-1]),
    ("--buffer", ["out", "out=", "=4", "out=4x-1", "out=0", "out=axb", "out=4:object",
                  "out=4:frob", "q=4", "1x=4", "out=4x" + "9" * 30]),
    ("--input", ["a", "a=", "a=/nonexistent.npy", "a=/dev/null", "a=/etc/hostname"]),
    ("--uniforms", ["nope", "1 +", "__import__('os')", "out.x", "lambda: 0", "1 << 100000",
                    "9" * 300, "[1]", "out[1:2]", "1 / 0", "'s'", "(" * 300, "q[1]", "out[q + 5]",
                    "out * 1.5"]),
    ("--qpu-uniforms", ["x", "5", "-1", "1e3"]),
    ("--dump", ["nope"]),
    ("--save", ["nope=x.npy", "x", "out=x.txt", "out=/nonexistent/dir/x.npy"]),
])
def test_run_options_refuse_bad_values(option, values, tmp_path, capsys):
    source = tmp_path / "k.s"
    source.write_text(COUNTER)
    for value in values:
        argv = ["run", str(source), "--buffer", "out=4", option, value, "--quiet"]
        if option == "--buffer":
            argv = ["run", str(source), option, value, "--quiet"]
        err = cli_error(argv, capsys)
        named = option in err or option.lstrip("-") in err or "uniform" in err
        assert named, (option, value, err)


@pytest.mark.parametrize("argv, fragment", [
    (["sgemm", "--m", "-5"], "--m"),
    (["sgemm", "--m", "100000", "--n", "100000"], "--m/--n/--k"),
    (["disasm", "/dev/zero", "--format", "hex"], "larger than"),
    (["disasm", "/nonexistent.bin"], "No such file"),
    (["asm", "/dev/zero", "-o", "/dev/null"], "longer than"),
    (["run", "/dev/zero"], "larger than"),
    (["run", "/nonexistent.s"], "No such file"),
    (["--frobnicate"], "unrecognized"),
    (["tune", "--rows", "5"], "vc4nn tune: error: unrecognized arguments: --rows 5"),
    (["sgemm", "extra"], "vc4nn sgemm: error: unrecognized arguments: extra"),
    (["frobnicate"], "invalid choice"),
    (["doctor", "--frobnicate"], "unrecognized"),
])
def test_cli_errors_are_one_line(argv, fragment, capsys):
    assert fragment in cli_error(argv, capsys)


def test_asm_and_disasm_refuse_to_overwrite_their_input(tmp_path, capsys):
    source = tmp_path / "x.s"
    source.write_text(COUNTER)
    assert "input file itself" in cli_error(["asm", str(source), "-o", str(source)], capsys)
    assert "input file itself" in cli_error(["assemble", str(source), "-o", str(source)], capsys)
    assert source.read_text() == COUNTER
    code = tmp_path / "x.bin"
    assert main(["asm", str(source), "-o", str(code)]) == 0
    words = code.read_bytes()
    assert "input file itself" in cli_error(["disasm", str(code), "-o", str(code)], capsys)
    assert code.read_bytes() == words
