"""Dynamic checks: things a program does that run in the emulator but misbehave on a real Pi.

Each rule has a mode: "error" (raise CheckError), "warn" (record the message in
``RunResult.warnings`` and emit a Python warning) or "off". Every rule defaults to "error".

    EmulatorDevice(checks=Checks(regfile_read_after_write="warn"))
    EmulatorDevice(checks=Checks(default="warn", ldtmu_empty="error"))

The units (QPU core, VPM/DMA, TMU, sync) report through ``Checks.report``. A machine keeps its
own ``copy()`` and empties ``warnings`` at the start of each run.
"""

import importlib
import warnings
from types import MappingProxyType

from ..errors import DeviceError
from .errors import CheckError

MODES = ("error", "warn", "off")

# Rules of the QPU core and the machine: rule -> what it catches. The units (vpm.py, tmu.py,
# sync.py) list their own rules in a module-level CHECK_RULES table of the same form.
RULES = MappingProxyType({
    "regfile_read_after_write":
        "a regfile A/B location read by the instruction right after the one that wrote it "
        "(facts §2)",
    "r4_read_before_sfu_result":
        "r4 read fewer than 3 instructions after an SFU write (facts §2)",
    "r4_overwritten_during_sfu":
        "another r4 writer (SFU, ldtmu) between an SFU write and its result (facts §2)",
    "uniform_read_after_address_write":
        "a uniform read within 2 instructions of a uniforms-address write (facts §2)",
    "missing_host_interrupt":
        "the programs ended with fewer host interrupts than QPUs launched; execute_qpu would "
        "wait for the missing ones until it times out (facts §3)",
})
UNIT_MODULES = ("vpm", "tmu", "sync")


def known_rules():
    """Every rule name, or None when a unit does not list its rules (then any name is taken)."""
    rules = dict(RULES)
    for name in UNIT_MODULES:
        module = importlib.import_module(f"{__package__}.{name}")
        table = getattr(module, "CHECK_RULES", None)
        if table is None:
            return None
        rules.update(table)
    return rules


class CheckWarning(UserWarning):
    """Python warning category of dynamic checks in "warn" mode."""


class Checks:
    """Per-rule modes of the dynamic checks, and the warnings of one run."""

    def __init__(self, default="error", **modes):
        _validate_mode("default", default)
        known = known_rules()
        unknown = sorted(set(modes) - set(known)) if known is not None else []
        if unknown:
            raise DeviceError(f"unknown check rule(s) {', '.join(unknown)}; "
                              f"known rules: {', '.join(sorted(known))}")
        for rule, mode in modes.items():
            _validate_mode(rule, mode)
        self.default = default
        self.modes = dict(modes)
        self.warnings = []

    def mode(self, rule):
        return self.modes.get(rule, self.default)

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
    """Checks from a Checks, None (all "error"), a mode string, or a {rule: mode} dict."""
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
