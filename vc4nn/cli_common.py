"""What the vc4nn subcommands share: argument types, opening the device of the command line,
printing a run's report."""

import argparse
import os

from .errors import Vc4nnError

MAX_INSTRUCTION_BUDGET = 1 << 62


def integer_at_least(text, least):
    """``text`` as an int (0x.. too) >= ``least``, or an argparse type error."""
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{value} is not >= {least}")
    return value


def positive_int(text):
    return integer_at_least(text, 1)


def count(text):
    """An int >= 0 (0 has the option's own meaning: all, none)."""
    return integer_at_least(text, 0)


# MobileNets ship at alphas 0.25..1.4 and sizes 96..224; the bounds keep a typo from asking for
# layers no Pi could hold (alpha 100: 102,400 channels).
MAX_ALPHA = 4.0
MAX_INPUT_SIZE = 1024


def width_multiplier(text):
    """--alpha: a finite float in (0, MAX_ALPHA]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value <= MAX_ALPHA:
        raise argparse.ArgumentTypeError(f"{text} is not in (0, {MAX_ALPHA:g}]")
    return value


def input_size(text):
    """--size: the network's input height and width, 1..MAX_INPUT_SIZE."""
    value = positive_int(text)
    if value > MAX_INPUT_SIZE:
        raise argparse.ArgumentTypeError(f"{value} is more than {MAX_INPUT_SIZE}")
    return value


def add_network_arguments(parser, default_net):
    """--net, --alpha, --size and --qpus: which MobileNet layers run, on how many QPUs."""
    parser.add_argument("--net", default=default_net, help=f"v1, v2 or v1,v2 (default "
                        f"{default_net})")
    parser.add_argument("--alpha", type=width_multiplier, default=1.0,
                        help="width multiplier, in (0, 4] (default 1)")
    parser.add_argument("--size", type=input_size, default=224,
                        help=f"input height and width, 1..{MAX_INPUT_SIZE} (default 224)")
    parser.add_argument("--qpus", type=qpus, default=12, help="1..12 (default 12)")


# --max-instructions none: no budget at all (an absent flag, None, keeps the command's default).
NO_BUDGET = "none"


def instruction_budget(text):
    """--max-instructions: a positive int, or NO_BUDGET."""
    if text.strip().lower() == NO_BUDGET:
        return NO_BUDGET
    value = positive_int(text)
    if value > MAX_INSTRUCTION_BUDGET:
        raise argparse.ArgumentTypeError(f"{value} is more than {MAX_INSTRUCTION_BUDGET}; give "
                                         f"'none' for no budget")
    return value


def output_file(text):
    """A file the command will write: its folder must exist, so a long run does not end in
    "No such file or directory" after the work is done."""
    folder = os.path.dirname(os.path.abspath(text))
    if not text or not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"{text!r}: no folder {folder} to write it in")
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; give a file name")
    return text


def finite_seconds(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (value > 0 and value < float("inf")):
        raise argparse.ArgumentTypeError(f"{text} is not a finite number of seconds > 0")
    return value


def print_run(result):
    """The per-QPU summary of a RunResult: instructions, modelled cycles split into instruction
    issue and stall causes, then the total (with the launch overhead the model adds)."""
    launches = f" ({result.launches} launches)" if result.launches > 1 else ""
    print(f"host interrupts: {result.host_interrupts} of {result.programs}{launches}")
    for i, q in enumerate(result.qpus):
        stalls = dict(q.stalls)
        issue = stalls.pop("issue", None)
        stall_text = ", ".join(f"{k} {v}" for k, v in sorted(stalls.items()) if v)
        cycles = "" if q.cycles is None else f", {q.cycles} cycles (estimate)"
        count = "instruction count not available" if q.instructions is None \
            else f"{q.instructions} instructions"
        parts = [f"issue {issue}"] if issue else []
        if q.cycles is not None:
            parts.append(f"stalls: {stall_text or 'none'}")
        print(f"QPU {i}: {count}{cycles}" + (f"; {'; '.join(parts)}" if parts else ""))
    if result.cycles is not None:
        run_s = result.cycles / result.clock_hz
        overhead = (result.seconds or run_s) - run_s
        added = f" + {overhead * 1e6:.1f} us launch overhead = {result.seconds * 1e6:.1f} us" \
            if overhead > 0 else ""
        print(f"total: {result.cycles} cycles = {run_s * 1e6:.1f} us at "
              f"{result.clock_hz / 1e6:.0f} MHz ({result.board}){added}, cycle-model estimate")
    elif result.seconds is not None:
        print(f"total: {result.seconds * 1e6:.1f} us measured on {result.board} "
              f"(includes the execute_qpu call)")
    for warning in getattr(result, "warnings", []) or []:
        print(f"warning: {warning}")


def open_for(args, max_instructions=None):
    """The device of ``--device``, with the emulator's options of the command line: the
    instruction budget (``max_instructions`` unless --max-instructions is given) and, where the
    command has it, --guard-bytes."""
    from . import open_device, resolve_device_name
    name = resolve_device_name(args.device)
    options = {"--max-instructions": args.max_instructions,
               "--guard-bytes": getattr(args, "guard_bytes", None)}
    if name != "emulator":
        for flag, value in options.items():
            if value is not None:
                raise Vc4nnError(f"{flag} applies to the emulator, not to {name}")
        return open_device(name)
    budget = args.max_instructions if args.max_instructions is not None else max_instructions
    emulator = {} if options["--guard-bytes"] is None else {"guard_bytes": options["--guard-bytes"]}
    if budget is not None:
        emulator["max_instructions"] = None if budget == NO_BUDGET else budget
    return open_device(name, **emulator)


def add_device_arguments(parser):
    """The device options of the runtime's commands (classify, profile, bench, accuracy):
    --device, --qpus, --board, --launch, --quiet."""
    from .device import LAUNCH_PATHS
    parser.add_argument("--device", default=None, help="emulator (default) or pi")
    parser.add_argument("--qpus", type=qpus, default=12, help="1..12 (default 12)")
    parser.add_argument("--board", default=None,
                        help="emulator board preset for the cycle model (default: pi_zero)")
    parser.add_argument("--launch", choices=LAUNCH_PATHS, default=None,
                        help="launch path: mailbox (default; the firmware's execute_qpu) or "
                             "direct (V3D registers; on a Pi needs /dev/mem, see vc4nn doctor)")
    parser.add_argument("--quiet", "--no-progress", action="store_true", dest="quiet",
                        help="no progress bars")


def open_device_of(args):
    """The device of add_device_arguments' options."""
    from . import open_device
    options = {"board": args.board} if args.board else {}
    if args.launch:
        options["launch"] = args.launch
    return open_device(args.device, **options)


def qpus(text):
    """--qpus: 1..12."""
    from asm import isa
    value = positive_int(text)
    if value > isa.NUM_QPUS:
        raise argparse.ArgumentTypeError(f"{value} QPUs: the V3D has {isa.NUM_QPUS}")
    return value


def seed(text):
    """--seed: an int >= 0."""
    return integer_at_least(text, 0)


def pyplot():
    """matplotlib.pyplot drawing into files (the Agg backend: no display needed), or an error
    naming the extra to install, for the subcommands' --png."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise Vc4nnError("--png needs matplotlib: pip install 'vc4nn[plots]'") from None
    return plt
