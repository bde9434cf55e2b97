"""Disassembler: instruction words -> the text syntax of docs/asm-syntax.md.

Every line it prints assembles back to exactly the word it came from. That holds by
construction: each word's rendering is re-assembled by ``asm.parser`` and compared. A word whose
text differs only in fields no operand gives (a nop with a write address, junk in an unused
field) gets a ``fields`` part setting them, and a comment saying what the hardware does with
them; one the text cannot reach (a reserved code, another signal, an assembler objection) is
printed as a raw ``.quad`` line, with the best-effort decoding and the reason in a comment.

Accepted inputs: a Program or a sequence of 64-bit words (code_files.read_words reads them from
a raw little-endian ``.bin`` or a hex listing).
"""

import collections

from . import encoding, isa, parser
from .builder import MOV_OPS
from .encoding import branch_target, signed32
from .errors import AsmError

# ---------------------------------------------------------------------------------------------
# Rendering one instruction. ``Spelling`` says whether I/O registers read (``reads``) or written
# (``writes``) are spelled by side and address (ra32, rb39...) instead of by name: needed for
# words whose natural spelling assembles to the other side (the assembler picks a free side).
# ---------------------------------------------------------------------------------------------

Spelling = collections.namedtuple("Spelling", "reads writes")
SPELLINGS = (Spelling(False, False), Spelling(True, False), Spelling(False, True), Spelling(True, True))


def _read_name(side, addr, spelling):
    name = isa.READ[side].get(addr)
    if addr < isa.REGFILE_SIZE or spelling.reads or name in (None, "nop"):
        return f"r{side}{addr}"
    return name


def _write_name(side, addr, spelling):
    name = isa.WRITE[side][addr] if addr >= isa.REGFILE_SIZE else None
    if name is None or (spelling.writes and name not in ("r5quad", "r5rep")):
        return f"r{side}{addr}"
    return "null" if addr == isa.NOP_ADDR else name


def _small_immediate(code):
    kind, value = isa.SMALL_IMMEDIATES[code]
    if kind == "float":
        return repr(value)
    # A rotation code read as an operand supplies -16..-1 (facts section 1 erratum): that int.
    return str(value if kind == "int" else signed32(isa.small_imm_operand_value(code)))


def _source(ins, mux, spelling):
    if mux == isa.MUX_B and ins.sig == isa.SIG_SMALL_IMM:
        return _small_immediate(ins.raddr_b)
    if mux == isa.MUX_A:
        text, unpacked = _read_name("a", ins.raddr_a, spelling), not ins.pm
    elif mux == isa.MUX_B:
        text, unpacked = _read_name("b", ins.raddr_b, spelling), False
    else:
        text, unpacked = isa.MUX_NAMES[mux], ins.pm and mux == isa.MUX_ACC["r4"]
    if unpacked and ins.unpack:
        text += "." + isa.UNPACK_NAMES[ins.unpack]
    return text


def _destination(ins, unit, waddr, spelling):
    side = isa.write_side(unit, ins.ws)
    text = _write_name(side, waddr, spelling)
    if ins.pack and not ins.pm and side == "a":
        text += "." + isa.PACK_A_NAMES[ins.pack]
    elif ins.pack and ins.pm and unit == "mul":
        text += "." + isa.PACK_MUL_NAMES.get(ins.pack, f"pack{ins.pack}")
    return text


def _flag_unit(ins):
    """The ALU whose result sets the flags (facts §1: ADD unless its op is nop)."""
    if not ins.sf:
        return None
    return "add" if ins.op_add or not ins.op_mul else "mul"


def _op(ins, unit):
    """(name, arity) of an ALU's op; a reserved code gets a placeholder name."""
    code = getattr(ins, "op_" + unit)
    op = (isa.ADD_OPS_BY_CODE if unit == "add" else isa.MUL_OPS_BY_CODE).get(code)
    return (op.name, op.arity) if op else (f"{unit}_op{code}", 2)


def _alu_part(ins, unit, spelling):
    name, arity = _op(ins, unit)
    if arity == 0:
        return name
    modifiers = []
    cond = getattr(ins, "cond_" + unit)
    if cond != isa.CONDITIONS["always"]:
        modifiers.append(isa.CONDITION_NAMES[cond])
    if _flag_unit(ins) == unit:
        modifiers.append("sf")
    rotation = isa.rotation_of(ins.raddr_b) if ins.sig == isa.SIG_SMALL_IMM else None
    if unit == "mul" and rotation is not None:
        modifiers.append(f"rot{rotation}")
    mux_a, mux_b = getattr(ins, unit + "_a"), getattr(ins, unit + "_b")
    sources = [_source(ins, mux_a, spelling), _source(ins, mux_b, spelling)]
    if name == MOV_OPS[unit] and mux_a == mux_b:
        name, arity = "mov", 1
    operands = [_destination(ins, unit, getattr(ins, "waddr_" + unit), spelling)] + sources[:arity]
    return ".".join([name] + modifiers) + " " + ", ".join(operands)


def _used_muxes(ins, unit):
    return [getattr(ins, unit + "_a"), getattr(ins, unit + "_b")][:_op(ins, unit)[1]]


def _bare_reads(ins, spelling):
    """Read addresses no operand uses: reads kept for their side effect (``read uniform``)."""
    used = set(_used_muxes(ins, "add") + _used_muxes(ins, "mul"))
    reads = []
    if ins.raddr_a != isa.NOP_ADDR and isa.MUX_A not in used:
        unpack = "." + isa.UNPACK_NAMES[ins.unpack] if ins.unpack and not ins.pm else ""
        reads.append(_read_name("a", ins.raddr_a, spelling) + unpack)
    if ins.raddr_b != isa.NOP_ADDR and isa.MUX_B not in used and ins.sig != isa.SIG_SMALL_IMM:
        reads.append(_read_name("b", ins.raddr_b, spelling))
    return reads


def _render_alu(ins, spelling):
    add, mul = _alu_part(ins, "add", spelling), _alu_part(ins, "mul", spelling)
    parts = [add, mul] if mul != "nop" else [add] if add != "nop" else []
    reads = _bare_reads(ins, spelling)
    if reads:
        parts.append("read " + ", ".join(reads))
    if ins.sig not in (isa.SIG_NONE, isa.SIG_SMALL_IMM):
        parts.append(isa.SIGNAL_NAMES[ins.sig])
    return " ; ".join(parts) or "nop"


def _render_load_imm(ins, spelling):
    mode = isa.LOAD_IMM_MODE_NAMES.get(ins.ldi_mode, f"mode{ins.ldi_mode}")
    # Destinations: ADD write first, MUL write second. The assembler leaves an unused port at
    # address 39 with condition never (and ws and the port's pack at 0).
    never = isa.CONDITIONS["never"]
    used = [ins.waddr_add != isa.NOP_ADDR or ins.cond_add != never or ins.ws or (ins.pack and not ins.pm),
            ins.waddr_mul != isa.NOP_ADDR or ins.cond_mul != never or (ins.pack and ins.pm)]
    units = ("add", "mul")[:2 if used[1] else 1 if used[0] else 0]
    destinations = [_destination(ins, unit, getattr(ins, "waddr_" + unit), spelling) for unit in units]
    mnemonic, modifiers = "ldi", [] if mode == "32" else [mode]
    if units and ins.cond_add != isa.CONDITIONS["always"]:
        modifiers.append(isa.CONDITION_NAMES[ins.cond_add])
    if ins.sf:
        modifiers.append("sf")
    if mode == "semaphore":
        acquire = isa.field_get(ins.immediate, isa.SEMAPHORE_FIELDS["acquire"])
        mnemonic, modifiers = "sacq" if acquire else "srel", modifiers[1:]
        value = str(isa.field_get(ins.immediate, isa.SEMAPHORE_FIELDS["number"]))
    elif mode in isa.PER_ELEMENT_RANGES:
        value = "[" + ", ".join(map(str, isa.per_element_values(ins.immediate, mode))) + "]"
    else:
        value = f"{ins.immediate:#010x}"
    return ".".join([mnemonic] + modifiers) + " " + ", ".join(destinations + [value])


def _render_branch(ins, address, target_labels, spelling):
    modifiers = []
    if ins.cond_br != isa.BRANCH_CONDITIONS["always"]:
        modifiers.append(isa.BRANCH_CONDITION_NAMES.get(ins.cond_br, f"cond{ins.cond_br}"))
    if ins.raddr_a & 1:     # bit 45: sf, also bit 0 of the added register (facts §5.4)
        modifiers.append("sf")
    target = branch_target(ins, address)
    if target is None:
        modifiers.append("abs")
        text = f"{ins.immediate:#x}"
    elif target in target_labels:
        text = target_labels[target]
    else:
        offset = target - address
        text = f"pc{'-' if offset < 0 else '+'}{abs(offset):#x}"
    if ins.reg:
        text += f" + ra{ins.raddr_a}"
    if ins.waddr_add != isa.NOP_ADDR or ins.ws:     # the assembler writes the link through ADD only
        text += ", link=" + _write_name(isa.write_side("add", ins.ws), ins.waddr_add, spelling)
    return ".".join(["branch"] + modifiers) + " " + text


def render(ins, address=0, target_labels=None, spelling=SPELLINGS[0]):
    """Best-effort text of one instruction (not verified; see ``disassemble_word``)."""
    if ins.format == "branch":
        return _render_branch(ins, address, target_labels or {}, spelling)
    if ins.format == "load_imm":
        return _render_load_imm(ins, spelling)
    return _render_alu(ins, spelling)


# ---------------------------------------------------------------------------------------------
# Canonical check: why a word cannot be written as an instruction.
# ---------------------------------------------------------------------------------------------


def reserved_codes(ins):
    """Reasons a word uses a reserved encoding (empty if none)."""
    reasons = []
    if ins.format == "alu":
        if ins.op_add in isa.ADD_OP_RESERVED:
            reasons.append(f"ADD opcode {ins.op_add} is reserved")
        if ins.pm and ins.pack and ins.pack not in isa.PACK_MUL_NAMES:
            reasons.append(f"MUL pack code {ins.pack} (pm=1) is reserved")
    elif ins.format == "load_imm":
        if ins.ldi_mode not in isa.LOAD_IMM_MODE_NAMES:
            reasons.append(f"load-immediate mode {ins.ldi_mode} is reserved")
        elif ins.pm and ins.pack and ins.pack not in isa.PACK_MUL_NAMES:
            reasons.append(f"MUL pack code {ins.pack} (pm=1) is reserved")
    else:
        if ins.cond_br in isa.BRANCH_CONDITION_RESERVED:
            reasons.append(f"branch condition {ins.cond_br} is reserved")
        if ins.branch_unused:
            reasons.append(f"unused branch bits 59:56 hold {ins.branch_unused:#x}")
    return reasons


def hidden_effects(ins):
    """What a word does (or pointedly does not do) that its instruction text cannot say: the
    fields the hardware acts on, or ignores, beyond what the assembler writes (empty if none)."""
    never, nop = isa.CONDITIONS["never"], isa.NOP_ADDR
    effects = []
    if ins.format == "alu":
        for unit in ("add", "mul"):
            op = isa.ADD_OPS_BY_CODE.get(ins.op_add) if unit == "add" \
                else isa.MUL_OPS_BY_CODE[ins.op_mul]
            if op is None or op.name != "nop":
                continue
            cond, waddr = getattr(ins, "cond_" + unit), getattr(ins, "waddr_" + unit)
            if cond != never and waddr != nop:
                dst = _write_name(isa.write_side(unit, ins.ws), waddr, SPELLINGS[0])
                when = "" if cond == isa.CONDITIONS["always"] else f" where {isa.CONDITION_NAMES[cond]}"
                effects.append(f"MUL nop writes the MUL ALU's previous result to {dst}{when} "
                               f"(facts §5.17)" if unit == "mul" else
                               f"ADD nop writes nothing: destination {dst} is ignored")
            if getattr(ins, unit + "_a") or getattr(ins, unit + "_b"):
                effects.append(f"the {unit.upper()} muxes of a nop are ignored")
    elif ins.format == "branch":
        if ins.waddr_mul != nop:
            dst = _write_name(isa.write_side("mul", ins.ws), ins.waddr_mul, SPELLINGS[0])
            effects.append(f"the link goes to {dst} too, through the MUL write port")
        if not ins.reg and ins.raddr_a >> 1:
            effects.append(f"raddr_a bits 4:1 ({ins.raddr_a >> 1}) are ignored without + raN")
    return effects


def _field_differences(word, other):
    mine, theirs = encoding.decode(word), encoding.decode(other)
    return ", ".join(f"{name}={value} (text gives {getattr(theirs, name)})"
                     for name, value in mine.items() if getattr(theirs, name) != value)


class Line:
    """One disassembled word: ``text`` (an instruction, one with a ``fields`` part, or a
    ``.quad``); if non-canonical, ``best_effort`` (the closest instruction text) and ``reason``;
    ``effects``: what the word does that the instruction part of its text does not say."""

    __slots__ = ("word", "address", "text", "best_effort", "reason", "effects", "raw_fields")

    def __init__(self, word, address, text, best_effort=None, reason=None, effects=(),
                 raw_fields=False):
        self.word, self.address, self.text = word, address, text
        self.best_effort, self.reason, self.effects = best_effort, reason, list(effects)
        self.raw_fields = raw_fields        # the text has a ``fields`` part

    @property
    def canonical(self):
        """The word is what the assembler makes of its operands alone."""
        return self.reason is None and not self.raw_fields

    @property
    def note(self):
        """The listing's comment on the word, after its offset ("" for a plain instruction)."""
        if self.reason is not None:
            return f"{self.best_effort}  -- non-canonical: {self.reason}"
        return "; ".join(self.effects)

    def __str__(self):
        return f"{self.text}  # {self.note}" if self.note else self.text


def disassemble_word(word, address=0, target_labels=None):
    """Disassemble one 64-bit word at byte ``address`` -> Line.

    ``target_labels`` maps byte addresses to label names; branch targets found there are written
    as the label (the verification resolves the label to the same address).
    """
    word = int(word)
    ins = encoding.decode(word)
    quad = f".quad {word:#018x}"
    best_effort = render(ins, address, target_labels)
    effects = hidden_effects(ins)
    if effects:
        best_effort += " [also: " + "; ".join(effects) + "]"
    reserved = reserved_codes(ins)
    if reserved:
        return Line(word, address, quad, best_effort, "; ".join(reserved))
    labels = {name: target for target, name in (target_labels or {}).items()}
    failure, tried, nearest = None, set(), None
    for spelling in SPELLINGS:          # natural names first, then side-spelling ones
        text = render(ins, address, target_labels, spelling)
        if text in tried:
            continue
        tried.add(text)
        try:
            got = parser.assemble_line(text, address, labels)
        except AsmError as error:
            failure = failure or f"`{text}` does not assemble ({error.message})"
            continue
        if got == word:
            return Line(word, address, text)
        # The natural spelling's difference says best what the text cannot express.
        failure = failure or _field_differences(word, got)
        nearest = nearest or (text, got)
    text = _with_fields(ins, nearest, address, labels)
    if text is not None:
        return Line(word, address, text, effects=effects, raw_fields=True)
    return Line(word, address, quad, best_effort, failure)


def _with_fields(ins, nearest, address, labels):
    """The nearest text (text, its word) with a ``fields`` part setting the fields its operands
    cannot give, if that assembles to ``ins``'s word (None if not: another format, or an
    assembler objection)."""
    if nearest is None:
        return None
    text, got = nearest
    theirs = encoding.decode(got)
    if theirs.sig != ins.sig:       # the signal picks the format: no fields part can change it
        return None
    text += " ; fields " + ", ".join(f"{name}={value}" for name, value in ins.items()
                                     if getattr(theirs, name) != value)
    try:
        return text if parser.assemble_line(text, address, labels) == ins.encode() else None
    except AsmError:
        return None


# ---------------------------------------------------------------------------------------------
# Whole programs.
# ---------------------------------------------------------------------------------------------


def _label_name_taken(name, taken):
    while name in taken:
        name += "_"
    return name


def _target_labels(words, labels):
    """address -> label name for every branch target inside the code, plus the given labels."""
    by_address = {}
    for name, address in sorted(labels.items(), key=lambda item: (item[1], item[0])):
        by_address.setdefault(address, name)
    end = len(words) * isa.INSTRUCTION_BYTES
    taken = set(labels)
    for index, word in enumerate(words):
        ins = encoding.decode(word)
        if ins.format != "branch" or ins.branch_unused or ins.cond_br in isa.BRANCH_CONDITION_RESERVED:
            continue
        target = branch_target(ins, index * isa.INSTRUCTION_BYTES)
        if target is not None and 0 <= target <= end and target % isa.INSTRUCTION_BYTES == 0 \
                and target not in by_address:
            by_address[target] = _label_name_taken(f"L{target}", taken)
            taken.add(by_address[target])
    return by_address


def _code(code):
    """(words, labels, waivers) of a Program, a sequence of words or little-endian bytes."""
    if hasattr(code, "words"):
        return [int(w) for w in code.words], dict(code.labels), list(code.waivers)
    words = encoding.words_from_bytes(code) if isinstance(code, (bytes, bytearray, memoryview)) \
        else encoding.instruction_words(code)
    return words, {}, [()] * len(words)


def disassemble(code):
    """Text listing of a Program, a sequence of 64-bit words or little-endian bytes.

    Labels (the Program's, and ``L<byte offset>`` for other branch targets in the code) stand
    on lines of their own; each instruction line ends with a comment giving its byte offset and,
    for a branch, its target's. A Program's waivers are written as ``waive`` parts. The listing
    assembles back to the same words (and labels and waivers).
    """
    words, labels, waivers = _code(code)
    out = [f"# label {name!r} at 0x{address:04x} cannot be written in the text syntax"
           for name, address in sorted(labels.items()) if not parser.is_label_name(name)]
    labels = {name: address for name, address in labels.items() if parser.is_label_name(name)}
    target_labels = _target_labels(words, labels)
    placed = {}
    for name, address in labels.items():
        placed.setdefault(address, []).append(name)
    for address, name in target_labels.items():
        if name not in labels:
            placed.setdefault(address, []).append(name)
    for index, (word, waive) in enumerate(zip(words, waivers)):
        address = index * isa.INSTRUCTION_BYTES
        out.extend(f"{name}:" for name in sorted(placed.pop(address, [])))
        line = disassemble_word(word, address, target_labels)
        statement = line.text + (" ; waive " + ", ".join(sorted(waive)) if waive else "")
        comment = f"0x{address:04x}"
        target = branch_target(encoding.decode(word), address)    # None unless a relative branch
        if line.reason is None and target is not None:
            comment += f" -> 0x{target:04x}"
        if line.note:
            comment += f": {line.note}"
        out.append(f"    {statement:<48} # {comment}")
    for address in sorted(placed):                 # labels past the end
        out.extend(f"{name}:" for name in sorted(placed[address]))
    return "\n".join(out) + "\n"
