"""The ``vc4nn`` command.

    vc4nn asm FILE.s [-o OUT] [--format bin|hex]     assemble (alias: assemble; = python -m asm assemble)
    vc4nn disasm FILE                                 disassemble (same as python -m asm disasm)
    vc4nn run FILE [--qpus N] [--uniforms ...]        run a program on a device, print what it reports
    vc4nn sgemm [--m M --n N --k K] [--qpus N]        multiply random matrices on a device, check vs numpy
    vc4nn doctor                                      diagnose the Raspberry Pi set-up
    vc4nn classify | profile | bench | ops | export-mobilenet-v2    the model runtime (see
                                                      vc4nn.runtime.cli)

Every subcommand takes ``--device emulator|pi`` where it runs code (default: the emulator, or the
VC4NN_DEVICE environment variable). Errors are printed as one line and exit with status 1.
"""

import argparse
import sys

import numpy as np

from asm.errors import AsmError

from .errors import Vc4nnError


def _asm_main(argv):
    from asm.__main__ import main
    return main(argv, prog="vc4nn")


def _load_program(path):
    """A Program from a text (.s/.asm/.qasm) file, or raw words from .bin/.hex."""
    from asm import parser, disasm
    if path.endswith((".s", ".asm", ".qasm")):
        return parser.assemble_file(path)
    return disasm.read_words(path)


def _parse_uniform(text):
    text = text.strip()
    try:
        return int(text, 0)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"uniform {text!r} is neither an int nor a float")


def _print_run(result):
    launches = f" ({result.launches} launches)" if result.launches > 1 else ""
    print(f"host interrupts: {result.host_interrupts} of {result.programs}{launches}")
    for i, q in enumerate(result.qpus):
        stalls = ", ".join(f"{k} {v}" for k, v in sorted(q.stalls.items()) if v)
        cycles = "" if q.cycles is None else f", {q.cycles} cycles (estimate)"
        count = "instruction count not available" if q.instructions is None \
            else f"{q.instructions} instructions"
        print(f"QPU {i}: {count}{cycles}" + (f"; stalls: {stalls}" if stalls else ""))
    if result.cycles is not None:
        print(f"total: {result.cycles} cycles = {result.seconds * 1e6:.1f} us at "
              f"{result.clock_hz / 1e6:.0f} MHz ({result.board}), cycle-model estimate")
    elif result.seconds is not None:
        print(f"total: {result.seconds * 1e6:.1f} us measured on {result.board} "
              f"(includes the execute_qpu call)")
    for warning in getattr(result, "warnings", []) or []:
        print(f"warning: {warning}")


def _run_main(args):
    from . import open_device
    program = _load_program(args.file)
    uniforms = [args.uniforms] * args.qpus
    with open_device(args.device) as device:
        result = device.execute(program, num_qpus=args.qpus, uniforms=uniforms, timeout=args.timeout)
        _print_run(result)
    return 0


def _sgemm_main(args):
    from . import open_device, sgemm
    rng = np.random.default_rng(args.seed)
    a = rng.standard_normal((args.m, args.k), dtype=np.float32)
    b = rng.standard_normal((args.k, args.n), dtype=np.float32)
    with open_device(args.device) as device:
        c, result = sgemm(a, b, device=device, num_qpus=args.qpus, return_run=True)
    reference = a.astype(np.float64) @ b.astype(np.float64)
    error = float(np.max(np.abs(c - reference)) / max(1.0, float(np.max(np.abs(reference)))))
    flops = 2.0 * args.m * args.n * args.k
    print(f"sgemm {args.m}x{args.k} @ {args.k}x{args.n} on {args.qpus} QPUs ({device.name}): "
          f"max relative error vs numpy {error:.2e}")
    _print_run(result)
    if result.cycles:
        print(f"{flops / (result.cycles / result.clock_hz) / 1e9:.2f} GFLOPS on the QPUs, "
              f"{flops / result.seconds / 1e9:.2f} GFLOPS with the launch overhead "
              f"(cycle-model estimate)")
    elif result.seconds:
        print(f"{flops / result.seconds / 1e9:.2f} GFLOPS (measured, launch included)")
    return 0 if error < 1e-4 else 1


def _doctor_main(argv):
    from .pi.doctor import doctor_main
    return doctor_main(argv)


def _runtime_main(command):
    from .runtime.cli import main
    return lambda rest: main(command, rest)


def main(argv=None):
    from .runtime.cli import COMMANDS as RUNTIME_COMMANDS
    argv = sys.argv[1:] if argv is None else list(argv)
    # asm, disasm and doctor own their argument parsing.
    passthrough = {"asm": lambda rest: _asm_main(["assemble"] + rest),
                   "assemble": lambda rest: _asm_main(["assemble"] + rest),
                   "disasm": lambda rest: _asm_main(["disasm"] + rest),
                   "doctor": _doctor_main}
    passthrough.update({name: _runtime_main(name) for name in RUNTIME_COMMANDS})
    if argv and argv[0] in passthrough:
        return passthrough[argv[0]](argv[1:])

    parser = argparse.ArgumentParser(prog="vc4nn", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in passthrough:
        commands.add_parser(name, help=f"see vc4nn {name} --help", add_help=False)
    run = commands.add_parser("run", help="run a program on a device")
    run.add_argument("file", help="program: .s text, .bin raw words or .hex listing")
    run.add_argument("--qpus", type=int, default=1)
    run.add_argument("--uniforms", type=_parse_uniform, nargs="*", default=[],
                     help="uniform values given to every QPU (ints or floats)")
    run.add_argument("--timeout", type=float, default=10.0, help="seconds")
    sg = commands.add_parser("sgemm", help="multiply random matrices and check against numpy")
    sg.add_argument("--m", type=int, default=96)
    sg.add_argument("--n", type=int, default=96)
    sg.add_argument("--k", type=int, default=96)
    sg.add_argument("--qpus", type=int, default=12)
    sg.add_argument("--seed", type=int, default=0)
    for sub in (run, sg):
        sub.add_argument("--device", default=None, help="emulator (default) or pi")
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    handler = {"run": _run_main, "sgemm": _sgemm_main}[args.command]
    try:
        return handler(args)
    except (Vc4nnError, AsmError, OSError) as error:
        print(f"vc4nn {args.command}: error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
