"""Code files: raw little-endian ``.bin`` words or a hex listing (``Program.hex()``'s and other
tools'), read into 64-bit words for the disassembler and the command lines.
"""

import re

import numpy as np

from . import encoding
from .errors import AsmError, EncodingError, ParseError, SourceLocation


_HEX_TOKEN = re.compile(r"^(?:0[xX])?([0-9a-fA-F]+)$")


def words_from_hex(text, source="<hex>"):
    """64-bit words of a hex listing.

    Each line holds, after removing ``#`` or ``//`` comments and commas, either one 64-bit word
    (up to 16 hex digits, optional ``0x``) or two 32-bit words, low then high (up to 8 hex
    digits each, optional ``0x``). Blank lines are skipped.
    """
    words = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = re.split(r"#|//", raw, maxsplit=1)[0].replace(",", " ").split()
        if not line:
            continue
        where = SourceLocation(source, number, raw)
        matches = [_HEX_TOKEN.match(token) for token in line]
        bad = [token for token, m in zip(line, matches) if m is None]
        if bad:
            raise ParseError(f"{bad[0]!r} is not a hex number", where)
        digits = [m.group(1) for m in matches]
        if len(digits) == 1 and len(digits[0]) <= 16:
            words.append(int(digits[0], 16))
        elif len(digits) == 2 and all(len(d) <= 8 for d in digits):
            words.append(int(digits[0], 16) | int(digits[1], 16) << 32)
        else:
            raise ParseError("expected one 64-bit word (up to 16 hex digits) or two 32-bit words "
                             "'low high' (up to 8 hex digits each)", where)
    return words


def _looks_like_hex_listing(data):
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        return False
    return all(ch.isprintable() or ch in "\r\n\t" for ch in text)


# A bound on what read_words reads: a hex listing of 2M instructions (17 bytes a word), far more
# than a QPU program holds; it keeps a device file like /dev/zero from filling the memory.
MAX_CODE_FILE_BYTES = 32 << 20


def read_words(path, fmt="auto"):
    """Words of a code file as a uint64 array. ``fmt``: "bin", "hex" or "auto" (by the file
    extension: .bin raw, .hex/.txt listing; otherwise text that is printable ASCII is a listing)."""
    with open(path, "rb") as f:
        data = f.read(MAX_CODE_FILE_BYTES + 1)
    if len(data) > MAX_CODE_FILE_BYTES:
        raise EncodingError(f"{path}: larger than {MAX_CODE_FILE_BYTES >> 20} MiB, which is more "
                            f"than any QPU program (is it the right file?)")
    if fmt == "auto":
        lower = str(path).lower()
        if lower.endswith(".bin"):
            fmt = "bin"
        elif lower.endswith((".hex", ".txt")):
            fmt = "hex"
        else:
            fmt = "hex" if _looks_like_hex_listing(data) else "bin"
    if fmt == "bin":
        try:
            words = encoding.words_from_bytes(data)
        except EncodingError as error:
            raise EncodingError(f"{path}: {error.message}") from None
    elif fmt == "hex":
        try:
            text = data.decode("ascii")
        except UnicodeDecodeError:
            raise ParseError(f"{path}: not a hex listing (not ASCII text)") from None
        words = words_from_hex(text, str(path))
    else:
        raise AsmError(f"unknown code format {fmt!r}; give 'auto', 'bin' or 'hex'")
    return np.array(words, dtype=np.uint64)
