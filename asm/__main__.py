"""``python -m asm``: assemble text to code, disassemble code to text.

    python -m asm assemble FILE.s [-o OUT] [--format bin|hex] [--no-check]
    python -m asm disasm FILE [--format auto|bin|hex] [-o OUT]

Errors are reported as one line ``asm: error: FILE:LINE: ...`` with exit status 1.
The text syntax and the accepted code formats are described in docs/asm-syntax.md.
"""

import argparse
import os
import sys

from . import code_files, disasm, parser
from .errors import AsmError


class ArgumentParser(argparse.ArgumentParser):
    """Usage errors exit with status 1, like every other error of the command."""

    def error(self, message):
        self.print_usage(sys.stderr)
        self.exit(1, f"{self.prog}: error: {message}\n")


def _hex_listing(program):
    """One 64-bit word per line, 16 hex digits: the first form ``disasm --format hex`` reads."""
    return "".join(f"{word:016x}\n" for word in program.words)


def _assemble(args):
    program = parser.assemble_file(args.file, check=not args.no_check)
    out = args.output or os.path.splitext(args.file)[0] + "." + args.format
    _refuse_to_overwrite_the_input(out, args.file)
    data = program.to_bytes() if args.format == "bin" else _hex_listing(program).encode("ascii")
    if out == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    else:
        with open(out, "wb") as f:
            f.write(data)
        print(f"{args.file}: {len(program)} instructions -> {out}", file=sys.stderr)
    return 0


def _refuse_to_overwrite_the_input(out, path):
    if out not in (None, "-") and os.path.exists(out) and os.path.samefile(out, path):
        raise AsmError(f"{path}: the output {out} is the input file itself; give another -o")


def _disasm(args):
    _refuse_to_overwrite_the_input(args.output, args.file)
    words = code_files.read_words(args.file, args.format)
    text = disasm.disassemble(words)
    if args.output in (None, "-"):
        sys.stdout.write(text)
    else:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    return 0


def _arguments(prog, assemble_name="assemble"):
    examples = (f"examples:\n"
                f"  {prog} assemble prog.s                  prog.s -> prog.bin, hazard-checked\n"
                f"  {prog} assemble prog.s --format hex     prog.s -> prog.hex, one word per line\n"
                f"  {prog} disasm prog.bin                  listing on standard output\n"
                f"  {prog} disasm prog.hex -o prog.txt\n")
    top = ArgumentParser(prog=prog, description="VideoCore IV QPU assembler and disassembler "
                          "(syntax: docs/asm-syntax.md).", epilog=examples,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = top.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgumentParser)
    assemble = commands.add_parser(assemble_name, help="assemble a text file (.s) into code",
                                   description="Assemble FILE (text syntax) into code. The hazard "
                                   "checker runs unless --no-check.")
    assemble.add_argument("file", metavar="FILE", help="program text")
    assemble.add_argument("-o", "--output", metavar="OUT",
                          help="output file (default FILE with .bin/.hex; '-' for standard output)")
    assemble.add_argument("--format", choices=("bin", "hex"), default="bin",
                          help="bin: raw little-endian 64-bit words (default); hex: one word per line")
    assemble.add_argument("--no-check", action="store_true", help="skip the hazard checker")
    dis = commands.add_parser("disasm", help="disassemble code (.bin or hex listing) into text",
                              description="Disassemble FILE into text that assembles back to the "
                              "same words: fields no operand gives are set by a 'fields' part, "
                              "words with reserved codes are shown as .quad lines.")
    dis.add_argument("file", metavar="FILE", help="code: .bin raw words or a hex listing")
    dis.add_argument("--format", choices=("auto", "bin", "hex"), default="auto",
                     help="input format (auto: by extension, else by content)")
    dis.add_argument("-o", "--output", metavar="OUT", help="write the text here instead of stdout")
    return top


def main(argv=None, prog="python -m asm", command_names=None):
    """Run the command line; return the exit status (0 ok, 1 error). ``prog`` names the command
    in messages; ``command_names`` renames subcommands ({"assemble": "asm"}): ``vc4nn`` reuses
    this as ``vc4nn asm|assemble|disasm``."""
    assemble_name = (command_names or {}).get("assemble", "assemble")
    top = _arguments(prog, assemble_name)
    try:
        args = top.parse_args(sys.argv[1:] if argv is None else list(argv))
    except SystemExit as stop:      # usage errors and --help: a status, not an exit
        return stop.code
    if args.command is None:
        top.print_help(sys.stderr)
        return 1
    try:
        return {assemble_name: _assemble, "disasm": _disasm}[args.command](args)
    except (AsmError, OSError) as error:
        print(f"{top.prog} {args.command}: error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
