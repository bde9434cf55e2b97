"""An assembled QPU program: instruction words plus what tools need to explain them."""

from . import isa
from .encoding import bytes_from_words, decode, encode, instruction_words, words_from_bytes
from .errors import EncodingError


class Program:
    """Instruction words with labels (name -> byte offset), a source map (one SourceLocation or
    None per instruction) and waivers (one frozenset of waived hazard-rule names per instruction).
    """

    def __init__(self, words, labels=None, source_map=None, waivers=None):
        self.words = instruction_words(words)
        self.instructions = [decode(w) for w in self.words]
        self.labels = dict(labels or {})
        count = len(self.words)
        self.source_map = list(source_map) if source_map is not None else [None] * count
        self.waivers = [frozenset(w) for w in waivers] if waivers is not None else [frozenset()] * count
        if len(self.source_map) != count or len(self.waivers) != count:
            raise EncodingError(f"source map ({len(self.source_map)}) and waivers ({len(self.waivers)}) "
                                f"must have one entry per instruction ({count})")

    @classmethod
    def from_words(cls, words):
        return cls(words)

    @classmethod
    def from_instructions(cls, instructions, **kwargs):
        return cls([encode(i) for i in instructions], **kwargs)

    @classmethod
    def from_bytes(cls, data):
        return cls(words_from_bytes(data))

    def __len__(self):
        return len(self.words)

    def to_bytes(self):
        """Little-endian, low 32-bit word of each instruction first (fact sheet section 1)."""
        return bytes_from_words(self.words)

    def labels_at(self, pc):
        """Names of the labels at instruction ``pc``."""
        return [name for name, offset in self.labels.items() if offset == pc * isa.INSTRUCTION_BYTES]

    def hex(self):
        """One line per instruction: the two 32-bit halves as stored (low first), then the byte
        offset in a comment; labels as comment lines. ``asm.code_files.words_from_hex`` reads it."""
        lines = []
        for pc, word in enumerate(self.words):
            lines.extend(f"# {name}:" for name in self.labels_at(pc))
            lines.append(f"{word & 0xFFFFFFFF:08x} {word >> 32:08x}  # {pc * isa.INSTRUCTION_BYTES:06x}")
        lines.extend(f"# {name}:" for name in self.labels_at(len(self.words)))
        return "\n".join(lines)

    def disassemble(self, **options):
        """The program as assembler text (see asm.disasm)."""
        from .disasm import disassemble    # written against this class; imported when used
        return disassemble(self, **options)

    def __repr__(self):
        return f"<Program {len(self.words)} instructions, {len(self.labels)} labels>"
