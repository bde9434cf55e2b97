"""Static checker for the QPU pipeline rules (fact sheet section 2).

The checker follows execution through the program rather than only looking at neighbours in
memory, through the branch and thread-end delay slots to constant branch targets
(asm/hazard_flow.py); a target that depends on a register ends the static walk there.

Every rule sees a *window*: an instruction followed by the (up to three) instructions that can
execute right after it. Rules name the earlier instruction of a window as the origin and the
later one as the offender. A rule can be waived on either instruction (``program.waivers``).

Left to the emulator's dynamic checks: register-added branch targets; accumulators and flags
being undefined after a thread switch (needs data flow); ldtmu with no TMU request outstanding,
more than two queued VPM read setups, a second DMA load or store while one is in flight (these
depend on loop trip counts and data).

API: ``check(program)`` raises the first HazardError; ``violations(program)`` lists them all;
``RULES`` maps rule names to one-line descriptions. A waiver naming no rule of ``RULES`` is a
HazardError with rule ``"waiver"``. The choices where sources disagree are in
docs/hardware-choices.md, "Hazard checker".

Parts: what an instruction reads, writes and signals (hazard_facts.py), the walk through the
program (hazard_flow.py), the rules (hazard_rules.py); this module runs them and reports.
"""

from . import isa
from .errors import HazardError
from .hazard_facts import facts_of
from .hazard_flow import walk, windows
from .hazard_rules import RULES, WINDOW, instruction_rules, window_rules


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
    facts = [facts_of(ins) for ins in instructions]
    found = set()
    for index, f in enumerate(facts):
        found.update((rule, index, None, what) for rule, what in instruction_rules(f))
    graph, exits = walk(instructions, facts, code_address)
    for window in windows(graph, WINDOW):
        for rule, k, what in window_rules([facts[i] for i in window]):
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
