"""Register operands of the kernel DSL, built from the address maps in ``asm.isa``.

A ``Register`` says how it can be read (an accumulator mux, or a read address per regfile side)
and how it can be written (a write address per side). The builder picks the side:

- ``ra0``..``ra31`` / ``rb0``..``rb31`` are the physical register files, one side each.
- ``ra32``..``ra63`` / ``rb32``..``rb63`` are the I/O addresses forced onto one side, so every
  encodable read or write can be spelled (``ra32`` reads the uniform stream through regfile A,
  ``rb48`` reads the VPM through regfile B, ``ra37`` written is ``r5quad``).
- Named I/O registers (``uniform``, ``vpm``, ``vr_setup``, ``host_int``...) carry every side the
  name exists on; the builder uses whichever side is free.
- ``null`` writes nowhere (address 39 on either side); ``r0``-``r5`` are accumulators. ``r5`` is
  read-only here: its two write forms differ per side and are spelled ``r5quad`` / ``r5rep``.
"""

import numbers

from . import isa
from .errors import AssemblerError, suggestion, with_caller_location

SIDES = ("a", "b")


def resolve(kind, name, table):
    """``table[name]``, or an AssemblerError that suggests close names."""
    if isinstance(name, str) and name in table:
        return table[name]
    raise AssemblerError(f"unknown {kind} {name!r}; {suggestion(name, table)}")


class Register:
    """A register operand. ``reads`` / ``writes``: side -> address; ``mux``: accumulator mux."""

    __slots__ = ("name", "reads", "writes", "mux", "unpack_mode")

    def __init__(self, name, reads=None, writes=None, mux=None, unpack_mode=None):
        self.name = name
        self.reads = dict(reads or {})
        self.writes = dict(writes or {})
        self.mux = mux
        self.unpack_mode = unpack_mode

    @with_caller_location
    def unpack(self, mode):
        """This register read through the unpack unit (regfile A reads with pm=0, r4 with pm=1)."""
        resolve("unpack mode", mode, isa.UNPACK)
        if self.unpack_mode is not None:
            raise AssemblerError(f"{self!r} is already unpacked")
        return Register(self.name, self.reads, self.writes, self.mux, mode)

    @property
    def readable(self):
        return self.mux is not None or bool(self.reads)

    @property
    def writable(self):
        return bool(self.writes)

    def __repr__(self):
        return self.name if self.unpack_mode is None else f"{self.name}.unpack({self.unpack_mode!r})"


def _named_registers():
    """Named registers from isa's read/write maps; accumulators keep their mux."""
    reads, writes = {}, {}
    for side in SIDES:
        for addr, name in isa.READ[side].items():
            if name != "nop":       # reading address 39 is spelled ra39 / rb39
                reads.setdefault(name, {})[side] = addr
        for addr, name in isa.WRITE[side].items():
            writes.setdefault("null" if name == "nop" else name, {})[side] = addr
    names = list(isa.MUX_ACC) + sorted(set(reads) | set(writes) - set(isa.MUX_ACC))
    return {name: Register(name, reads.get(name), writes.get(name), isa.MUX_ACC.get(name))
            for name in names}


class RegisterFile:
    """``ra[i]`` / ``rb[i]``: address i (0..63) of one side, for reading and writing."""

    def __init__(self, side):
        self.side = side
        self._registers = [self._make(i) for i in range(2 * isa.REGFILE_SIZE)]

    def _make(self, addr):
        physical = addr < isa.REGFILE_SIZE
        reads = {self.side: addr} if physical or addr in isa.READ[self.side] else {}
        writes = {self.side: addr} if physical or addr in isa.WRITE[self.side] else {}
        return Register(f"r{self.side}{addr}", reads, writes)

    @with_caller_location
    def __getitem__(self, index):
        if isinstance(index, bool) or not isinstance(index, numbers.Integral) \
                or not 0 <= index < len(self._registers):
            raise AssemblerError(f"r{self.side}[{index!r}]: register file addresses are "
                                 f"0..{len(self._registers) - 1} (0..{isa.REGFILE_SIZE - 1} are the "
                                 f"physical registers)")
        return self._registers[int(index)]

    def __len__(self):
        return isa.REGFILE_SIZE

    def __iter__(self):
        return iter(self._registers[:isa.REGFILE_SIZE])

    def __repr__(self):
        return f"r{self.side}"


ra = RegisterFile("a")
rb = RegisterFile("b")
NAMED = _named_registers()
# Every register by name: r0-r5, named I/O registers, null, ra0..ra63, rb0..rb63.
REGISTERS = {**NAMED, **{reg.name: reg for rf in (ra, rb) for reg in rf._registers}}


@with_caller_location
def lookup(name):
    """The register called ``name`` (as the text syntax spells it)."""
    return resolve("register", name, REGISTERS)


globals().update(REGISTERS)
__all__ = ["Register", "RegisterFile", "ra", "rb", "lookup", "REGISTERS", *REGISTERS]
