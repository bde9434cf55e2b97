"""vc4nn run: a kernel author's main loop. Give a program its buffers and uniforms, run it,
look at the buffers it wrote.

    vc4nn run examples/hello.s --qpus 12 --buffer out=12x16 --uniforms 'out[q]' q --dump out

Buffers: --buffer NAME=SHAPE[:DTYPE] (zero-filled; SHAPE like 64x16; DTYPE a numpy name,
default uint32) and --input NAME=FILE.npy (holding the file's array). Uniforms: each value
of --uniforms is an expression evaluated once per QPU, from integers (0x.. too), floats
(stored as float32 bits), buffer names (the bus address of element 0), NAME[i] (the address
of row i), q (the QPU's index), num_qpus, + - * // % << >> and parentheses. After the
run: --dump NAME prints a buffer, --save NAME=FILE.npy writes it.
"""

import argparse
import ast
import math
import operator
import os
import re

import numpy as np

from .cli_common import count, finite_seconds, open_for, print_run, qpus
from .device import DEFAULT_TIMEOUT_S, buffer_dtype
from .emulator.memory import DEFAULT_GUARD_BYTES
from .errors import DeviceError, Vc4nnError
from .progress import InstructionProgress

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
RESERVED = ("q", "num_qpus", "inf", "nan")
# Buffers printed by --dump are shown whole up to this many elements, summarised beyond.
DUMP_WHOLE_ELEMENTS = 4096
MAX_EXPRESSION_CHARS = 200


class RunArgumentError(Vc4nnError):
    """A ``vc4nn run`` option that cannot be used (bad buffer spec, unknown name, bad file)."""


# -- argument types ----------------------------------------------------------------------------

def _name_and_value(text, option, what):
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or not value:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME={what}")
    if not NAME.match(name) or name in RESERVED:
        raise argparse.ArgumentTypeError(f"{text!r}: {name!r} is not a usable buffer "
                                         f"name (letters, digits, _; not {' or '.join(RESERVED)})")
    return name, value


def buffer_spec(text):
    """``NAME=SHAPE[:DTYPE]`` -> (name, shape tuple, numpy dtype)."""
    name, value = _name_and_value(text, "--buffer", "SHAPE[:DTYPE]")
    shape_text, _, dtype_text = value.partition(":")
    try:
        shape = tuple(int(d) for d in shape_text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: shape {shape_text!r} is not like "
                                         f"64x16") from None
    if not shape or any(d < 1 for d in shape):
        raise argparse.ArgumentTypeError(f"{text!r}: every dimension must be >= 1")
    try:
        dtype = buffer_dtype(dtype_text or "uint32")
    except DeviceError as error:
        raise argparse.ArgumentTypeError(f"{text!r}: {error}") from None
    return name, shape, dtype


def file_spec(option, suffix=".npy"):
    def parse(text):
        name, path = _name_and_value(text, option, f"FILE{suffix}")
        return name, path
    parse.__name__ = option.lstrip("-")
    return parse


class Uniform:
    """One ``--uniforms`` value: an expression checked when parsed, evaluated once per QPU."""

    _operators = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
                  ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
                  ast.LShift: operator.lshift, ast.RShift: operator.rshift}

    def __init__(self, text):
        self.text = text
        if len(text) > MAX_EXPRESSION_CHARS:
            raise argparse.ArgumentTypeError(f"uniform {text[:40]!r}... is longer than "
                                             f"{MAX_EXPRESSION_CHARS} characters")
        try:
            self.tree = ast.parse(text.strip(), mode="eval").body
        except SyntaxError:
            raise argparse.ArgumentTypeError(f"uniform {text!r} is not an expression (ints, "
                                             f"floats, buffer names, q, + - * //)") from None
        self.names = set()
        self._check(self.tree)

    def _check(self, node):
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return
        if isinstance(node, ast.Name):
            self.names.add(node.id)
            return
        if isinstance(node, ast.BinOp) and type(node.op) in self._operators:
            self._check(node.left)
            self._check(node.right)
            return
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            self._check(node.operand)
            return
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            self.names.add(node.value.id)
            self._check(node.slice)
            return
        raise argparse.ArgumentTypeError(f"uniform {self.text!r}: {ast.unparse(node)!r} is not "
                                         f"allowed (ints, floats, buffer names, NAME[i], q, "
                                         f"num_qpus, + - * // % << >>)")

    def value(self, buffers, qpu, num_qpus):
        """The uniform of QPU ``qpu``: an int (32-bit, signed or not) or a float."""
        names = {"q": qpu, "num_qpus": num_qpus, "inf": math.inf, "nan": math.nan}
        unknown = sorted(self.names - set(names) - set(buffers))
        if unknown:
            raise RunArgumentError(f"uniform {self.text!r} names {', '.join(unknown)}, which is "
                                   f"not a buffer (buffers: {', '.join(buffers) or 'none'}; "
                                   f"give them with --buffer or --input)")

        def evaluate(node):
            if isinstance(node, ast.Constant):
                return node.value
            if isinstance(node, ast.Name):
                return buffers[node.id].address if node.id in buffers else names[node.id]
            if isinstance(node, ast.UnaryOp):
                x = evaluate(node.operand)
                return -x if isinstance(node.op, ast.USub) else x
            if isinstance(node, ast.Subscript):
                if node.value.id not in buffers:
                    raise RunArgumentError(f"uniform {self.text!r}: {node.value.id} is not a "
                                           f"buffer, so it cannot be indexed")
                buf = buffers[node.value.id]
                index = evaluate(node.slice)
                if not isinstance(index, int) or not -len(buf) <= index < len(buf):
                    raise RunArgumentError(f"uniform {self.text!r} on QPU {qpu}: index {index} "
                                           f"is outside {node.value.id} (first dimension "
                                           f"{len(buf)})")
                return buf[index:index + 1].address if index >= 0 else buf[index:].address
            left, right = evaluate(node.left), evaluate(node.right)
            if isinstance(node.op, (ast.LShift, ast.RShift)) and not 0 <= right < 64:
                raise RunArgumentError(f"uniform {self.text!r}: shift by {right} (0..63)")
            try:
                result = self._operators[type(node.op)](left, right)
            except (ZeroDivisionError, TypeError, ValueError, OverflowError) as error:
                raise RunArgumentError(f"uniform {self.text!r} on QPU {qpu}: {error}") from None
            if isinstance(result, int) and abs(result) >= 1 << 64:
                raise RunArgumentError(f"uniform {self.text!r} on QPU {qpu}: {result} does not "
                                       f"fit in 32 bits")
            return result

        result = evaluate(self.tree)
        if isinstance(result, float) and any(name in buffers for name in self.names):
            raise RunArgumentError(f"uniform {self.text!r}: an address is an integer; this "
                                   f"expression gives the float {result}")
        return result

    def __repr__(self):
        return f"Uniform({self.text!r})"


def add_arguments(run):
    run.add_argument("file", metavar="PROGRAM", help="program: .s text, .bin raw words or .hex "
                     "listing")
    run.add_argument("--qpus", type=qpus, default=1, help="run the program on this many QPUs "
                     "(1..12, default 1)")
    run.add_argument("--buffer", type=buffer_spec, action="append", default=[],
                     metavar="NAME=SHAPE[:DTYPE]", help="a zero-filled device buffer, e.g. "
                     "out=64x16:uint32 (dtype default uint32)")
    run.add_argument("--input", type=file_spec("--input"), action="append", default=[],
                     metavar="NAME=FILE.npy", help="a device buffer holding the array of a .npy "
                     "file")
    run.add_argument("--uniforms", type=Uniform, nargs="*", default=[], metavar="EXPR",
                     help="the uniforms of every QPU, one expression each: ints, floats, buffer "
                     "names (their address), NAME[i] (address of row i), q (the QPU's index), "
                     "num_qpus, + - * // %% << >>")
    run.add_argument("--qpu-uniforms", nargs="+", action="append", default=[],
                     metavar=("Q", "EXPR"), help="the uniforms of QPU Q alone (instead of "
                     "--uniforms), e.g. --qpu-uniforms 1 out 7; repeat for other QPUs")
    run.add_argument("--dump", action="append", default=[], metavar="NAME",
                     help="print this buffer after the run")
    run.add_argument("--save", type=file_spec("--save"), action="append", default=[],
                     metavar="NAME=FILE.npy", help="write this buffer to a .npy file after the run")
    run.add_argument("--timeout", type=finite_seconds, default=DEFAULT_TIMEOUT_S,
                     help=f"seconds (default {DEFAULT_TIMEOUT_S:g}); in the emulator, modelled time")
    run.add_argument("--guard-bytes", type=count, default=None, metavar="N",
                     help=f"emulator: unmapped bytes kept after every buffer, so an overrun of "
                     f"up to N bytes faults naming the buffer (default {DEFAULT_GUARD_BYTES})")


def run_main(args):
    """The handler of ``vc4nn run``."""
    names = [b[0] for b in args.buffer] + [i[0] for i in args.input]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise RunArgumentError(f"buffer {', '.join(repeated)} is given twice (--buffer/--input)")
    for name in list(args.dump) + [s[0] for s in args.save]:
        if name not in names:
            raise RunArgumentError(f"--dump/--save {name!r}: no such buffer (buffers: "
                                   f"{', '.join(names) or 'none'})")
    for name, path in args.save:
        if not path.endswith(".npy"):
            raise RunArgumentError(f"--save {name}={path}: the file must end in .npy")
    inputs = [(name, _load_npy(name, path)) for name, path in args.input]
    program = load_program(args.file)
    with open_for(args) as device:
        buffers = {name: device.alloc(shape, dtype) for name, shape, dtype in args.buffer}
        for name, data in inputs:
            buffers[name] = device.array(data)
        per_qpu = _per_qpu_uniforms(args)
        uniforms = [[u.value(buffers, q, args.qpus) for u in per_qpu[q]]
                    for q in range(args.qpus)]
        with InstructionProgress(device, quiet=args.quiet, what=os.path.basename(args.file)):
            result = device.execute(program, num_qpus=args.qpus, uniforms=uniforms,
                                    timeout=args.timeout)
        print_run(result)
        for name in args.dump:
            _dump(name, buffers[name])
        for name, path in args.save:
            try:
                np.save(path, np.asarray(buffers[name]), allow_pickle=False)
            except OSError as error:
                raise RunArgumentError(f"--save {name}={path}: {error.strerror or error}") \
                    from None
            print(f"saved {name} to {path}")
    return 0


def _per_qpu_uniforms(args):
    """The Uniform list of each QPU: --uniforms, replaced by --qpu-uniforms Q for QPU Q."""
    per_qpu = [list(args.uniforms) for _ in range(args.qpus)]
    for q_text, *expressions in args.qpu_uniforms:
        try:
            q = int(q_text, 0)
        except ValueError:
            raise RunArgumentError(f"--qpu-uniforms {q_text}: the first value is the QPU "
                                   f"number (0..{args.qpus - 1})") from None
        if not 0 <= q < args.qpus:
            raise RunArgumentError(f"--qpu-uniforms {q_text}: QPU {q} is not among the "
                                   f"{args.qpus} QPUs of --qpus (0..{args.qpus - 1})")
        try:
            per_qpu[q] = [Uniform(text) for text in expressions]
        except argparse.ArgumentTypeError as error:
            raise RunArgumentError(f"--qpu-uniforms {q_text}: {error}") from None
    return per_qpu


def load_program(path):
    """A Program from a text (.s/.asm/.qasm) file, or raw words from .bin/.hex."""
    from asm import code_files, parser
    if path.endswith((".s", ".asm", ".qasm")):
        return parser.assemble_file(path)
    return code_files.read_words(path)


def _load_npy(name, path):
    try:
        data = np.load(path, allow_pickle=False)
    except OSError as error:
        raise RunArgumentError(f"--input {name}={path}: {error.strerror or error}") from None
    except (ValueError, EOFError) as error:
        raise RunArgumentError(f"--input {name}={path}: not a .npy array file without Python "
                               f"objects ({error or type(error).__name__})") from None
    if not isinstance(data, np.ndarray):
        raise RunArgumentError(f"--input {name}={path}: holds several arrays (an .npz); give one")
    try:
        buffer_dtype(data.dtype)
    except DeviceError as error:
        raise RunArgumentError(f"--input {name}={path}: {error}") from None
    # The GPU reads little-endian words: a big-endian file is converted, not reinterpreted.
    return data.astype(data.dtype.newbyteorder("<"), copy=False)


def _dump(name, buf):
    shape = "x".join(map(str, buf.shape))
    print(f"{name} ({shape} {buf.dtype} at {buf.address:#010x}):")
    with np.printoptions(threshold=DUMP_WHOLE_ELEMENTS, linewidth=120):
        print(np.asarray(buf))
