"""Typed errors of the assembler toolkit. Each carries where the problem is.

Also the helpers that make a kernel author's mistake an error about the author's own code:
``caller_location`` finds the kernel line that called into ``asm``, ``suggestion`` proposes the
names that were probably meant, and ``checked_call`` makes a call that Python would reject with
a TypeError (a misspelt keyword, a missing or extra argument) an AssemblerError saying why.
"""

import difflib
import functools
import inspect
import linecache
import os
import sys

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


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


# A message quoting a huge input (a 100,000-character token) keeps its head and tail.
MAX_MESSAGE_CHARS = 600


def _readable(message):
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    keep = MAX_MESSAGE_CHARS // 2
    return f"{message[:keep]}...[{len(message) - 2 * keep} characters]...{message[-keep // 2:]}"


class AsmError(Exception):
    """Base of every error raised by ``asm``. ``location`` is a SourceLocation or None."""

    def __init__(self, message, location=None):
        message = _readable(str(message))
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


def caller_location():
    """SourceLocation of the innermost stack frame outside the asm package."""
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame = frame.f_back
    if frame is None:
        return None
    file, line = frame.f_code.co_filename, frame.f_lineno
    return SourceLocation(file, line, linecache.getline(file, line).strip() or None)


def close_names(name, known):
    """Up to three of the names in ``known`` that look like ``name``, closest first."""
    return difflib.get_close_matches(str(name), [str(k) for k in known], n=3)


def suggestion(name, known):
    """"did you mean ...?" with the names in ``known`` close to ``name``, or the list of them."""
    known = [str(k) for k in known]
    close = close_names(name, known)
    if close:
        return f"did you mean {' or '.join(close)}?"
    return f"known: {', '.join(known)}" if known else "none are defined"


def _argument_problem(name, signature, args, kwargs):
    """Why ``name(*args, **kwargs)`` does not fit ``signature`` (None if it does)."""
    try:
        signature.bind(*args, **kwargs)
        return None
    except TypeError as error:
        reason = str(error)
    parameters = {n: p for n, p in signature.parameters.items() if n != "self"}
    takes_any_keyword = any(p.kind == p.VAR_KEYWORD for p in parameters.values())
    keywords = [n for n, p in parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    unknown = [k for k in kwargs if k not in parameters]
    if unknown and not takes_any_keyword:
        return f"{name}: unknown keyword argument {unknown[0]!r}; {suggestion(unknown[0], keywords)}"
    usage = inspect.Signature(list(parameters.values()))
    return f"{name}: {reason}; it is called as {name}{usage}"


def checked_call(function, signature, args, kwargs):
    """``function(*args, **kwargs)``, where a call that ``signature`` (the function's) does not
    accept raises AssemblerError saying why (without a location) instead of Python's TypeError.
    The signature is only examined after a call has failed, so good calls cost nothing extra."""
    try:
        return function(*args, **kwargs)
    except TypeError:
        problem = _argument_problem(function.__name__, signature, args, kwargs)
        if problem is None:
            raise           # the call was fine; the TypeError came from inside
        raise AssemblerError(problem) from None


def with_caller_location(function):
    """``function``, a public entry point of asm that kernel code calls directly, made to report
    at the caller's line: an AssemblerError without a location gets it, and so does a call with
    arguments the signature does not accept (see ``checked_call``)."""
    signature = inspect.signature(function)

    @functools.wraps(function)
    def located(*args, **kwargs):
        try:
            return checked_call(function, signature, args, kwargs)
        except AssemblerError as error:
            if error.location is not None:
                raise
            raise AssemblerError(error.message, caller_location()) from None
    return located
