"""What the Linux side of a Pi says about the GPU, and the exact change that fixes each problem.

Shared by the backend (which refuses to start on a broken setup) and ``doctor`` (which reports).
Everything is read through the OS boundary.
"""

import re
import struct

from .errors import KmsConflictError, NotAPiError, PiPermissionError

VCIO = "/dev/vcio"
DEV_MEM = "/dev/mem"
MODEL = "/proc/device-tree/model"
CPUINFO = "/proc/cpuinfo"
MODULES = "/proc/modules"
# (child bus address, ARM physical address, size) of the peripheral window, big-endian cells;
# what the firmware's libbcm_host reads for bcm_host_get_peripheral_address().
SOC_RANGES = "/proc/device-tree/soc/ranges"
# The firmware stops serving QPU mailbox calls when the device tree hands the V3D to Linux, i.e.
# when this node is present and not disabled (raspberrypi/firmware issue 669).
V3D_NODE = "/proc/device-tree/soc/v3d@7ec00000"
# Raspberry Pi OS Bookworm moved config.txt to /boot/firmware; older releases keep /boot.
CONFIG_PATHS = ("/boot/firmware/config.txt", "/boot/config.txt")

KMS_OVERLAYS = ("vc4-kms-v3d", "vc4-fkms-v3d")
# config.txt sections that only apply to boards with a VideoCore VI or later.
OTHER_GPU_SECTIONS = ("[pi4", "[pi5", "[pi400", "[pi500", "[cm4", "[cm5")
GPU_MEM_KEY = re.compile(r"^gpu_mem(_\d+)?$")
RECOMMENDED_GPU_MEM_MB = 128
MIN_GPU_MEM_MB = 64

EMULATOR_HINT = "use the emulator instead: vc4nn.open_device('emulator') or VC4NN_DEVICE=emulator"


def model(os_):
    text = os_.read_text(MODEL)
    return text.strip("\0\n ") if text else None


def peripheral_base(os_, board):
    """The ARM physical address of the peripherals: the device tree's, else the board's."""
    ranges = os_.read_bytes(SOC_RANGES)
    if ranges is not None and len(ranges) >= 12:
        base = struct.unpack(">I", ranges[4:8])[0]
        if base:
            return base
    return board.peripheral_base


def config_path(os_):
    """The config.txt the firmware reads (the first that exists), or the newest default."""
    for path in CONFIG_PATHS:
        if os_.exists(path):
            return path
    return CONFIG_PATHS[0]


def config_lines(os_):
    """(line number, text) of the config.txt lines that apply to this board, comments dropped."""
    text = os_.read_text(config_path(os_)) or ""
    applies = True
    out = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("["):
            applies = not line.lower().startswith(OTHER_GPU_SECTIONS)
            continue
        if applies:
            out.append((number, line))
    return out


def kms_overlay_lines(os_):
    """config.txt lines loading the KMS or fake-KMS GL driver."""
    found = []
    for number, line in config_lines(os_):
        key, _, value = line.partition("=")
        name = value.split(",", 1)[0].strip()
        if key.strip() == "dtoverlay" and name.startswith(KMS_OVERLAYS):
            found.append((number, line))
    return found


def kms_evidence(os_):
    """Reasons to believe the Linux vc4 driver owns the V3D (empty list: it does not)."""
    reasons = [f"{config_path(os_)} line {n}: {line}" for n, line in kms_overlay_lines(os_)]
    if any(line.split(" ", 1)[0] == "vc4" for line in (os_.read_text(MODULES) or "").splitlines()):
        reasons.append(f"the vc4 kernel module is loaded ({MODULES})")
    if os_.exists(V3D_NODE):
        status = (os_.read_text(V3D_NODE + "/status") or "okay").strip("\0\n ")
        if status != "disabled":
            reasons.append(f"the device tree gives the V3D to Linux ({V3D_NODE}/status = {status})")
    return reasons


def kms_fix(os_):
    path = config_path(os_)
    lines = kms_overlay_lines(os_)
    if lines:
        edits = "; ".join(f"line {n} '{line}' -> '#{line}'" for n, line in lines)
        return f"edit {path}: comment out {edits}; then reboot (sudo reboot)"
    return (f"remove every 'dtoverlay=vc4-kms-v3d' / 'dtoverlay=vc4-fkms-v3d' from {path} "
            f"(and any file it includes); then reboot (sudo reboot)")


def gpu_mem_fix(os_):
    return (f"give the GPU more memory: put 'gpu_mem={RECOMMENDED_GPU_MEM_MB}' in {config_path(os_)} "
            f"(under [all]), then reboot (sudo reboot)")


def configured_gpu_mem(os_):
    """config.txt's gpu_mem settings as (line number, text)."""
    return [(n, line) for n, line in config_lines(os_)
            if GPU_MEM_KEY.match(line.partition("=")[0].strip())]


def permission_fix(os_, path):
    if path == DEV_MEM:
        return ("run as root (sudo): mapping GPU memory through /dev/mem needs root (CAP_SYS_RAWIO); "
                "group membership is not enough")
    info = os_.stat(path)
    if info is not None and info.mode & 0o060 == 0o060 and info.group != "root":
        user = os_.user_name()
        return (f"add {user} to group '{info.group}': sudo usermod -aG {info.group} {user}; "
                f"then log out and back in")
    return "run as root (sudo)"


def require_vcio(os_):
    if not os_.exists(VCIO):
        seen = model(os_)
        raise NotAPiError(
            f"no {VCIO}: this machine is not a Raspberry Pi "
            f"({'it says: ' + seen if seen else 'it has no device-tree model'}), "
            f"or its firmware mailbox driver (vcio) is missing",
            fix=f"run on a Raspberry Pi Zero, 1, 2 or 3 with Raspberry Pi OS; or {EMULATOR_HINT}")


def require_no_kms(os_):
    reasons = kms_evidence(os_)
    if reasons:
        raise KmsConflictError(
            "the Linux KMS/fKMS GL driver owns the V3D, so the firmware refuses QPU mailbox calls: "
            + "; ".join(reasons), fix=kms_fix(os_))


def open_device_file(os_, path, purpose, sync=False):
    """Open a device file read/write, turning a refusal into a PiPermissionError with its fix."""
    try:
        return os_.open(path, write=True, sync=sync)
    except PermissionError:
        info = os_.stat(path)
        shown = f" ({info.permissions} {info.owner}:{info.group})" if info else ""
        raise PiPermissionError(f"permission denied opening {path}{shown} as {os_.user_name()}: "
                                f"needed to {purpose}", fix=permission_fix(os_, path)) from None
