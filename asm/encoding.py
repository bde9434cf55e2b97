"""Instruction words <-> fields, driven by the format tables in ``asm.isa``.

``Instruction`` holds the raw field values of one 64-bit word. It knows nothing about operand
syntax; the builder (``asm.builder``) turns operands into fields, the disassembler turns fields
into text, and the emulator and hazard checker read fields directly.
"""

import dataclasses

import numpy as np

from . import isa
from .errors import EncodingError

FORMAT_FIELDS = {"alu": isa.ALU_FIELDS, "load_imm": isa.LOAD_IMM_FIELDS, "branch": isa.BRANCH_FIELDS}


def format_of_sig(sig):
    if sig == isa.SIG_BRANCH:
        return "branch"
    if sig == isa.SIG_LOAD_IMM:
        return "load_imm"
    return "alu"


@dataclasses.dataclass(frozen=True)
class Instruction:
    """Field values of one instruction word. Fields not in the word's format stay at 0.

    The defaults are a canonical ``nop``: no ALU op, both writes to the nop register, no reads.
    """

    sig: int = isa.SIG_NONE
    unpack: int = 0
    pm: int = 0
    pack: int = 0
    cond_add: int = 0
    cond_mul: int = 0
    sf: int = 0
    ws: int = 0
    waddr_add: int = isa.NOP_ADDR
    waddr_mul: int = isa.NOP_ADDR
    op_mul: int = 0
    op_add: int = 0
    raddr_a: int = isa.NOP_ADDR
    raddr_b: int = isa.NOP_ADDR
    add_a: int = 0
    add_b: int = 0
    mul_a: int = 0
    mul_b: int = 0
    ldi_mode: int = 0
    immediate: int = 0
    branch_unused: int = 0
    cond_br: int = 0
    rel: int = 0
    reg: int = 0

    @property
    def format(self):
        return format_of_sig(self.sig)

    @property
    def fields(self):
        """The field table of this instruction's format."""
        return FORMAT_FIELDS[self.format]

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    def encode(self):
        return encode(self)

    def items(self):
        """(name, value) of the fields that belong to this format."""
        return [(name, getattr(self, name)) for name in self.fields]


def encode(instruction):
    """Return the 64-bit word of an Instruction. Raises EncodingError if a field does not fit."""
    word = 0
    for name, (lsb, width) in instruction.fields.items():
        value = getattr(instruction, name)
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) and width != 1:
            raise EncodingError(f"field {name} must be an integer, got {value!r}")
        value = int(value)
        if not 0 <= value < (1 << width):
            raise EncodingError(f"field {name} = {value} does not fit in {width} bits "
                                f"(0..{(1 << width) - 1})")
        word |= value << lsb
    return word


def decode(word):
    """Return the Instruction whose fields a 64-bit word holds (every word decodes)."""
    word = int(word)
    if not 0 <= word < (1 << 64):
        raise EncodingError(f"instruction word {word:#x} is not a 64-bit value")
    sig = isa.field_get(word, isa.ALU_FIELDS["sig"])      # the same bits in every format
    table = FORMAT_FIELDS[format_of_sig(sig)]
    values = {name: (word >> lsb) & ((1 << width) - 1) for name, (lsb, width) in table.items()}
    # Fields outside this format keep the nop defaults (no reads, nop writes, no ops), so a
    # consumer that looks at, say, raddr_b of a load immediate sees "nothing read".
    return Instruction(**values)


def instruction_words(words):
    """``words`` (a sequence of 64-bit instruction words: ints or numpy integers) as a list of
    ints; anything else is an EncodingError naming the word, never a silent int() of it."""
    if isinstance(words, (str, bytes, dict)) or not hasattr(words, "__iter__"):
        raise EncodingError(f"instruction words must be a sequence of 64-bit ints, got "
                            f"{type(words).__name__}")
    result = []
    for pc, word in enumerate(words):
        if isinstance(word, bool) or not isinstance(word, (int, np.integer)):
            raise EncodingError(f"instruction word {pc} is {word!r:.40}, not an int")
        if not 0 <= int(word) < (1 << 64):
            raise EncodingError(f"instruction word {pc} ({int(word):#x}) is not a 64-bit word")
        result.append(int(word))
    return result


def signed32(value):
    """A 32-bit field read as two's complement."""
    return value - (1 << 32) if value >> 31 else value


def branch_target(ins, address):
    """Byte address a relative branch at byte ``address`` goes to (facts §1), None if absolute."""
    if not ins.rel:
        return None
    return address + isa.BRANCH_RETURN_OFFSET + signed32(ins.immediate)


def words_from_bytes(data):
    """Little-endian bytes (low 32-bit word first) -> list of 64-bit instruction words."""
    data = bytes(data)
    if len(data) % isa.INSTRUCTION_BYTES:
        raise EncodingError(f"code is {len(data)} bytes, not a multiple of {isa.INSTRUCTION_BYTES}")
    return [int(w) for w in np.frombuffer(data, dtype="<u8")]


def bytes_from_words(words):
    return np.asarray([int(w) for w in words], dtype="<u8").tobytes()
