"""``vc4nn doctor``: is this Pi ready to run QPU programs, and if not, exactly what to change.

Reports the board, firmware, V3D clock and gpu_mem, whether the KMS/fKMS GL driver holds the
V3D, the permissions of /dev/vcio and /dev/mem, and whether direct V3D launches
(PiDevice(launch="direct")) work. Every problem comes with its fix.
"""

import argparse
import dataclasses
import datetime
import sys

from . import system
from .board import decode_revision, parse_cpuinfo_revision
from .errors import PiError
from .mailbox import CLOCK_V3D, Mailbox
from .os_boundary import OsBoundary

MIB = 1 << 20
UPDATE_FIX = "update the firmware and kernel: sudo apt update && sudo apt full-upgrade"


@dataclasses.dataclass
class Finding:
    topic: str
    text: str
    problem: bool = False
    fix: str = None
    known: bool = True

    @property
    def label(self):
        return "PROBLEM" if self.problem else "ok" if self.known else "?"


def diagnose(os_):
    """Findings, in the order a user should read (and fix) them."""
    if not os_.exists(system.VCIO):
        seen = system.model(os_)
        return [Finding("board", f"not a Raspberry Pi ({seen or 'no device-tree model'}): "
                                 f"no {system.VCIO}", True,
                        f"run on a Raspberry Pi Zero, 1, 2 or 3; or {system.EMULATOR_HINT}")]
    findings = []
    vcio = _device_file(os_, system.VCIO, findings)
    firmware = _ask_firmware(os_, findings) if vcio else None
    revision = (firmware["revision"] if firmware
                else parse_cpuinfo_revision(os_.read_text(system.CPUINFO)))
    findings.insert(0, _board(os_, revision))
    _device_file(os_, system.DEV_MEM, findings)
    findings.append(_gl_driver(os_))
    findings.extend(_firmware_facts(os_, firmware))
    findings.append(_direct_launch(os_, findings))
    return findings


def _direct_launch(os_, findings):
    """Whether launch="direct" works, by opening a device that way. Not a problem when it does
    not: launch="mailbox" (the default) does not need it."""
    if any(f.problem for f in findings):
        return Finding("direct", "unknown until the problems above are fixed", known=False)
    from .backend import PiDevice
    try:
        with PiDevice(os_, launch="direct") as device:
            address = device._direct.address
    except PiError as e:
        return Finding("direct", f"launch='direct' is not available: {e.message}; "
                                 f"launch='mailbox' (the default) works", fix=e.fix)
    return Finding("direct", f"launch='direct' is available (V3D registers at {address:#010x})")


def _board(os_, revision):
    if revision is None:
        return Finding("board", f"{system.model(os_) or 'unknown'}: no revision code found "
                                f"(neither the mailbox nor {system.CPUINFO})", True,
                       "check that this is Raspberry Pi OS on a Pi Zero, 1, 2 or 3")
    board = decode_revision(revision)
    if not board.videocore_iv:
        return Finding("board", f"{board.describe()}: no VideoCore IV", True,
                       f"run on a Pi Zero, 1, 2 or 3; or {system.EMULATOR_HINT}")
    return Finding("board", board.describe())


def _device_file(os_, path, findings):
    """Report whether this user can open a device file read/write; True if it can."""
    info = os_.stat(path)
    shown = f"{info.permissions} {info.owner}:{info.group}" if info else "missing"
    usable = info is not None and os_.can_open(path, write=True)
    if path == system.DEV_MEM:
        usable = usable and os_.is_root()      # /dev/mem also needs CAP_SYS_RAWIO
    user = os_.user_name()
    if usable:
        findings.append(Finding(path, f"{shown}: {user} can open it read/write"))
    else:
        findings.append(Finding(path, f"{shown}: {user} cannot open it read/write", True,
                                system.permission_fix(os_, path)))
    return usable


def _ask_firmware(os_, findings):
    fd = None
    try:
        fd = system.open_device_file(os_, system.VCIO, "talk to the firmware mailbox")
        mailbox = Mailbox(os_, fd)
        return {"revision": mailbox.call("get_board_revision")[0],
                "firmware": mailbox.call("get_firmware_revision")[0],
                "clock_hz": mailbox.call("get_clock_rate", CLOCK_V3D)[1],
                "gpu_mem": mailbox.call("get_vc_memory")[1]}
    except PiError as e:
        findings.append(Finding("mailbox", str(e.message), True, e.fix or UPDATE_FIX))
        return None
    finally:
        if fd is not None:
            os_.close(fd)


def _gl_driver(os_):
    reasons = system.kms_evidence(os_)
    if reasons:
        return Finding("GL driver", "the KMS/fKMS driver owns the V3D and blocks the mailbox: "
                       + "; ".join(reasons), True, system.kms_fix(os_))
    return Finding("GL driver", "no KMS/fKMS overlay: the firmware serves QPU mailbox calls")


def _firmware_facts(os_, firmware):
    if firmware is None:
        configured = ", ".join(line for _, line in system.configured_gpu_mem(os_)) or "not set"
        return [Finding("firmware", "unknown (needs the mailbox)", known=False),
                Finding("gpu_mem", f"{system.config_path(os_)}: {configured}", known=False)]
    built = datetime.datetime.fromtimestamp(firmware["firmware"], datetime.timezone.utc)
    gpu_mem_mb = firmware["gpu_mem"] // MIB
    facts = [Finding("firmware", f"{built:%Y-%m-%d} (revision {firmware['firmware']:#x})"),
             Finding("V3D clock", f"{firmware['clock_hz'] / 1e6:g} MHz")]
    if gpu_mem_mb < system.MIN_GPU_MEM_MB:
        facts.append(Finding("gpu_mem", f"{gpu_mem_mb} MiB: too little for QPU buffers "
                                        f"(at least {system.MIN_GPU_MEM_MB} MiB)", True,
                             system.gpu_mem_fix(os_)))
    else:
        facts.append(Finding("gpu_mem", f"{gpu_mem_mb} MiB"))
    return facts


def render(findings):
    lines = ["vc4nn doctor: Raspberry Pi backend"]
    for f in findings:
        lines.append(f"  {f.label:<8}{f.topic:<10} {f.text}")
        if f.fix:
            lines.append(f"  {'':<8}{'':<10} fix: {f.fix}")
    problems = sum(f.problem for f in findings)
    lines.append(f"{problems} problem(s) found; fix them in the order shown." if problems
                 else "No problems found: PiDevice() should open.")
    return "\n".join(lines)


def doctor_main(argv=None, os_boundary=None, out=None):
    """Print the report; exit code 0 when the Pi is ready, 1 when something needs fixing."""
    parser = argparse.ArgumentParser(prog="vc4nn doctor", description=__doc__.splitlines()[0].replace("``", ""))
    parser.parse_args(argv)
    findings = diagnose(os_boundary if os_boundary is not None else OsBoundary())
    print(render(findings), file=out if out is not None else sys.stdout)
    print(emulator_core_line(), file=out if out is not None else sys.stdout)
    return 1 if any(f.problem for f in findings) else 0


def emulator_core_line():
    """Which emulator core open_device() gets (not a Pi problem: the exit code ignores it)."""
    from ..emulator import ccore
    if ccore.available():
        return "vc4nn doctor: emulator core: C (compiled, the fast one)"
    return (f"vc4nn doctor: emulator core: pure Python (the C core is not built, about 100x "
            f"slower); {ccore.BUILD_HINT}")
