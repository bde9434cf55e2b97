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
``location_provider`` (a callable returning a SourceLocation) instead.
"""

import contextlib
import functools
import keyword
import linecache
import os
import sys

from . import builder, hazards, isa
from . import registers as regs
from .encoding import decode
from .errors import AssemblerError, SourceLocation
from .program import Program
from .registers import resolve
from .vpm import MACROS as VPM_MACROS, VpmMacros

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def caller_location():
    """SourceLocation of the innermost stack frame outside the asm package."""
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame = frame.f_back
    if frame is None:
        return None
    file, line = frame.f_code.co_filename, frame.f_lineno
    return SourceLocation(file, line, linecache.getline(file, line).strip() or None)


def _method_name(op_name):
    return op_name + "_" if keyword.iskeyword(op_name) else op_name


# Method name -> op name, for every op of either ALU plus mov.
OP_METHODS = {_method_name(name): name for table in (isa.ADD_OPS, isa.MUL_OPS)
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


class _Entry:
    """One instruction being assembled: its parts, where it was written, what it waives."""

    def __init__(self, location, kind, waive, instruction=None):
        self.location = location
        self.kind = kind                # "alu", "ldi", "branch" or "raw"
        self.halves = {"add": None, "mul": None}
        self.sig = None
        self.ws = None
        self.reads = []
        self.waive = frozenset()
        self.add_waivers(waive)
        self.instruction = instruction
        self.target = None              # branch: (Label or name or int, scope at the call)
        self.branch_args = None

    def add_waivers(self, waive):
        waive = (waive,) if isinstance(waive, str) else tuple(waive)
        if not all(isinstance(rule, str) for rule in waive):
            raise AssemblerError(f"waive={waive!r}: give a rule name or a tuple of rule names")
        self.waive |= frozenset(waive)

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
    """Run an Assembler method with the call site recorded; put it on any AssemblerError."""
    @functools.wraps(method)
    def located(self, *args, **kwargs):
        if self._call_site is not None:     # a macro calling another method
            return method(self, *args, **kwargs)
        self._call_site = self._locate()
        try:
            return method(self, *args, **kwargs)
        except AssemblerError as error:
            if error.location is not None:
                raise
            raise AssemblerError(error.message, self._call_site) from None
        finally:
            self._call_site = None
    return located


class InstructionHandle:
    """The instruction an op call appended; ops called on it fill its other ALU half."""

    __slots__ = ("_assembler", "_entry")

    def __init__(self, assembler, entry):
        self._assembler, self._entry = assembler, entry

    def read(self, *srcs):
        """Add reads whose only use is their side effect to this instruction."""
        return self._assembler._add_reads(self._entry, srcs)

    def __getattr__(self, name):
        return self._assembler._unknown(name)


def _make_op_methods(op_name):
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

    doc = f"``{op_name} dst, src...`` (keywords: cond, sf, pack, rotate, sig, waive, ws)."
    on_assembler.__doc__ = on_handle.__doc__ = doc
    return _with_location(on_assembler), on_handle


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
        if op_name == "mov":
            op_name, srcs = builder.MOV_OPS[alu], tuple(srcs) * 2
            if len(srcs) != 2:
                raise AssemblerError(f"mov takes a destination and one source, got {len(srcs) // 2}")
        half = builder.AluHalf(alu, op_name, dst, srcs, cond, sf, pack, rotate)
        entry.update(halves={alu: half}, sig=sig, ws=ws)
        return InstructionHandle(self, entry)

    @_with_location
    def _chain(self, entry, op_name, dst, srcs, cond, sf, pack, rotate, sig, waive, ws):
        if entry.kind != "alu":
            raise AssemblerError(f"{op_name} cannot be added to a {entry.kind} instruction")
        candidates = [alu for alu in ("add", "mul")
                      if op_name == "mov" or op_name in (isa.ADD_OPS if alu == "add" else isa.MUL_OPS)]
        free = [alu for alu in candidates if entry.halves[alu] is None]
        if not free:
            taken = " and ".join(f"{builder.ALU_NAMES[alu]} ({entry.halves[alu].op.name})" for alu in candidates)
            raise AssemblerError(f"{op_name}: {taken} already used in this instruction")
        # Chained ops that exist on both ALUs go to the MUL ALU when it is free (design.md), so
        # ``a.nop().v8adds(...)`` is the MUL-only form the text syntax's ``nop ; v8adds`` needs.
        handle = self._fill(entry, free[-1], op_name, dst, srcs, cond, sf, pack, rotate, sig, ws)
        entry.add_waivers(waive)
        return handle

    @_with_location
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
    def sema_acquire(self, number, waive=()):
        """Decrement semaphore ``number``; stalls while it is 0."""
        self._entries.append(_Entry(self._call_site, "ldi", waive, builder.build_semaphore(number, acquire=True)))

    @_with_location
    def sema_release(self, number, waive=()):
        """Increment semaphore ``number``; stalls while it is at its maximum."""
        self._entries.append(_Entry(self._call_site, "ldi", waive, builder.build_semaphore(number, acquire=False)))

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
        if interrupt:
            self.host_interrupt()
        self.nop(sig="thrend")
        self.nop()
        self.nop()

    @_with_location
    def branch(self, target, cond="always", link=None, reg=None, absolute=False, sig=None, waive=(), ws=None):
        """Branch to a label (name or Label) or, with ``absolute=True``, to an int address;
        an int target without ``absolute`` is a byte offset in this program. ``reg`` (ra0..ra31)
        is added to the target; ``link`` receives the return address. Three delay slots follow."""
        self._reject_signal(sig, "a branch")
        if absolute and not isinstance(target, int):
            raise AssemblerError(f"absolute branch target {target!r}: give an int address (labels are "
                                 f"relative, the load address of the code is not known here)")
        if not isinstance(target, (int, str, Label)) or isinstance(target, bool):
            raise AssemblerError(f"branch target {target!r} is not a label or an int")
        if isinstance(target, int) and not absolute and target % isa.INSTRUCTION_BYTES:
            raise AssemblerError(f"branch target {target} is not a multiple of {isa.INSTRUCTION_BYTES} bytes")
        args = dict(cond=cond, relative=not absolute, reg=reg, link=link, ws=ws)
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

    @contextlib.contextmanager
    def scope(self, name="scope"):
        """A label namespace: labels placed inside are found first by references inside."""
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
        raise AssemblerError(f"undefined label {target!r}; {regs.suggestion(target, known)}", entry.location)

    # -- result ------------------------------------------------------------------------------

    def assemble(self, check=True):
        """The Program. With ``check``, the static hazard checker runs on it (asm.hazards)."""
        words = []
        for pc, entry in enumerate(self._entries):
            if entry.kind == "branch" and entry.branch_args["relative"]:
                offset = self._resolve_target(entry) - (pc + 1 + isa.BRANCH_DELAY_SLOTS) * isa.INSTRUCTION_BYTES
                try:
                    entry.instruction = builder.build_branch(immediate=offset, **entry.branch_args)
                except AssemblerError as error:
                    raise AssemblerError(error.message, entry.location) from None
            words.append(entry.instruction.encode())
        labels = {label.qualified_name: index * isa.INSTRUCTION_BYTES
                  for label, index, _ in self._labels.values()}
        program = Program(words, labels, [e.location for e in self._entries],
                          [e.waive for e in self._entries])
        if check:
            hazards.check(program)
        return program


for _method, _op in OP_METHODS.items():
    _on_assembler, _on_handle = _make_op_methods(_op)
    _on_assembler.__name__ = _on_handle.__name__ = _method
    setattr(Assembler, _method, _on_assembler)
    setattr(InstructionHandle, _method, _on_handle)


for _macro in VPM_MACROS:
    setattr(Assembler, _macro, _with_location(getattr(VpmMacros, _macro)))


class Kernel:
    """A kernel body ``body(a, *params)``; ``assemble(*params)`` runs it on a fresh Assembler."""

    def __init__(self, body):
        self.body = body
        functools.update_wrapper(self, body)

    def assemble(self, *args, check=True, **kwargs):
        assembler = Assembler()
        self.body(assembler, *args, **kwargs)
        return assembler.assemble(check=check)


def kernel(body):
    """Decorator: turn ``def body(a, ...)`` into a Kernel."""
    return Kernel(body)
