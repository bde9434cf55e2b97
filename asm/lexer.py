"""The text syntax's tokens and operands: numbers, registers with their pack or unpack mode,
comma lists. Errors are ``ParseError``s naming the column (the statements are asm/parser.py)."""

import re

from . import isa, registers
from .errors import ParseError, close_names

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<number>0[xX][0-9a-fA-F]+|0[bB][01]+|(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)
  | (?P<word>[A-Za-z_.][\w.$/]*)
  | (?P<punct>[,;:\[\]+\-=])
""", re.VERBOSE)

class Token:
    __slots__ = ("kind", "text", "column")

    def __init__(self, kind, text, column):
        self.kind, self.text, self.column = kind, text, column

    def describe(self):
        return "end of line" if self.kind == "end" else repr(self.text)


def suggest(name, known):
    close = close_names(name, known)
    return f"; did you mean {' or '.join(close)}?" if close else ""


class Tokens:
    """The tokens of one statement part, with a cursor."""

    def __init__(self, tokens, location, end_column):
        self.tokens, self.location, self.index = tokens, location, 0
        self.end = Token("end", "", end_column)

    def peek(self, ahead=0):
        i = self.index + ahead
        return self.tokens[i] if i < len(self.tokens) else self.end

    def next(self):
        token = self.peek()
        self.index += 1
        return token

    def accept(self, text):
        if self.peek().kind in ("punct", "word") and self.peek().text == text:
            return self.next()
        return None

    def error(self, message, token=None):
        token = token or self.peek()
        return ParseError(f"column {token.column}: {message}", self.location)

    def expected(self, what, token=None):
        token = token or self.peek()
        return self.error(f"expected {what}, found {token.describe()}", token)

    def expect(self, text, what=None):
        if not self.accept(text):
            raise self.expected(what or repr(text))

    def at_end(self):
        return self.peek().kind == "end"

    def finish(self):
        if not self.at_end():
            raise self.expected("end of statement")


def tokenize(text, location):
    tokens, pos = [], 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise ParseError(f"column {pos + 1}: unexpected character {text[pos]!r}", location)
        if match.lastgroup != "space":
            tokens.append(Token(match.lastgroup, match.group(), pos + 1))
        pos = match.end()
    return tokens


# Longer than any 64-bit value in binary (0b + 64 digits): a longer literal is a typo or junk,
# and huge ints cannot even be printed in an error message (Python's int-to-str limit).
MAX_NUMBER_CHARS = 66


def number(tokens, what="a number"):
    sign = -1 if tokens.accept("-") else 1
    if sign == 1:
        tokens.accept("+")
    token = tokens.peek()
    if token.kind != "number":
        raise tokens.expected(what)
    tokens.next()
    text = token.text
    if len(text) > MAX_NUMBER_CHARS:
        raise tokens.error(f"number {text[:12]}... of {len(text)} characters is too long "
                           f"(at most {MAX_NUMBER_CHARS}; no operand needs more than 64 bits)",
                           token)
    try:
        if text[:2].lower() in ("0x", "0b") or not re.search(r"[.eE]", text):
            return sign * int(text, 0)
        return sign * float(text)
    except ValueError:
        raise tokens.error(f"{text!r} is not a number (write hex as 0x...)", token) from None


def register(tokens, token, modifiers):
    """Register named by ``token`` plus its ``.modifier``: unpack (sources) or pack
    (destinations, returned separately). ``modifiers``: "unpack" or "pack"."""
    name, _, modifier = token.text.partition(".")
    if name not in registers.REGISTERS:
        raise tokens.error(f"unknown register {name!r}{suggest(name, registers.REGISTERS)}", token)
    register = registers.REGISTERS[name]
    if not modifier:
        return register, None
    if modifiers == "unpack":
        if modifier not in isa.UNPACK:
            raise tokens.error(f"unknown unpack mode {modifier!r} (known: {', '.join(isa.UNPACK)})", token)
        return register.unpack(modifier), None
    known = {**isa.PACK_A, **isa.PACK_MUL}
    if modifier not in known:
        raise tokens.error(f"unknown pack mode {modifier!r} (known: {', '.join(known)})", token)
    return register, modifier


def destination(tokens):
    token = tokens.peek()
    if token.kind != "word":
        raise tokens.expected("a destination register")
    return register(tokens, tokens.next(), "pack")


def source(tokens):
    token = tokens.peek()
    if token.kind == "word":
        return register(tokens, tokens.next(), "unpack")[0]
    return number(tokens, "a register or a number")


def comma_list(tokens, item):
    values = [item(tokens)]
    while tokens.accept(","):
        values.append(item(tokens))
    return values
