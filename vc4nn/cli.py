"""The vc4nn command.

    vc4nn asm FILE.s [-o OUT] [--format bin|hex]     assemble (alias: assemble; = python -m asm assemble)
    vc4nn disasm FILE                                 disassemble (same as python -m asm disasm)
    vc4nn run FILE [--qpus N] [--buffer ...] [--uniforms ...] [--dump ...]
                                                      run a program with its buffers, show them
    vc4nn sgemm [--m M --n N --k K] [--qpus N]        multiply random matrices on a device, check vs numpy
    vc4nn doctor                                      diagnose the Raspberry Pi set-up
    vc4nn classify | profile | bench | accuracy | ops | export-mobilenet-v2 | demo
                                                      run a MobileNet (listed below)
    vc4nn bench-layers [--quick] [--net v1,v2] [--json]  per-layer MobileNet figures (cycle model)
    vc4nn tune [--net v1,v2] [--cache FILE]           search layer tilings, store the winners

Every subcommand takes --device emulator|pi where it runs code (default: the emulator, or the
VC4NN_DEVICE environment variable). Emulated runs longer than about a second show a progress bar
(--quiet hides it). Errors are printed as one line and exit with status 1.
"""

import argparse
import os
import re
import sys

from asm.__main__ import ArgumentParser
from asm.errors import AsmError

from . import __version__
from .cli_common import instruction_budget
from .emulator.machine import DEFAULT_MAX_INSTRUCTIONS
from .errors import Vc4nnError


def _asm_main(command):
    def run(rest):
        from asm.__main__ import main
        return main([command] + rest, prog="vc4nn", command_names={"assemble": command}
                    if command != "disasm" else None)
    return run


def _own_parser(load_main):
    """A subcommand parsing its own arguments: ``load_main()`` gives its main(argv). --help and
    usage errors end its argparse with SystemExit; here they are a status (usage errors 1, not
    argparse's 2, as every vc4nn error)."""
    def run(argv):
        try:
            return load_main()(argv)
        except SystemExit as stop:
            return 1 if stop.code == 2 else stop.code
    return run


def _doctor_main():
    from .pi.doctor import doctor_main
    return doctor_main


def _runtime_main(command):
    def load():
        from .runtime.cli import main
        return lambda rest: main(command, rest)
    return _own_parser(load)


def _own_parser_helps():
    """One line of help for each subcommand that parses its own arguments (the runtime's from
    the table in its module's docstring)."""
    from .runtime import cli as runtime_cli
    helps = {"asm": "assemble a text file (.s) into code", "assemble": "the same as asm",
             "disasm": "disassemble code (.bin or hex listing) into text",
             "doctor": "diagnose the Raspberry Pi set-up"}
    for line in runtime_cli.__doc__.splitlines():
        row = re.match(r"\s+vc4nn (\S+) .*?\s{2,}(\S.*)$", line)
        if row:
            helps[row.group(1)] = row.group(2)
    return helps


def main(argv=None):
    from .runtime.cli import COMMANDS as RUNTIME_COMMANDS
    argv = sys.argv[1:] if argv is None else list(argv)
    # asm, disasm and doctor own their argument parsing.
    passthrough = {"asm": _asm_main("asm"), "assemble": _asm_main("assemble"),
                   "disasm": _asm_main("disasm"), "doctor": _own_parser(_doctor_main)}
    passthrough.update({name: _runtime_main(name) for name in RUNTIME_COMMANDS})
    if argv and argv[0] in passthrough:
        return _reported(argv[0], lambda: passthrough[argv[0]](argv[1:]))

    from . import cli_bench, cli_run, cli_sgemm, cli_tune
    parser = ArgumentParser(prog="vc4nn", description=__doc__,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"vc4nn {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND",
                                     parser_class=ArgumentParser)
    helps = _own_parser_helps()
    for name in passthrough:
        commands.add_parser(name, help=helps.get(name, f"see vc4nn {name} --help"),
                            add_help=False)
    run = commands.add_parser("run", help="run a program with its buffers and show them",
                              description=cli_run.__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    cli_run.add_arguments(run)
    sg = commands.add_parser("sgemm", help="multiply random matrices and check against numpy",
                             description=cli_sgemm.DESCRIPTION)
    cli_sgemm.add_arguments(sg)
    for name, module in (("bench-layers", cli_bench), ("tune", cli_tune)):
        module.add_arguments(commands.add_parser(
            name, help=module.__doc__.splitlines()[0].split(": ", 1)[1],
            description=module.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))
    for sub in (run, sg):
        sub.add_argument("--device", default=None, help="emulator (default) or pi")
        sub.add_argument("--max-instructions", type=instruction_budget, default=None,
                         metavar="N", help="emulator: stop a launch after N instructions "
                         "(default: %s; 'none' for no budget)" % (
                             DEFAULT_MAX_INSTRUCTIONS if sub is run
                             else "twice the kernel's estimate, at least %d" %
                             DEFAULT_MAX_INSTRUCTIONS))
        sub.add_argument("--quiet", action="store_true", help="no progress bar")
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:       # reported by the subcommand's parser, whose usage line is the right one
            (commands.choices[args.command] if args.command else parser).error(
                f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as stop:      # usage errors, --help, --version: a status, not an exit
        return stop.code
    if args.command is None:
        parser.print_help()
        return 2
    handler = {"run": cli_run.run_main, "sgemm": cli_sgemm.sgemm_main,
               "bench-layers": cli_bench.bench_main, "tune": cli_tune.tune_main}[args.command]
    args.command_line = "vc4nn " + " ".join(argv)
    return _reported(args.command, lambda: handler(args))


def _reported(command, run):
    """``run()``'s exit status; what stops a subcommand is one line on stderr, not a traceback."""
    try:
        return run()
    except BrokenPipeError:
        # The reader of the output went away (| head): stop quietly, as other tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (Vc4nnError, AsmError, OSError) as error:
        print(f"vc4nn {command}: error: {error}", file=sys.stderr)
        return 1
    except MemoryError as error:
        print(f"vc4nn {command}: error: out of memory ({error})", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"vc4nn {command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
