"""Text syntax -> Program (the syntax is described in docs/asm-syntax.md).

The parser only reads text. Each statement becomes calls on the same ``Assembler`` the Python
DSL uses (``a.fadd(...).fmul(...)``, ``a.ldi``, ``a.branch``...), with the text file and line as
the source location, so operand conflicts, label errors and hazard reports are the DSL's own and
point at the text line. Errors in the text itself are ``ParseError``s giving the column and what
was expected.
"""

import collections
import os
import re

from . import isa, lexer, registers
from .errors import ParseError, SourceLocation
from .kernel import Assembler, method_name

_LABEL_NAME = re.compile(r"[A-Za-z_][\w.$/]*")
_ROTATE = re.compile(r"^rot(r5|\d+)$")
# Parts of an ALU statement after the ops: a signal name, ``read SRC...`` or ``waive RULE...``.
_READ, _WAIVE, _FIELDS = "read", "waive", "fields"
# Statements with one instruction part; the load forms call these Assembler methods.
_LOAD_FORMS = {"ldi": "ldi", "sacq": "sema_acquire", "srel": "sema_release"}
_SINGLE_FORMS = (*_LOAD_FORMS, "branch", ".quad")


def is_label_name(name):
    """Whether ``name`` can be written as a label (``pc`` means the branch's own address)."""
    return bool(_LABEL_NAME.fullmatch(name)) and name != "pc"


# ---------------------------------------------------------------------------------------------
# Statements -> a list of calls: the first on the Assembler, the rest on the handle it returns.
# A branch target stays a _Target until the caller knows where the branch is.
# ---------------------------------------------------------------------------------------------


class _Target:
    """A relative branch target: a label name, or ``pc`` plus a byte offset."""

    __slots__ = ("label", "offset")

    def __init__(self, label=None, offset=0):
        self.label, self.offset = label, offset


def _mnemonic(tokens):
    token = tokens.peek()
    if token.kind != "word":
        raise tokens.expected("an instruction")
    tokens.next()
    name, *modifiers = token.text.split(".") if not token.text.startswith(".") else [token.text]
    return token, name, modifiers


# A dotted modifier: the keyword argument it sets, whether a modifier text is one, its value.
_Modifier = collections.namedtuple("_Modifier", "keyword matches value description")
_CONDITION = _Modifier("cond", lambda m: m in isa.CONDITIONS, str,
                       f"a condition ({', '.join(isa.CONDITIONS)})")
_SF = _Modifier("sf", lambda m: m == "sf", lambda m: True, "sf")
_ROTATION = _Modifier("rotate", _ROTATE.match,
                      lambda m: registers.REGISTERS["r5"] if m == "rotr5" else int(m[len("rot"):]),
                      "rotN (1..15) or rotr5")
_LDI_MODE = _Modifier("mode", lambda m: m in isa.PER_ELEMENT_RANGES, str,
                      " or ".join(isa.PER_ELEMENT_RANGES))
_BRANCH_CONDITION = _Modifier("cond", lambda m: m in isa.BRANCH_CONDITIONS, str,
                              f"a branch condition ({', '.join(isa.BRANCH_CONDITIONS)})")
_ABSOLUTE = _Modifier("absolute", lambda m: m == "abs", lambda m: True, "abs")


def _modifiers(tokens, token, name, modifiers, allowed):
    """Keyword arguments from the dotted ``modifiers`` of mnemonic ``name``; each of the
    ``allowed`` _Modifiers may be given once."""
    kwargs = {}
    for modifier in modifiers:
        kind = next((m for m in allowed if m.keyword not in kwargs and m.matches(modifier)), None)
        if kind is None and not allowed:
            raise tokens.error(f"{name} takes no modifiers", token)
        if kind is None:
            raise tokens.error(f"{name}: modifier {modifier!r} is unknown or repeated; allowed once "
                               f"each: {', '.join(m.description for m in allowed)}", token)
        kwargs[kind.keyword] = kind.value(modifier)
    return kwargs


def _alu_part(tokens, alu):
    """``op[.cond][.sf][.rotN] dst, src...`` of one ALU -> (method, args, kwargs), or None for nop."""
    token, name, modifiers = _mnemonic(tokens)
    ops = isa.ADD_OPS if alu == "add" else isa.MUL_OPS
    if name not in ops and name != "mov":
        other = isa.MUL_OPS if alu == "add" else isa.ADD_OPS
        hint = ""
        if name in other:
            hint = (f"; {name} is a MUL op: write `nop ; {name} ...`" if alu == "add"
                    else f"; {name} is an ADD op and goes first")
        raise tokens.error(f"unknown {alu.upper()} op {name!r}{hint or lexer.suggest(name, list(ops) + ['mov'])}",
                           token)
    if name == "nop":
        _modifiers(tokens, token, name, modifiers, ())
        tokens.finish()
        return None
    allowed = (_CONDITION, _SF, _ROTATION) if alu == "mul" else (_CONDITION, _SF)
    kwargs = _modifiers(tokens, token, name, modifiers, allowed)
    dst, pack = lexer.destination(tokens)
    if pack:
        kwargs["pack"] = pack
    sources = []
    while tokens.accept(","):
        sources.append(lexer.source(tokens))
    tokens.finish()
    # Chained onto the ADD half (or a nop), ops of both ALUs (mov, v8adds, v8subs) go to MUL.
    return method_name(name), [dst] + sources, kwargs


def _extras(parts, allow_alu_extras):
    """Signal, ``read`` and ``waive`` parts -> (sig, reads, waive)."""
    sig, reads, waive = None, [], []
    for tokens in parts:
        token, name, modifiers = _mnemonic(tokens)
        if modifiers:
            raise tokens.error(f"{name} takes no modifiers", token)
        if name == _WAIVE:
            waive.extend(lexer.comma_list(tokens, _rule_name))
        elif not allow_alu_extras:
            raise tokens.expected("`waive RULE` (this instruction has no signal or read ports)", token)
        elif name == _READ:
            reads.extend(lexer.comma_list(tokens, lexer.source))
        elif name in isa.USER_SIGNALS and sig is None:
            sig = name
        elif name in isa.ADD_OPS or name in isa.MUL_OPS or name == "mov":
            raise tokens.error(f"{name}: an instruction has one ADD op then one MUL op, and they come "
                               f"before the signal, read and waive parts", token)
        else:
            what = "a second signal" if name in isa.USER_SIGNALS else repr(name)
            raise tokens.error(f"{what} here: after the ops come a signal "
                               f"({', '.join(isa.USER_SIGNALS)}), `read SRC` or `waive RULE`", token)
        tokens.finish()
    return sig, reads, tuple(waive)


def _rule_name(tokens):
    token = tokens.next()
    if token.kind != "word":
        raise tokens.expected("a hazard rule name", token)
    return token.text


def _is_extra(tokens):
    name = tokens.peek().text
    return name in (_READ, _WAIVE) or name in isa.USER_SIGNALS


def _mul_only(tokens):
    name = tokens.peek().text.split(".")[0]
    return name in isa.MUL_OPS and name not in isa.ADD_OPS


def _alu_statement(parts):
    # ``fmul ...`` alone (an op only the MUL ALU has) is short for ``nop ; fmul ...``.
    ops = [None] if _mul_only(parts[0]) else []
    while parts and not _is_extra(parts[0]) and len(ops) < 2:
        ops.append(_alu_part(parts.pop(0), ("add", "mul")[len(ops)]))
    sig, reads, waive = _extras(parts, allow_alu_extras=True)
    add, mul = (ops + [None, None])[:2]
    first = {"sig": sig, "waive": waive}
    if add is not None:
        calls = [(add[0], add[1], {**add[2], **first})]
    elif reads and mul is None:
        return [("read", reads, first)]
    else:
        calls = [("nop", [], first)]
    if mul is not None:
        calls.append(mul)
    if reads:
        calls.append(("read", reads, {}))
    return calls


def _load_statement(tokens, name, modifiers, token):
    """``ldi`` / ``sacq`` / ``srel`` ``[DST[, DST2],] VALUE``: a load immediate, or a semaphore
    instruction (VALUE is the semaphore number) that can write its immediate like one."""
    allowed = (_LDI_MODE, _CONDITION, _SF) if name == "ldi" else (_CONDITION, _SF)
    kwargs = _modifiers(tokens, token, name, modifiers, allowed)
    items = []
    while True:
        if tokens.peek().kind == "word":
            items.append(("dst", tokens.peek(), lexer.destination(tokens)))
        elif name == "ldi" and tokens.accept("["):
            values = lexer.comma_list(tokens, lexer.number)
            tokens.expect("]", "']' closing the per-element values")
            items.append(("value", None, values))
        else:
            items.append(("value", None, lexer.number(tokens, "a destination or a value")))
        if not tokens.accept(","):
            break
    tokens.finish()
    *dsts, value = items
    what = "the value (a number or [16 per-element values])" if name == "ldi" else "the semaphore number"
    if value[0] != "value":
        raise tokens.error(f"{name}: the last operand is {what}", value[1])
    if len(dsts) > 2 or any(kind != "dst" for kind, _, _ in dsts):
        raise tokens.error(f"{name} takes up to two destinations (ADD then MUL write) and {what}", token)
    for position, (_, dst_token, (_, pack)) in enumerate(dsts):
        if pack is None:
            continue
        # The first destination is the ADD write (a pm=0 pack packs it), the second the MUL
        # write (the colour pack, pm=1, packs it): the text puts the pack where it applies.
        home = 1 if pack in isa.PACK_MUL and pack not in isa.PACK_A else 0
        if position != home or "pack" in kwargs:
            which = "second (MUL)" if home else "first (ADD)"
            raise tokens.error(f"{name} pack {pack}: it applies to the {which} destination, one pack "
                               f"per instruction", dst_token)
        kwargs["pack"] = pack
    registers_written = tuple(reg for _, _, (reg, _) in dsts)
    if name == "ldi":
        return "ldi", [registers_written, value[2]], kwargs
    return _LOAD_FORMS[name], [value[2]], {**kwargs, "dst": registers_written}


def _branch_statement(tokens, modifiers, token):
    kwargs = _modifiers(tokens, token, "branch", modifiers, (_BRANCH_CONDITION, _ABSOLUTE, _SF))
    where = tokens.peek()
    if kwargs.get("absolute"):
        target = lexer.number(tokens, "an absolute address")
    elif where.kind == "word" and where.text == "pc":
        tokens.next()
        offset = 0
        if tokens.peek().text in ("+", "-") and tokens.peek(1).kind == "number":
            offset = lexer.number(tokens)
        target = _Target(offset=offset)
    elif where.kind == "word":
        target = _Target(label=tokens.next().text)
    else:
        raise tokens.expected("a label or pc+OFFSET (an absolute address needs branch.abs)")
    if tokens.accept("+"):
        kwargs["reg"] = lexer.source(tokens)
    if tokens.accept(","):
        tokens.expect("link", "'link=REGISTER'")
        tokens.expect("=", "'=' after link")
        kwargs["link"], pack = lexer.destination(tokens)
        if pack:
            raise tokens.error("a branch link cannot be packed")
    tokens.finish()
    return "branch", [target], kwargs


def _single_statement(parts):
    tokens = parts[0]
    token, name, modifiers = _mnemonic(tokens)
    _, _, waive = _extras(parts[1:], allow_alu_extras=False)
    if name in _LOAD_FORMS:
        method, args, kwargs = _load_statement(tokens, name, modifiers, token)
    elif name == "branch":
        method, args, kwargs = _branch_statement(tokens, modifiers, token)
    else:
        _modifiers(tokens, token, name, modifiers, ())
        method, args, kwargs = "raw", [lexer.number(tokens, "a 64-bit instruction word")], {}
        tokens.finish()
    return [(method, args, {**kwargs, "waive": waive})]


def parse_line(text, location):
    """One line -> (label names, calls or None). ``location`` is the line's SourceLocation."""
    code = text.split("#", 1)[0]
    tokens = lexer.tokenize(code, location)
    labels = []
    while len(tokens) >= 2 and tokens[0].kind == "word" and tokens[1].text == ":":
        if not is_label_name(tokens[0].text):
            raise ParseError(f"column {tokens[0].column}: {tokens[0].text!r} cannot be a label name "
                             f"(a letter or _, then letters, digits, _ . $ /; not pc)", location)
        labels.append(tokens[0].text)
        tokens = tokens[2:]
    if not tokens:
        return labels, None
    parts, current = [], []
    for token in tokens + [lexer.Token("punct", ";", len(code) + 1)]:
        if token.text == ";" and token.kind == "punct":
            if not current:
                raise ParseError(f"column {token.column}: expected an instruction part before ';'",
                                 location)
            parts.append(lexer.Tokens(current, location, token.column))
            current = []
        else:
            current.append(token)
    fields = [part for part in parts[1:] if part.peek().text == _FIELDS]
    parts = [part for part in parts if part not in fields]
    first = parts[0].peek().text
    if (first if first.startswith(".") else first.split(".")[0]) in _SINGLE_FORMS:
        calls = _single_statement(parts)
    else:
        calls = _alu_statement(parts)
    return labels, calls + [("set_fields", [], _field_values(tokens)) for tokens in fields]


def _field_values(tokens):
    """``fields NAME=VALUE, ...`` -> {name: value}: raw fields set over the built word."""
    tokens.next()
    values = {}

    def field(tokens):
        token = tokens.next()
        if token.kind != "word":
            raise tokens.expected("a field name (asm.isa: waddr_mul, cond_mul, ...)", token)
        tokens.expect("=", f"'=' after {token.text}")
        value = lexer.number(tokens, f"the value of {token.text}")
        if token.text in values:
            raise tokens.error(f"field {token.text} given twice", token)
        values[token.text] = value
    lexer.comma_list(tokens, field)
    tokens.finish()
    return values


# ---------------------------------------------------------------------------------------------
# Driving the Assembler.
# ---------------------------------------------------------------------------------------------


def _apply(calls, assembler, resolve_target):
    target = assembler
    for method, args, kwargs in calls:
        args = [resolve_target(arg) if isinstance(arg, _Target) else arg for arg in args]
        # set_fields acts on the instruction as a whole, once its parts are all given
        result = getattr(assembler if method == "set_fields" else target, method)(*args, **kwargs)
        target = result if result is not None else target


class _TextAssembler:
    """An Assembler whose source locations are lines of a text."""

    def __init__(self):
        self.location = None
        self.assembler = Assembler(location_provider=lambda: self.location)


def assemble_text(text, filename="<text>", check=True):
    """Assemble program text -> Program (hazard-checked unless ``check`` is False)."""
    if not isinstance(text, str):
        raise ParseError(f"{filename}: the program text must be a str, got {type(text).__name__}")
    front = _TextAssembler()
    a = front.assembler
    for number, line in enumerate(text.splitlines(), 1):
        front.location = SourceLocation(filename, number, line.strip() or None)
        labels, calls = parse_line(line, front.location)
        for name in labels:
            a.label(name)
        if calls:
            # ``pc+N`` counts from the branch itself, which is the next instruction appended.
            _apply(calls, a, lambda t: t.label if t.label is not None else a.pc + t.offset)
    return a.assemble(check=check)


# Bounds what assemble_file reads, so a device file (/dev/zero) cannot fill the memory.
MAX_SOURCE_CHARS = 64 << 20


def assemble_file(path, check=True):
    """Assemble a text file -> Program. The source map holds the file's lines."""
    if not isinstance(path, (str, os.PathLike)):
        raise ParseError(f"the path of a program text must be a file name, got "
                         f"{type(path).__name__}")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(MAX_SOURCE_CHARS + 1)
    except UnicodeDecodeError as error:
        raise ParseError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    if len(text) > MAX_SOURCE_CHARS:
        raise ParseError(f"{path}: longer than {MAX_SOURCE_CHARS >> 20} M characters, more than "
                         f"any QPU program's source (is it the right file?)")
    return assemble_text(text, str(path), check)


def assemble_line(text, address=0, labels=None):
    """The word of one statement placed at byte ``address``; branch labels are looked up in
    ``labels`` (name -> byte offset). Used by the disassembler to verify what it prints."""
    front = _TextAssembler()
    front.location = SourceLocation("<line>", 1, text)
    line_labels, calls = parse_line(text, front.location)
    if line_labels or not calls:
        raise ParseError("expected exactly one statement and no label", front.location)
    known = labels or {}

    def resolve(target):
        # Assembled alone the branch sits at 0, so its target moves by -address with it.
        if target.label is None:
            return target.offset
        if target.label not in known:
            raise ParseError(f"undefined label {target.label!r}", front.location)
        return known[target.label] - address

    _apply(calls, front.assembler, resolve)
    return front.assembler.assemble(check=False).words[0]

