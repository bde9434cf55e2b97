"""Typed errors of the assembler toolkit. Each carries where the problem is."""


class SourceLocation:
    """A place in a kernel's source: file and line (and optionally the text of that line)."""

    __slots__ = ("file", "line", "text")

    def __init__(self, file, line, text=None):
        self.file, self.line, self.text = file, line, text

    def __str__(self):
        return f"{self.file}:{self.line}"

    def __eq__(self, other):
        return isinstance(other, SourceLocation) and (self.file, self.line) == (other.file, other.line)

    def __hash__(self):
        return hash((self.file, self.line))

    def __repr__(self):
        return f"SourceLocation({self.file!r}, {self.line})"


class AsmError(Exception):
    """Base of every error raised by ``asm``. ``location`` is a SourceLocation or None."""

    def __init__(self, message, location=None):
        self.message = message
        self.location = location
        super().__init__(f"{location}: {message}" if location is not None else message)


class EncodingError(AsmError):
    """A field value does not fit the instruction word."""


class AssemblerError(AsmError):
    """An instruction cannot be encoded as written (operand conflicts, ranges, labels...)."""


class ParseError(AsmError):
    """The text syntax could not be read."""


class HazardError(AsmError):
    """A program breaks a pipeline rule of the hardware (fact sheet section 2)."""

    def __init__(self, rule, message, location=None, other_location=None, pcs=()):
        self.rule = rule
        self.other_location = other_location
        self.pcs = tuple(pcs)
        super().__init__(f"[{rule}] {message}", location)
