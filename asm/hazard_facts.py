"""What one instruction reads, writes and signals, in the terms the hazard rules use
(asm/hazard_rules.py). Registers are matched by their isa names so no address is written twice.

Flags are unknown statically, so a write counts unless its condition is ``never``.
"""

import collections
import functools

from . import isa

ACCUMULATORS = frozenset(isa.WRITE_A[addr] for addr in isa.ACCUMULATOR_WRITE)   # r0-r3
_VPM_READS = frozenset({"vpm", "vr_busy", "vw_busy", "vr_wait", "vw_wait"})
VPM_WRITES = frozenset({"vpm", "vr_setup", "vw_setup", "vr_addr", "vw_addr"})
_UNIFORM_READS = frozenset({"uniform", "varying"})

_NEVER = isa.CONDITIONS["never"]
_ALWAYS = isa.CONDITIONS["always"]
_SEMAPHORE_MODE = isa.LOAD_IMM_MODES["semaphore"]


def _regfile_name(side, addr):
    return f"r{side}{addr}"


def _read_name(side, addr):
    """What a read address reads; addresses with no meaning on that side keep their number."""
    if addr < isa.REGFILE_SIZE:
        return _regfile_name(side, addr)
    return isa.READ[side].get(addr, _regfile_name(side, addr))


_Write = collections.namedtuple("_Write", "addr cond name")


class Facts:
    """What one instruction reads, writes and signals, in the terms the rules use."""

    def __init__(self, ins):
        fmt = ins.format
        self.is_branch = fmt == "branch"
        self.thread_end = ins.sig in isa.THREAD_END_SIGNALS
        self.thread_switch = ins.sig in isa.THREAD_SWITCH_SIGNALS
        self.signal = isa.SIGNAL_NAMES[ins.sig]
        self.writes = _writes(ins)
        self.write_names = {w.name for w in self.writes}
        self.regfile_writes = {w.name for w in self.writes if w.addr < isa.REGFILE_SIZE}
        self.raddrs = _raddrs(ins)
        self.read_names = {_read_name(side, addr) for side, addr in self.raddrs}
        muxes = _used_muxes(ins)
        self.regfile_reads = _regfile_reads(ins, muxes)
        self.reads_r4 = (isa.MUX_ACC["r4"] in muxes
                         or (fmt == "alu" and ins.pm and ins.unpack != isa.UNPACK["nop"]))
        self.sfu_writes = [w.name for w in self.writes if w.addr in isa.SFU_WRITE]
        self.tmu_writes = [w.name for w in self.writes if w.addr in isa.TMU_WRITE]
        self.r4_writers = self.sfu_writes + ([self.signal] if ins.sig in isa.R4_WRITING_SIGNALS
                                             else [])
        self.acc_writes = self.write_names & ACCUMULATORS
        self.r5_write = any(w.addr == isa.R5_WRITE for w in self.writes)
        self.unif_addr_write = any(w.addr == isa.UNIF_ADDR_WRITE for w in self.writes)
        self.noswap_write = any(w.addr == isa.TMU_NOSWAP_ADDR for w in self.writes)
        self.rotation, self.rotated = _rotation(ins)
        self.peripherals = _peripheral_accesses(ins, self)
        self.end_slot_accesses = _end_slot_accesses(self)


# Unrolled kernels repeat the same few instruction words many times.
facts_of = functools.lru_cache(maxsize=4096)(Facts)


def _writes(ins):
    """The ADD then MUL writes (of an ALU op, ldi or branch link) that happen."""
    if ins.format == "branch":
        conds = {"add": _ALWAYS, "mul": _ALWAYS}     # the link is written when the branch is taken
    else:
        conds = {"add": ins.cond_add, "mul": ins.cond_mul}
    writes = []
    for alu, addr in (("add", ins.waddr_add), ("mul", ins.waddr_mul)):
        if addr == isa.NOP_ADDR or conds[alu] == _NEVER:
            continue
        side = isa.write_side(alu, ins.ws)
        name = _regfile_name(side, addr) if addr < isa.REGFILE_SIZE else isa.WRITE[side][addr]
        writes.append(_Write(addr, conds[alu], name))
    return writes


def _raddrs(ins):
    """(side, address) of the read ports in use. An I/O read (uniform, vpm, mutex...) happens
    whether or not a mux takes the value, so this ignores the muxes."""
    if ins.format == "branch":
        return {("a", ins.raddr_a)} if ins.reg else set()
    if ins.format != "alu":
        return set()
    reads = {("a", ins.raddr_a)}
    if ins.sig != isa.SIG_SMALL_IMM:
        reads.add(("b", ins.raddr_b))
    return reads


def _used_muxes(ins):
    """Muxes whose value an ALU consumes. Both muxes of a unary op count, since which one the
    hardware reads is disputed (fact sheet 5.8) and toolchains fill both."""
    if ins.format != "alu":
        return set()
    muxes = set()
    if ins.op_add != isa.ADD_OPS["nop"].code:
        muxes.update((ins.add_a, ins.add_b))
    if ins.op_mul != isa.MUL_OPS["nop"].code:
        muxes.update((ins.mul_a, ins.mul_b))
    return muxes


def _regfile_reads(ins, muxes):
    """Names of the physical regfile locations whose value is used (a register-added branch
    target reads regfile A too)."""
    reads = set()
    if ins.format == "branch":
        if ins.reg:
            reads.add(_regfile_name("a", ins.raddr_a))
        return reads
    if isa.MUX_A in muxes and ins.raddr_a < isa.REGFILE_SIZE:
        reads.add(_regfile_name("a", ins.raddr_a))
    if isa.MUX_B in muxes and ins.sig != isa.SIG_SMALL_IMM and ins.raddr_b < isa.REGFILE_SIZE:
        reads.add(_regfile_name("b", ins.raddr_b))
    return reads


def _rotation(ins):
    """(amount, names of the MUL input muxes) of a MUL-output rotation, or (None, ())."""
    if (ins.format != "alu" or ins.sig != isa.SIG_SMALL_IMM
            or ins.op_mul == isa.MUL_OPS["nop"].code):
        return None, ()
    amount = isa.rotation_of(ins.raddr_b)
    if amount is None:
        return None, ()
    return amount, tuple(isa.MUX_NAMES[m] for m in (ins.mul_a, ins.mul_b))


def _peripheral_accesses(ins, facts):
    accesses = [f"TMU write ({name})" for name in facts.tmu_writes]
    accesses += [f"SFU write ({name})" for name in facts.sfu_writes]
    accesses += [f"TLB write ({w.name})" for w in facts.writes if w.addr in isa.TLB_WRITE]
    if ins.sig in isa.TMU_LOAD_SIGNALS:
        accesses.append(f"TMU read ({facts.signal})")
    if ins.sig in isa.TLB_SIGNALS:
        accesses.append(f"TLB access ({facts.signal})")
    accesses += ["mutex acquire" for side, addr in sorted(facts.raddrs)
                 if _read_name(side, addr) == "mutex_acquire"]
    if ins.format == "load_imm" and ins.ldi_mode == _SEMAPHORE_MODE:
        accesses.append("semaphore")
    return accesses


def _end_slot_accesses(facts):
    """What this instruction does that the last 3 of a program must not do."""
    found = [f"read of {n}" for n in sorted(facts.read_names & (_UNIFORM_READS | _VPM_READS))]
    found += [f"write of {n}" for n in sorted(facts.write_names & VPM_WRITES)]
    reserved = {_regfile_name(side, isa.THREAD_END_RESERVED_REGFILE) for side in "ab"}
    found += [f"read of {n}" for n in sorted(facts.read_names & reserved)]
    found += [f"write of {n}" for n in sorted(facts.write_names & reserved)]
    return found
