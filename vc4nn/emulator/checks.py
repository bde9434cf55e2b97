"""Dynamic checks: things a program does that run in the emulator but misbehave on a real Pi.

Each rule has a mode: "error" (raise CheckError), "warn" (record the message in
``RunResult.warnings`` and emit a Python warning) or "off". A rule that stops a run must describe
something the hardware punishes (a hang, wrong data, a timeout); where the outcome on a Pi is
uncertain the rule defaults to "warn". Each rule is a ``Rule``: its default mode, what it
catches, and the hardware justification for that default (docs/cycle-model.md renders them).

    EmulatorDevice(checks=Checks(regfile_read_after_write="warn"))
    EmulatorDevice(checks=Checks(default="error"))           # strict: every rule stops
    EmulatorDevice(checks=Checks(default="warn", ldtmu_empty="error"))

The units (QPU core, VPM/DMA, TMU, sync) report through ``Checks.report``. A machine keeps its
own ``copy()`` and empties ``warnings`` at the start of each run.
"""

import functools
import importlib
import warnings
from types import MappingProxyType
from typing import NamedTuple

from ..errors import DeviceError
from .errors import CheckError

MODES = ("error", "warn", "off")


class Rule(NamedTuple):
    default: str        # "error": the hardware punishes it; "warn": the outcome is uncertain
    catches: str
    hardware: str       # what a Pi does, and the source, which justifies the default


# Rules of the QPU core and the machine. The units (vpm_checks.py, tmu.py, sync.py) list their own
# rules in a module-level CHECK_RULES table of the same form.
RULES = MappingProxyType({
    "regfile_read_after_write": Rule(
        "error", "a regfile A/B location read by the instruction right after the one that "
        "wrote it",
        "the read returns the old value: the guide's pipeline rule, enforced by the Mesa and "
        "Linux validators (facts §2)"),
    "r4_read_before_sfu_result": Rule(
        "error", "r4 read fewer than 3 instructions after an SFU write",
        "r4 still holds the previous value (facts §2, guide rule)"),
    "r4_overwritten_during_sfu": Rule(
        "error", "another r4 writer (SFU, ldtmu) between an SFU write and its result",
        "the guide forbids it; the result read is undefined (facts §2)"),
    "uniform_read_after_address_write": Rule(
        "error", "a uniform read within 2 instructions of a uniforms-address write",
        "the read takes a uniform from the old stream (facts §2, guide rule)"),
    "missing_host_interrupt": Rule(
        "warn", "a launch in which no program raised the host interrupt",
        "one interrupt per launch is enough: GPU_FFT, QPULib and py-videocore raise it from "
        "one QPU only and work on a Pi through execute_qpu (facts §5.19). With none, a host "
        "that waits for the interrupt waits until its timeout; a direct launch that polls "
        "SRQCS for the completed-program count does not need one (docs/hardware-choices.md "
        "'Launch paths'), so the outcome depends on the host"),
})
UNIT_MODULES = ("vpm_checks", "tmu", "sync")


@functools.lru_cache(maxsize=None)
def _all_rules():
    rules = dict(RULES)
    for name in UNIT_MODULES:
        rules.update(importlib.import_module(f"{__package__}.{name}").CHECK_RULES)
    return MappingProxyType(rules)


def rules_table_markdown():
    """The rules as a Markdown table (docs/cycle-model.md embeds it)."""
    lines = ["| rule | default | catches | what a Pi does (justification) |", "|---|---|---|---|"]
    for name, rule in sorted(_all_rules().items()):
        lines.append(f"| `{name}` | {rule.default} | {rule.catches} | {rule.hardware} |")
    return "\n".join(lines)


class CheckWarning(UserWarning):
    """Python warning category of dynamic checks in "warn" mode."""


class Checks:
    """Per-rule modes of the dynamic checks, and the warnings of one run."""

    def __init__(self, default=None, **modes):
        """``default``: None keeps each rule's own default mode (Rule.default); a mode string
        sets every rule not named in ``modes``."""
        if default is not None:
            _validate_mode("default", default)
        known = _all_rules()
        unknown = sorted(set(modes) - set(known))
        if unknown:
            raise DeviceError(f"unknown check rule(s) {', '.join(unknown)}; "
                              f"known rules: {', '.join(sorted(known))}")
        for rule, mode in modes.items():
            _validate_mode(rule, mode)
        self.default = default
        self.modes = dict(modes)
        self.warnings = []

    def mode(self, rule):
        mode = self.modes.get(rule, self.default)
        return mode if mode is not None else _all_rules()[rule].default

    def enabled(self, rule):
        return self.mode(rule) != "off"

    def report(self, rule, message, qpu=None, pc=None):
        """Act on a violation of ``rule`` according to its mode."""
        mode = self.mode(rule)
        if mode == "off":
            return
        error = CheckError(rule, message, qpu, pc)
        if mode == "error":
            raise error
        self.warnings.append(str(error))
        warnings.warn(str(error), CheckWarning, stacklevel=2)

    def copy(self):
        """The same modes with an empty warning list (a machine keeps its own copy)."""
        fresh = Checks.__new__(Checks)
        fresh.default, fresh.modes, fresh.warnings = self.default, dict(self.modes), []
        return fresh

    def __repr__(self):
        return f"Checks(default={self.default!r}, {self.modes})"


def _validate_mode(rule, mode):
    if mode not in MODES:
        raise DeviceError(f"check mode for {rule} must be one of {', '.join(MODES)}; got {mode!r}")


def as_checks(value):
    """Checks from a Checks, None (each rule's default), a mode string for every rule, or a
    {rule: mode} dict."""
    if value is None:
        return Checks()
    if isinstance(value, Checks):
        return value
    if isinstance(value, str):
        return Checks(default=value)
    if isinstance(value, dict):
        return Checks(**value)
    raise DeviceError(f"checks must be a Checks, a mode string or a dict; "
                      f"got {type(value).__name__}")
