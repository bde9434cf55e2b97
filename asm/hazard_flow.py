"""The hazard checker's walk through a program: which instructions can execute in a row.

The walk follows execution rather than neighbours in memory: it models the three branch delay
slots and the two thread-end delay slots, so after the last delay slot of a branch it continues
at the branch target when that target is a constant (a relative branch without a register, or
an absolute one when the code address is given), and at the next instruction too when the
branch is conditional. An unconditional branch whose target depends on a register ends the
walk there; such targets are left to the emulator's dynamic checks. Instructions the walk from
instruction 0 never reaches (code only entered through a register branch) are walked from their
own start with no predecessor.
"""

import collections

from . import isa
from .encoding import branch_target

_UNKNOWN = None     # a branch target the checker cannot compute

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


def walk(instructions, facts, code_address):
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


def windows(graph, length):
    """Distinct index sequences of up to ``length`` instructions that can execute in a row."""
    found = set()

    def extend(path, state):
        if len(path) == length or not graph[state]:
            found.add(tuple(path))
            return
        for nxt in graph[state]:
            extend(path + [nxt.pc], nxt)

    for state in graph:
        extend([state.pc], state)
    return found
