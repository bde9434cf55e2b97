"""The kernel DSL: ``@kernel`` and the ``Assembler`` a kernel body calls.

Each op call appends one instruction and returns an ``InstructionHandle``; calling an op of the
other ALU on the handle fills that ALU's half of the same instruction::

    a.fadd(r3, r1, 1.0).fmul(ra1, r2, r2)

ADD ops are methods named as in ``isa.ADD_OPS`` (``and_``, ``or_``, ``not_`` for Python
keywords); MUL ops as in ``isa.MUL_OPS``. ``v8adds``/``v8subs`` and ``mov`` go to the ADD ALU
when called on the assembler; chained, to the MUL ALU if it is still free, else to the ADD ALU.

Reads whose only purpose is their side effect (popping a uniform, a VPM read, waiting for DMA,
acquiring the mutex) are spelled ``a.read(src)`` (a new instruction with no op that only sets the
read address) or ``.read(src)`` on a handle (adds the read to that instruction).

Errors are raised at the call: an ``AssemblerError`` whose location is the kernel's line. By
default that is the first stack frame outside the ``asm`` package; a text front end passes
``location_provider`` (a callable returning a SourceLocation) instead. A call Python itself
would reject (a misspelt keyword, a missing or extra argument) is such an error too, so a kernel
author never gets a traceback from inside the package.
"""

import contextlib
import functools
import inspect
import keyword

from . import builder, hazards, isa
from . import registers as regs
from .encoding import FORMAT_FIELDS, decode
from .errors import AssemblerError, caller_location, checked_call, suggestion
from .program import Program
from .registers import resolve
from .vpm import MACROS as VPM_MACROS, VpmMacros


def method_name(op_name):
    """The Assembler method of an op: its name, "_" after a Python keyword (and_, or_, not_)."""
    return op_name + "_" if keyword.iskeyword(op_name) else op_name


# Method name -> op name, for every op of either ALU plus mov.
OP_METHODS = {method_name(name): name for table in (isa.ADD_OPS, isa.MUL_OPS)
              for name in table if name != "nop"}
OP_METHODS["mov"] = "mov"


class Label:
    """A place in the program. ``scope`` is the label namespace it was defined in."""

    __slots__ = ("name", "scope")

    def __init__(self, name, scope):
        self.name, self.scope = name, scope

    @property
    def qualified_name(self):
        return "/".join(self.scope + (self.name,))

    def __repr__(self):
        return f"Label({self.qualified_name!r})"


def waiver_set(waive):
    """The hazard rules named by a ``waive=`` argument: one name or a collection of names
    (whether they are rules is checked with the program, see asm.hazards)."""
    rules = (waive,) if isinstance(waive, str) else waive
    if not isinstance(rules, (tuple, list, set, frozenset)) or not all(isinstance(r, str) for r in rules):
        raise AssemblerError(f"waive={waive!r}: give a rule name or a tuple of rule names "
                             f"(asm.hazards.RULES)")
    return frozenset(rules)


# The instruction format (asm.encoding.FORMAT_FIELDS) of each kind of entry that has one, and
# what messages call it.
_FORMAT_OF_KIND = {"alu": ("alu", "an ALU"), "ldi": ("load_imm", "a load-immediate"),
                   "branch": ("branch", "a branch")}


class _Entry:
    """One instruction being assembled: its parts, where it was written, what it waives."""

    def __init__(self, location, kind, waive, instruction=None):
        self.location = location
        self.kind = kind                # "alu", "ldi", "branch" or "raw"
        self.halves = {"add": None, "mul": None}
        self.sig = None
        self.ws = None
        self.reads = []
        self.waive = waiver_set(waive)
        self.instruction = instruction
        self.target = None              # branch: (Label or name or int, scope at the call)
        self.branch_args = None
        self.fields = {}                # raw field values set over the built word (set_fields)

    def update(self, halves=(), sig=None, ws=None, reads=()):
        """Add parts to this ALU instruction. Nothing changes unless the result encodes, so an
        error leaves the program as it was."""
        if sig is not None and self.sig is not None and sig != self.sig:
            raise AssemblerError(f"two signals in one instruction ({self.sig} and {sig}); "
                                 f"an instruction carries one signal")
        if ws is not None and self.ws is not None and ws != self.ws:
            raise AssemblerError(f"ws={ws} contradicts ws={self.ws} given earlier for this instruction")
        halves = {**self.halves, **dict(halves)}
        sig = self.sig if sig is None else sig
        ws = self.ws if ws is None else ws
        reads = self.reads + list(reads)
        self.instruction = builder.build_alu(halves["add"], halves["mul"], sig, ws, reads)
        self.halves, self.sig, self.ws, self.reads = halves, sig, ws, reads


def _with_location(method):
    """A public method of the Assembler or of an InstructionHandle, run with the call site
    recorded. Any AssemblerError it raises, and a call with arguments the method does not take
    (Python's TypeError), becomes an AssemblerError at the call site."""
    signature = inspect.signature(method)

    @functools.wraps(method)
    def located(self, *args, **kwargs):
        assembler = self if isinstance(self, Assembler) else self._assembler
        if assembler._call_site is not None:     # a macro calling another method
            return checked_call(method, signature, (self,) + args, kwargs)
        assembler._call_site = assembler._locate()
        try:
            return checked_call(method, signature, (self,) + args, kwargs)
        except AssemblerError as error:
            raise AssemblerError(error.message, assembler._call_site) from None
        finally:
            assembler._call_site = None
    return located


class InstructionHandle:
    """The instruction an op call appended; ops called on it fill its other ALU half."""

    __slots__ = ("_assembler", "_entry")

    def __init__(self, assembler, entry):
        self._assembler, self._entry = assembler, entry

    @_with_location
    def read(self, *srcs):
        """Add reads whose only use is their side effect to this instruction."""
        return self._assembler._add_reads(self._entry, srcs)

    def __getattr__(self, name):
        return self._assembler._unknown(name)


def _make_op_methods(method_name, op_name):
    def on_assembler(self, dst, *srcs, cond="always", sf=False, pack=None, rotate=None,
                     sig=None, waive=(), ws=None):
        alu = "add" if op_name in isa.ADD_OPS or op_name == "mov" else "mul"
        entry = _Entry(self._call_site, "alu", waive)
        handle = self._fill(entry, alu, op_name, dst, srcs, cond, sf, pack, rotate, sig, ws)
        self._entries.append(entry)
        return handle

    def on_handle(self, dst, *srcs, cond="always", sf=False, pack=None, rotate=None,
                  sig=None, waive=(), ws=None):
        return self._assembler._chain(self._entry, op_name, dst, srcs, cond, sf, pack, rotate,
                                      sig, waive, ws)

    for method in (on_assembler, on_handle):
        method.__name__ = method.__qualname__ = method_name
        method.__doc__ = f"``{op_name} dst, src...`` (keywords: cond, sf, pack, rotate, sig, waive, ws)."
    return _with_location(on_assembler), _with_location(on_handle)


class Assembler(VpmMacros):
    """Collects instructions and labels; ``assemble()`` returns the Program."""

    def __init__(self, location_provider=None):
        self._locate = location_provider or caller_location
        self._call_site = None
        self._entries = []
        self._labels = {}               # (scope, name) -> (Label, instruction index, location)
        self._scope = ()
        self._scope_count = 0

    def __len__(self):
        return len(self._entries)

    @property
    def pc(self):
        """Byte offset of the next instruction."""
        return len(self._entries) * isa.INSTRUCTION_BYTES

    def __getattr__(self, name):
        return self._unknown(name)

    def _unknown(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        methods = [m for m in dir(Assembler) if not m.startswith("_")]
        location = self._call_site or self._locate()
        try:
            resolve("op or method", name, {m: None for m in methods})
        except AssemblerError as error:
            raise AssemblerError(error.message, location) from None

    # -- instructions ------------------------------------------------------------------------

    def _fill(self, entry, alu, op_name, dst, srcs, cond, sf, pack, rotate, sig, ws):
        half = builder.AluHalf(alu, op_name, dst, srcs, cond, sf, pack, rotate)
        entry.update(halves={alu: half}, sig=sig, ws=ws)
        return InstructionHandle(self, entry)

    def _chain(self, entry, op_name, dst, srcs, cond, sf, pack, rotate, sig, waive, ws):
        if entry.kind != "alu":
            raise AssemblerError(f"{op_name} cannot be added to a {entry.kind} instruction")
        candidates = [alu for alu in ("add", "mul")
                      if op_name == "mov" or op_name in (isa.ADD_OPS if alu == "add" else isa.MUL_OPS)]
        free = [alu for alu in candidates if entry.halves[alu] is None]
        if not free:
            taken = " and ".join(f"{builder.ALU_NAMES[alu]} ({entry.halves[alu].op.name})" for alu in candidates)
            raise AssemblerError(f"{op_name}: {taken} already used in this instruction")
        waivers = waiver_set(waive)
        # Chained ops that exist on both ALUs go to the MUL ALU when it is free (design.md), so
        # ``a.nop().v8adds(...)`` is the MUL-only form the text syntax's ``nop ; v8adds`` needs.
        handle = self._fill(entry, free[-1], op_name, dst, srcs, cond, sf, pack, rotate, sig, ws)
        entry.waive |= waivers
        return handle

    def _add_reads(self, entry, srcs):
        if entry.kind != "alu":
            raise AssemblerError(f"a {entry.kind} instruction has no read ports to add reads to")
        entry.update(reads=srcs)
        return InstructionHandle(self, entry)

    @_with_location
    def nop(self, sig=None, waive=()):
        """An instruction with no ops, optionally carrying a signal."""
        entry = _Entry(self._call_site, "alu", waive)
        entry.update(sig=sig)
        self._entries.append(entry)
        return InstructionHandle(self, entry)

    @_with_location
    def read(self, *srcs, sig=None, waive=()):
        """An instruction that only reads ``srcs`` (for the side effect: uniform, vpm, vr_wait,
        mutex_acquire...)."""
        entry = _Entry(self._call_site, "alu", waive)
        entry.update(sig=sig, reads=srcs)
        self._entries.append(entry)
        return InstructionHandle(self, entry)

    @_with_location
    def raw(self, word, waive=()):
        """Append a 64-bit instruction word exactly as given (the text syntax's ``.quad``)."""
        if not isinstance(word, int) or isinstance(word, bool) or not 0 <= word < (1 << 64):
            raise AssemblerError(f"raw instruction word {word!r} is not a 64-bit unsigned int")
        self._entries.append(_Entry(self._call_site, "raw", waive, decode(word)))

    @_with_location
    def set_fields(self, **fields):
        """Set raw fields of the last instruction over what its operands encode (the text
        syntax's ``fields`` part): how the disassembler writes a word that no operand syntax
        gives, such as a MUL nop with a write address. Names are the fields of the
        instruction's format in asm.isa (not sig, which picks the format); values must fit."""
        entry = self._entries[-1] if self._entries else None
        if entry is None or entry.kind == "raw":
            raise AssemblerError("fields: they set fields of the instruction before them (an ALU "
                                 "op, ldi or branch; a .quad gives every bit already)")
        fmt, what = _FORMAT_OF_KIND[entry.kind]
        table = FORMAT_FIELDS[fmt]
        for name, value in fields.items():
            if name == "sig" or name not in table:
                raise AssemblerError(f"fields: {name} is not a field of {what} instruction; its "
                                     f"fields: {', '.join(n for n in table if n != 'sig')}")
            width = table[name][1]
            if isinstance(value, bool) or not isinstance(value, int) or \
                    not 0 <= value < (1 << width):
                raise AssemblerError(f"fields: {name}={value!r} does not fit in {width} bits "
                                     f"(0..{(1 << width) - 1})")
        entry.fields = {**entry.fields, **fields}

    @_with_location
    def ldi(self, dst, value, mode=None, cond="always", sf=False, pack=None, sig=None, waive=(), ws=None):
        """Load a 32-bit int (signed or unsigned) or float, or 16 per-element 2-bit values
        (``mode`` 'signed' -2..1 / 'unsigned' 0..3, chosen from the values unless given).
        ``dst`` may be a pair: the ADD and the MUL destination."""
        self._reject_signal(sig, "a load immediate")
        instruction = builder.build_load_imm(dst, value, mode, cond, sf, pack, ws)
        self._entries.append(_Entry(self._call_site, "ldi", waive, instruction))

    def _reject_signal(self, sig, what):
        if sig is not None:
            raise AssemblerError(f"signal {sig} cannot ride with {what}: its signal field selects "
                                 f"the instruction format")

    @_with_location
    def sema_acquire(self, number, dst=(), cond="always", sf=False, pack=None, waive=(), ws=None):
        """Decrement semaphore ``number``; stalls while it is 0. Like ``ldi``, the instruction
        can also write its immediate (the semaphore word, ``number | 16``) to ``dst``, which
        is nothing by default; ``cond``, ``sf``, ``pack`` and ``ws`` are as for ``ldi``."""
        self._semaphore(number, True, dst, cond, sf, pack, waive, ws)

    @_with_location
    def sema_release(self, number, dst=(), cond="always", sf=False, pack=None, waive=(), ws=None):
        """Increment semaphore ``number``; stalls while it is at its maximum. ``dst`` and the
        other options as for ``sema_acquire`` (the immediate written is ``number``)."""
        self._semaphore(number, False, dst, cond, sf, pack, waive, ws)

    def _semaphore(self, number, acquire, dst, cond, sf, pack, waive, ws):
        instruction = builder.build_semaphore(number, acquire, dst, cond, sf, pack, ws)
        self._entries.append(_Entry(self._call_site, "ldi", waive, instruction))

    @_with_location
    def mutex_acquire(self, waive=()):
        """Read mutex_acquire: stalls until this QPU holds the mutex."""
        return self.read(regs.mutex_acquire, waive=waive)

    @_with_location
    def mutex_release(self, waive=()):
        return self.mov(regs.mutex_release, 1, waive=waive)

    @_with_location
    def host_interrupt(self, waive=()):
        return self.mov(regs.host_int, 1, waive=waive)

    @_with_location
    def exit(self, interrupt=True):
        """End the program: host interrupt (what the launcher counts), thrend, two delay slots.
        Nothing here writes regfile A/B, reads uniforms or touches the VPM (fact sheet section 2)."""
        if builder.flag("interrupt", interrupt):
            self.host_interrupt()
        self.nop(sig="thrend")
        self.nop()
        self.nop()

    @_with_location
    def branch(self, target, cond="always", link=None, reg=None, absolute=False, sig=None, waive=(), ws=None,
               sf=False):
        """Branch to a label (name or Label) or, with ``absolute=True``, to an int address;
        an int target without ``absolute`` is a byte offset in this program. ``reg`` (ra0..ra31)
        is added to the target; ``link`` receives the return address; ``sf`` sets the flags
        from it (if taken). Three delay slots follow."""
        self._reject_signal(sig, "a branch")
        absolute = builder.flag("absolute", absolute)
        if absolute and not isinstance(target, int):
            raise AssemblerError(f"absolute branch target {target!r}: give an int address (labels are "
                                 f"relative, the load address of the code is not known here)")
        if not isinstance(target, (int, str, Label)) or isinstance(target, bool):
            raise AssemblerError(f"branch target {target!r} is not a label or an int")
        if isinstance(target, int) and not absolute and target % isa.INSTRUCTION_BYTES:
            raise AssemblerError(f"branch target {target} is not a multiple of {isa.INSTRUCTION_BYTES} bytes")
        args = dict(cond=cond, relative=not absolute, reg=reg, link=link, ws=ws, sf=sf)
        # A relative offset is known once the labels are; build now to check everything else.
        entry = _Entry(self._call_site, "branch", waive,
                       builder.build_branch(immediate=target if absolute else 0, **args))
        entry.target, entry.branch_args = (target, self._scope), args
        self._entries.append(entry)

    # -- labels ------------------------------------------------------------------------------

    @_with_location
    def label(self, name):
        """Place label ``name`` at the next instruction; returns the Label."""
        if not isinstance(name, str) or not name:
            raise AssemblerError(f"label name {name!r} must be a non-empty string")
        key = (self._scope, name)
        if key in self._labels:
            raise AssemblerError(f"duplicate label {name!r} (first defined at {self._labels[key][2]})")
        label = Label(name, self._scope)
        self._labels[key] = (label, len(self._entries), self._call_site)
        return label

    @_with_location
    def scope(self, name="scope"):
        """A label namespace for a ``with`` block: labels placed inside are found first by
        references inside. ``name`` (plus a count) prefixes the labels' qualified names."""
        if not isinstance(name, str) or not name:
            raise AssemblerError(f"scope name {name!r} must be a non-empty string")
        return self._scoped(name)

    @contextlib.contextmanager
    def _scoped(self, name):
        self._scope_count += 1
        outer = self._scope
        self._scope = outer + (f"{name}{self._scope_count}",)
        try:
            yield
        finally:
            self._scope = outer

    def _resolve_target(self, entry):
        target, scope = entry.target
        if isinstance(target, int):
            return target
        if isinstance(target, Label):
            scope, target = target.scope, target.name
        for depth in range(len(scope), -1, -1):
            found = self._labels.get((scope[:depth], target))
            if found is not None:
                return found[1] * isa.INSTRUCTION_BYTES
        known = [label.qualified_name for label, _, _ in self._labels.values()]
        raise AssemblerError(f"undefined label {target!r}; {suggestion(target, known)}", entry.location)

    # -- result ------------------------------------------------------------------------------

    def assemble(self, check=True):
        """The Program. With ``check``, the static hazard checker runs on it (asm.hazards)."""
        words = []
        for pc, entry in enumerate(self._entries):
            if entry.kind == "branch" and entry.branch_args["relative"]:
                offset = self._resolve_target(entry) - (pc * isa.INSTRUCTION_BYTES + isa.BRANCH_RETURN_OFFSET)
                try:
                    entry.instruction = builder.build_branch(immediate=offset, **entry.branch_args)
                except AssemblerError as error:
                    raise AssemblerError(error.message, entry.location) from None
            words.append(entry.instruction.replace(**entry.fields).encode())
        labels = {label.qualified_name: index * isa.INSTRUCTION_BYTES
                  for label, index, _ in self._labels.values()}
        program = Program(words, labels, [e.location for e in self._entries],
                          [e.waive for e in self._entries])
        if check:
            hazards.check(program)
        return program


for _method, _op in OP_METHODS.items():
    _on_assembler, _on_handle = _make_op_methods(_method, _op)
    setattr(Assembler, _method, _on_assembler)
    setattr(InstructionHandle, _method, _on_handle)


for _macro in VPM_MACROS:
    setattr(Assembler, _macro, _with_location(getattr(VpmMacros, _macro)))


# Where assembled programs may be kept across processes: None, or an object with
# ``get(kernel, args, kwargs, check)`` -> Program or None and ``put(kernel, args, kwargs, check,
# program)`` (vc4nn.runtime.program_cache sets a disk store while a session loads).
program_store = None


class Kernel:
    """A kernel body ``body(a, *params)``; ``assemble(*params)`` runs it on a fresh Assembler."""

    def __init__(self, body):
        self.body = body
        functools.update_wrapper(self, body)

    def assemble(self, *args, check=True, **kwargs):
        store = program_store
        program = None if store is None else store.get(self, args, kwargs, check)
        if program is None:
            assembler = Assembler()
            self.body(assembler, *args, **kwargs)
            program = assembler.assemble(check=check)
            if store is not None:
                store.put(self, args, kwargs, check, program)
        return program


def kernel(body):
    """Decorator: turn ``def body(a, ...)`` into a Kernel."""
    return Kernel(body)
