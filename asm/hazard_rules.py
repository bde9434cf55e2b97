"""The hazard checker's rules (fact sheet section 2; docs/hardware-choices.md "Hazard checker").

Window rules see an instruction followed by the (up to WINDOW - 1) instructions that can
execute right after it (asm/hazard_flow.py) and yield (rule, offset of the offender in the
window, what); the origin is the window's first instruction. Instruction rules see one
instruction and yield (rule, what). Both see instructions as asm/hazard_facts.py describes them.
"""

from . import isa
from .hazard_facts import ACCUMULATORS, VPM_WRITES

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

_OPPOSITE_CONDITIONS = frozenset({frozenset({"zs", "zc"}), frozenset({"ns", "nc"}),
                                  frozenset({"cs", "cc"})})

# Instructions a window rule looks at: the origin and the latest instruction a rule reaches.
WINDOW = max(isa.SFU_RESULT_LATENCY, isa.UNIF_ADDR_LATENCY, isa.TMU_NOSWAP_LATENCY,
             isa.BRANCH_MIN_DISTANCE, isa.THREAD_SWITCH_DELAY_SLOTS + 1,
             isa.THREAD_END_DELAY_SLOTS + 1)


def _after(window, latency):
    """(offset, facts) of the instructions that come too soon after window[0]."""
    return list(enumerate(window[1:latency], start=1))


def window_rules(w):
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


def instruction_rules(f):
    if f.thread_end:
        for name in sorted(f.regfile_writes):
            yield "thrend_regfile_write", f"thread end instruction writes {name}"
    # Fact sheet 5.12: only r0-r3 rotate across all 16 elements; the errata measured other
    # sources rotating within each quad. We reject those (waivable) because the DSL promises
    # np.roll semantics and a quad rotation would silently compute something else. Mux B of a
    # rotating instruction gives the same small immediate in every element, so it is exempt.
    if f.rotation is not None:
        for name in sorted(set(f.rotated) - ACCUMULATORS - {isa.MUX_NAMES[isa.MUX_B]}):
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
    if add.addr in isa.TMU_WRITE or add.name in VPM_WRITES:
        return True
    pair = frozenset({isa.CONDITION_NAMES[add.cond], isa.CONDITION_NAMES[mul.cond]})
    return pair not in _OPPOSITE_CONDITIONS
