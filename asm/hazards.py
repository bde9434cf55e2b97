"""Static checker for the QPU pipeline rules (fact sheet section 2).

The checker follows execution through the program rather than only looking at neighbours in
memory: it models the three branch delay slots and the two thread-end delay slots, so after the
last delay slot of a branch it continues at the branch target when that target is a constant
(a relative branch without a register, or an absolute one when the code address is given),
and at the next instruction too when the branch is conditional. An unconditional branch whose
target depends on a register ends the static walk there; such targets are left to the
emulator's dynamic checks. Instructions the walk from instruction 0 never reaches (code only
entered through a register branch) are walked from their own start with no predecessor.

Every rule sees a *window*: an instruction followed by the (up to three) instructions that can
execute right after it. Rules name the earlier instruction of a window as the origin and the
later one as the offender. A rule can be waived on either instruction (``program.waivers``).

Flags are unknown statically, so a write counts unless its condition is ``never``.

Left to the emulator's dynamic checks: register-added branch targets; accumulators and flags
being undefined after a thread switch (needs data flow); ldtmu with no TMU request outstanding,
more than two queued VPM read setups, a second DMA load or store while one is in flight (these
depend on loop trip counts and data).

API: ``check(program)`` raises the first HazardError; ``violations(program)`` lists them all;
``RULES`` maps rule names to one-line descriptions. A waiver naming no rule of ``RULES`` is a
HazardError with rule ``"waiver"``. The choices where sources disagree are in
docs/hardware-choices.md, "Hazard checker".
"""

import collections
import functools

from . import isa
from .encoding import branch_target
from .errors import HazardError

RULES = {
    "regfile_raw": "a physical regfile A/B location read by the instruction right after the "
                   "one that wrote it",
    "sfu_r4_read": "r4 read in the 2 instructions after an SFU write (readable from the 3rd)",
    "sfu_r4_overlap": "another r4 writer (SFU write, ldtmu, TLB colour/alpha load) in the 2 "
                      "instructions after an SFU write",
    "branch_delay_slot": "a branch in the 3 delay slots of another branch",
    "thread_switch_slot": "a thread switch or thread end signal in the 2 delay slots of a "
                          "thread switch",
    "thrend_regfile_write": "the thread end instruction writes regfile A or B",
    "thrend_slots_access": "thrend or its 2 delay slots read uniforms or varyings, touch "
                           "VPM/VDR/VDW, or access regfile A/B address 14",
    "program_end": "execution can run past the end of the program (it must end with thrend "
                   "and its 2 delay slots)",
    "unif_addr": "uniforms read in the 2 instructions after a write to unif_addr or "
                 "unif_addr_rel",
    "tmu_noswap": "a TMU write in the 3 instructions after a write to tmu_noswap",
    "rotate_acc": "a MUL rotation right after a write to an accumulator it rotates",
    "rotate_r5": "a rotation by r5 right after a write to r5",
    "rotate_source": "a MUL rotation with an input other than r0-r3 (hardware rotates it only "
                     "within each quad)",
    "one_peripheral": "more than one TMU write, TMU read, TLB access, SFU write, mutex acquire "
                      "or semaphore in one instruction",
    "same_destination": "both ALUs write the same register without exactly opposite conditions",
}

# Names from the isa register maps (matched by name so no address is written twice).
_ACCUMULATORS = frozenset(isa.WRITE_A[addr] for addr in isa.ACCUMULATOR_WRITE)   # r0-r3
_VPM_READS = frozenset({"vpm", "vr_busy", "vw_busy", "vr_wait", "vw_wait"})
_VPM_WRITES = frozenset({"vpm", "vr_setup", "vw_setup", "vr_addr", "vw_addr"})
_UNIFORM_READS = frozenset({"uniform", "varying"})
_OPPOSITE_CONDITIONS = frozenset({frozenset({"zs", "zc"}), frozenset({"ns", "nc"}),
                                  frozenset({"cs", "cc"})})

_NEVER = isa.CONDITIONS["never"]
_ALWAYS = isa.CONDITIONS["always"]
_SEMAPHORE_MODE = isa.LOAD_IMM_MODES["semaphore"]
_UNKNOWN = None     # a branch target the checker cannot compute

_WINDOW = max(isa.SFU_RESULT_LATENCY, isa.UNIF_ADDR_LATENCY, isa.TMU_NOSWAP_LATENCY,
              isa.BRANCH_MIN_DISTANCE, isa.THREAD_SWITCH_DELAY_SLOTS + 1,
              isa.THREAD_END_DELAY_SLOTS + 1)


def _regfile_name(side, addr):
    return f"r{side}{addr}"


def _read_name(side, addr):
    """What a read address reads; addresses with no meaning on that side keep their number."""
    if addr < isa.REGFILE_SIZE:
        return _regfile_name(side, addr)
    return isa.READ[side].get(addr, _regfile_name(side, addr))


_Write = collections.namedtuple("_Write", "addr cond name")


class _Facts:
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
        self.acc_writes = self.write_names & _ACCUMULATORS
        self.r5_write = any(w.addr == isa.R5_WRITE for w in self.writes)
        self.unif_addr_write = any(w.addr == isa.UNIF_ADDR_WRITE for w in self.writes)
        self.noswap_write = any(w.addr == isa.TMU_NOSWAP_ADDR for w in self.writes)
        self.rotation, self.rotated = _rotation(ins)
        self.peripherals = _peripheral_accesses(ins, self)
        self.end_slot_accesses = _end_slot_accesses(self)


# Unrolled kernels repeat the same few instruction words many times.
_facts_of = functools.lru_cache(maxsize=4096)(_Facts)


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
    found += [f"write of {n}" for n in sorted(facts.write_names & _VPM_WRITES)]
    reserved = {_regfile_name(side, isa.THREAD_END_RESERVED_REGFILE) for side in "ab"}
    found += [f"read of {n}" for n in sorted(facts.read_names & reserved)]
    found += [f"write of {n}" for n in sorted(facts.write_names & reserved)]
    return found


# ---------------------------------------------------------------------------------------------
# Control flow: states of the walk and the windows they produce.
# ---------------------------------------------------------------------------------------------

# pc: index of the instruction about to execute; branches: (slots left, target, branch index)
# of taken branches still in their delay slots; ending: thread-end delay slots left, or None.
_State = collections.namedtuple("_State", "pc branches ending")


def _branch_target(index, ins, code_address):
    """Instruction index a branch goes to, _UNKNOWN if it depends on a register or on where the
    code is loaded. The index may lie outside the program (that is reported as leaving it)."""
    if ins.reg:
        return _UNKNOWN
    if ins.rel:
        target = branch_target(ins, index * isa.INSTRUCTION_BYTES)
    elif code_address is None:
        return _UNKNOWN
    else:
        target = ins.immediate - code_address
    if target % isa.INSTRUCTION_BYTES:
        return _UNKNOWN
    return target // isa.INSTRUCTION_BYTES


def _successors(state, instructions, facts, code_address):
    """(next states, exits): an exit is (last index, branch index or None) when execution
    leaves the program."""
    here = facts[state.pc]
    if state.ending is not None:
        if state.ending == 1:
            return [], []               # the thread's last delay slot has executed
        ending = state.ending - 1
    else:
        ending = isa.THREAD_END_DELAY_SLOTS if here.thread_end else None
    redirect, pending = None, []
    for left, target, branch in state.branches:
        if left == 1:
            redirect = (target, branch)
        else:
            pending.append((left - 1, target, branch))
    options = [tuple(pending)]
    if here.is_branch:
        ins = instructions[state.pc]
        taken = (isa.BRANCH_DELAY_SLOTS, _branch_target(state.pc, ins, code_address), state.pc)
        options = [tuple(pending) + (taken,)]
        if ins.cond_br != isa.BRANCH_CONDITIONS["always"]:
            options.append(tuple(pending))
    if redirect is None:
        next_pc, via = state.pc + 1, None
    else:
        next_pc, via = redirect
        if next_pc is _UNKNOWN:
            return [], []
    if not 0 <= next_pc < len(instructions):
        return [], [(state.pc, via)]
    return [_State(next_pc, branches, ending) for branches in options], []


def _walk(instructions, facts, code_address):
    """All reachable states with their successors, and the exits from the program."""
    graph, exits, reached = {}, set(), set()
    for entry in range(len(instructions)):
        if entry in reached:
            continue
        todo = [_State(entry, (), None)]
        while todo:
            state = todo.pop()
            if state in graph:
                continue
            nexts, leaving = _successors(state, instructions, facts, code_address)
            graph[state] = nexts
            reached.add(state.pc)
            exits.update(leaving)
            todo.extend(nexts)
    return graph, exits


def _windows(graph):
    """Distinct index sequences of up to _WINDOW instructions that can execute in a row."""
    windows = set()

    def extend(path, state):
        if len(path) == _WINDOW or not graph[state]:
            windows.add(tuple(path))
            return
        for nxt in graph[state]:
            extend(path + [nxt.pc], nxt)

    for state in graph:
        extend([state.pc], state)
    return windows


# ---------------------------------------------------------------------------------------------
# Rules. Window rules yield (rule, offset of the offender in the window, what); the origin is
# the window's first instruction. Single-instruction rules yield (rule, what).
# ---------------------------------------------------------------------------------------------


def _after(window, latency):
    """(offset, facts) of the instructions that come too soon after window[0]."""
    return list(enumerate(window[1:latency], start=1))


def _window_rules(w):
    first = w[0]
    if len(w) > 1:
        second = w[1]
        for name in sorted(first.regfile_writes & second.regfile_reads):
            yield "regfile_raw", 1, f"read of {name} in the instruction after its write"
        if second.rotation is not None:
            for name in sorted(first.acc_writes & set(second.rotated)):
                yield "rotate_acc", 1, f"rotation of {name} in the instruction after its write"
            if second.rotation == "r5" and first.r5_write:
                yield "rotate_r5", 1, "rotation by r5 in the instruction after an r5 write"
    if first.sfu_writes:
        for k, later in _after(w, isa.SFU_RESULT_LATENCY):
            if later.reads_r4:
                yield "sfu_r4_read", k, f"r4 read {k} instruction(s) after an SFU write"
            for writer in later.r4_writers:
                yield "sfu_r4_overlap", k, f"{writer} writes r4 while an SFU result is pending"
    if first.is_branch:
        for k, later in _after(w, isa.BRANCH_MIN_DISTANCE):
            if later.is_branch:
                yield "branch_delay_slot", k, f"branch in delay slot {k} of another branch"
    if first.thread_switch:
        for k, later in _after(w, isa.THREAD_SWITCH_DELAY_SLOTS + 1):
            if later.thread_switch or later.thread_end:
                yield ("thread_switch_slot", k,
                       f"{later.signal} signal in delay slot {k} of a thread switch")
    if first.thread_end:
        for k, later in enumerate(w[:isa.THREAD_END_DELAY_SLOTS + 1]):
            for access in later.end_slot_accesses:
                yield "thrend_slots_access", k, f"{access} in a program's last 3 instructions"
    if first.unif_addr_write:
        for k, later in _after(w, isa.UNIF_ADDR_LATENCY):
            if "uniform" in later.read_names:
                yield ("unif_addr", k,
                       f"uniform read {k} instruction(s) after a uniforms address write")
    if first.noswap_write:
        for k, later in _after(w, isa.TMU_NOSWAP_LATENCY):
            for name in later.tmu_writes:
                yield "tmu_noswap", k, f"write of {name} {k} instruction(s) after tmu_noswap"


def _instruction_rules(f):
    if f.thread_end:
        for name in sorted(f.regfile_writes):
            yield "thrend_regfile_write", f"thread end instruction writes {name}"
    # Fact sheet 5.12: only r0-r3 rotate across all 16 elements; the errata measured other
    # sources rotating within each quad. We reject those (waivable) because the DSL promises
    # np.roll semantics and a quad rotation would silently compute something else. Mux B of a
    # rotating instruction gives the same small immediate in every element, so it is exempt.
    if f.rotation is not None:
        for name in sorted(set(f.rotated) - _ACCUMULATORS - {isa.MUX_NAMES[isa.MUX_B]}):
            yield "rotate_source", f"rotation of {name} (only r0-r3 rotate across 16 elements)"
    if len(f.peripherals) > 1:
        yield ("one_peripheral",
               f"{len(f.peripherals)} peripheral accesses in one instruction: "
               f"{', '.join(f.peripherals)}")
    if len(f.writes) == 2 and _same_destination(*f.writes):
        add, mul = f.writes
        yield ("same_destination",
               f"both ALUs write {_destination(add)} (conditions {isa.CONDITION_NAMES[add.cond]}"
               f"/{isa.CONDITION_NAMES[mul.cond]})")


def _destination(write):
    """The register a write lands in: r5 and the uniforms address are one register written
    two ways; other addresses mean the same register on both sides only if the name matches."""
    if write.addr == isa.R5_WRITE:
        return "r5"
    if write.addr == isa.UNIF_ADDR_WRITE:
        return "unif_addr"
    return write.name


def _same_destination(add, mul):
    if _destination(add) != _destination(mul):
        return False
    # A conditional write to a TMU or VPM register still fires the peripheral (fact sheet
    # 5.7), so opposite conditions only make the two writes exclusive for other registers.
    if add.addr in isa.TMU_WRITE or add.name in _VPM_WRITES:
        return True
    pair = frozenset({isa.CONDITION_NAMES[add.cond], isa.CONDITION_NAMES[mul.cond]})
    return pair not in _OPPOSITE_CONDITIONS


# ---------------------------------------------------------------------------------------------
# Public API.
# ---------------------------------------------------------------------------------------------


class Violation:
    """One broken rule: the offending instruction and, for two-instruction rules, the earlier
    instruction it conflicts with (index, PC in bytes from the program start, source line)."""

    __slots__ = ("rule", "what", "index", "other_index", "location", "other_location")

    def __init__(self, rule, what, index, other_index, location, other_location):
        self.rule, self.what = rule, what
        self.index, self.other_index = index, other_index
        self.location, self.other_location = location, other_location

    @property
    def pc(self):
        return None if self.index is None else self.index * isa.INSTRUCTION_BYTES

    @property
    def other_pc(self):
        return None if self.other_index is None else self.other_index * isa.INSTRUCTION_BYTES

    @property
    def message(self):
        text = self.what
        if self.index is not None:
            text += f" at {_place(self.location, self.pc)}"
        if self.other_index is not None:
            text += f" conflicts with {_place(self.other_location, self.other_pc)}"
        return text

    def error(self):
        pcs = tuple(pc for pc in (self.pc, self.other_pc) if pc is not None)
        return HazardError(self.rule, self.message, self.location, self.other_location, pcs)

    def __repr__(self):
        return f"Violation([{self.rule}] {self.message})"


def _place(location, pc):
    return f"{location} (PC {pc:#x})" if location is not None else f"PC {pc:#x}"


def _entry(table, index):
    return table[index] if table is not None and index < len(table) else None


def _waivers(program):
    """Per instruction, the set of rule names it waives; unknown names are an error."""
    table = getattr(program, "waivers", None) or []
    waivers = []
    for index in range(len(program.instructions)):
        names = _entry(table, index) or ()
        names = {names} if isinstance(names, str) else set(names)
        unknown = sorted(names - set(RULES))
        if unknown:
            location = _entry(getattr(program, "source_map", None), index)
            raise HazardError("waiver", f"unknown hazard rule {', '.join(map(repr, unknown))} "
                              f"waived at {_place(location, index * isa.INSTRUCTION_BYTES)}; "
                              f"known rules: {', '.join(RULES)}", location,
                              pcs=(index * isa.INSTRUCTION_BYTES,))
        waivers.append(names)
    return waivers


def violations(program, code_address=None):
    """Every rule broken by ``program`` and not waived, in program order.

    ``program`` needs ``instructions`` (encoding.Instruction per slot) and may have
    ``source_map`` and ``waivers``. ``code_address`` (the bus address the code is loaded at)
    lets absolute branch targets be followed.
    """
    instructions = list(program.instructions)
    waivers = _waivers(program)
    source_map = getattr(program, "source_map", None)
    if not instructions:
        return [Violation("program_end", "empty program (it must end with thrend and its "
                          "2 delay slots)", None, None, None, None)]
    facts = [_facts_of(ins) for ins in instructions]
    found = set()
    for index, f in enumerate(facts):
        found.update((rule, index, None, what) for rule, what in _instruction_rules(f))
    graph, exits = _walk(instructions, facts, code_address)
    for window in _windows(graph):
        for rule, k, what in _window_rules([facts[i] for i in window]):
            found.add((rule, window[k], window[0] if k else None, what))
    for last, branch in exits:
        what = ("branch target outside the program" if branch is not None else
                "execution runs past the end of the program without thrend and its 2 delay slots")
        found.add(("program_end", last, branch, what))
    result = []
    for rule, index, other, what in sorted(found, key=_order):
        if rule in waivers[index] or (other is not None and rule in waivers[other]):
            continue
        result.append(Violation(rule, what, index, other, _entry(source_map, index),
                                _entry(source_map, other) if other is not None else None))
    return result


def _order(item):
    rule, index, other, what = item
    return index, -1 if other is None else other, list(RULES).index(rule), what


def check(program, code_address=None):
    """Raise HazardError for the first violation of ``program`` (see ``violations``)."""
    found = violations(program, code_address)
    if found:
        raise found[0].error()
