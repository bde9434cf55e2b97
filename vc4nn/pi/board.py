"""Which Raspberry Pi this is, from its revision code, and what that means for GPU memory.

Revision codes (raspberrypi/documentation, "revision codes"): old-style codes 0x0002-0x0015 are
all BCM2835 boards; new-style codes have bit 23 set and the fields
NOQuuuWuFMMMCCCCPPPPTTTTTTTTRRRR (memory MMM = 256 MB << n, processor PPPP, type TTTTTTTT).
"""

import dataclasses
from types import MappingProxyType

from .. import hardware

NEW_STYLE_BIT = 1 << 23

PROCESSORS = MappingProxyType({0: "BCM2835", 1: "BCM2836", 2: "BCM2837", 3: "BCM2711", 4: "BCM2712"})
VIDEOCORE_IV = frozenset({"BCM2835", "BCM2836", "BCM2837"})

NEW_STYLE_TYPES = MappingProxyType({
    0x00: "A", 0x01: "B", 0x02: "A+", 0x03: "B+", 0x04: "2 Model B", 0x06: "Compute Module 1",
    0x08: "3 Model B", 0x09: "Zero", 0x0A: "Compute Module 3", 0x0C: "Zero W",
    0x0D: "3 Model B+", 0x0E: "3 Model A+", 0x10: "Compute Module 3+", 0x11: "4 Model B",
    0x12: "Zero 2 W", 0x13: "400", 0x14: "Compute Module 4", 0x15: "Compute Module 4S",
    0x17: "5", 0x18: "Compute Module 5", 0x19: "500",
})
OLD_STYLE_TYPES = MappingProxyType({
    0x02: "B", 0x03: "B", 0x04: "B", 0x05: "B", 0x06: "B", 0x07: "A", 0x08: "A", 0x09: "A",
    0x0D: "B", 0x0E: "B", 0x0F: "B", 0x10: "B+", 0x11: "Compute Module 1", 0x12: "A+",
    0x13: "B+", 0x14: "Compute Module 1", 0x15: "A+",
})

# Which bus alias GPU memory should use, per SoC (the mem_alloc flags that choose it): written
# once in vc4nn.hardware, which the emulator's boards share.
MEM_FLAGS_BY_PROCESSOR = MappingProxyType(hardware.MEM_FLAGS_BY_PROCESSOR)
# Where the ARM sees the peripherals (bus 0x7E000000), per SoC: BCM2835 peripheral datasheet
# section 1.2.3 (0x20000000); BCM2836/7 moved them to 0x3F000000 (raspberrypi/documentation,
# "Peripheral addresses"). The device tree's /soc/ranges says the same on a running Pi and
# is preferred when present (vc4nn.pi.system.peripheral_base).
PERIPHERAL_BASE_BY_PROCESSOR = MappingProxyType({
    "BCM2835": 0x20000000, "BCM2836": 0x3F000000, "BCM2837": 0x3F000000})


@dataclasses.dataclass(frozen=True)
class Board:
    revision: int
    model: str
    processor: str
    memory_mb: int = None

    @property
    def name(self):
        return f"Raspberry Pi {self.model}"

    @property
    def videocore_iv(self):
        return self.processor in VIDEOCORE_IV

    @property
    def mem_flags(self):
        return MEM_FLAGS_BY_PROCESSOR[self.processor]

    @property
    def peripheral_base(self):
        return PERIPHERAL_BASE_BY_PROCESSOR[self.processor]

    def describe(self):
        ram = f", {self.memory_mb} MB" if self.memory_mb else ""
        return f"{self.name} ({self.processor}{ram}, revision {self.revision:#x})"


def decode_revision(code):
    code = int(code)
    if code & NEW_STYLE_BIT:
        kind, processor = (code >> 4) & 0xFF, (code >> 12) & 0xF
        return Board(code, NEW_STYLE_TYPES.get(kind, f"(unknown type {kind:#x})"),
                     PROCESSORS.get(processor, f"(unknown processor {processor})"),
                     256 << ((code >> 20) & 0x7))
    kind = code & 0xFFFF       # bit 24 of an old-style code only says "over-volted"
    return Board(code, OLD_STYLE_TYPES.get(kind, f"(unknown old-style revision {kind:#x})"), "BCM2835")


def parse_cpuinfo_revision(text):
    """The revision code from /proc/cpuinfo's "Revision : 9000c1" line, or None."""
    for line in (text or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Revision":
            try:
                return int(value.strip(), 16)
            except ValueError:
                return None
    return None
