"""The firmware's mailbox property interface, carried by the /dev/vcio ioctl.

Every firmware protocol number of the backend lives here, once: the message layout, the tags used,
memory flags, clock ids and the ioctl request. (These are firmware protocol, not QPU ISA, so they
do not belong in ``asm/isa.py``.) Sources are listed in docs/pi-backend.md.

A message is a buffer of little-endian 32-bit words:

    total size in bytes | request code 0 | tag ... | end tag 0

and each tag is

    tag id | value buffer size in bytes | request/response word | value buffer

The request/response word is the request length with bit 31 clear on the way in; the firmware
answers with bit 31 set and the response length in bits 30:0. The value buffer must hold the
larger of request and response, since the answer overwrites the request in place. The buffer's
code word becomes 0x80000000 on success, 0x80000001 if the firmware could not parse it.
"""

import dataclasses
import struct
from types import MappingProxyType

from ..hardware import MEM_FLAG_COHERENT, MEM_FLAG_DIRECT, MEM_FLAG_L1_NONALLOCATING  # noqa: F401
from .errors import MailboxError

REQUEST_CODE = 0x00000000
RESPONSE_SUCCESS = 0x80000000
RESPONSE_PARSE_ERROR = 0x80000001
TAG_RESPONSE_BIT = 0x80000000
TAG_LENGTH_MASK = 0x7FFFFFFF
END_TAG = 0x00000000


@dataclasses.dataclass(frozen=True)
class Tag:
    """One property tag: its id and how many 32-bit words go in and come back."""

    name: str
    id: int
    request_words: int
    response_words: int

    @property
    def value_bytes(self):
        return 4 * max(self.request_words, self.response_words)


TAGS = MappingProxyType({tag.name: tag for tag in (
    Tag("get_firmware_revision", 0x00000001, 0, 1),
    Tag("get_board_revision", 0x00010002, 0, 1),
    Tag("get_vc_memory", 0x00010006, 0, 2),        # -> (base address, size in bytes)
    Tag("get_clock_rate", 0x00030002, 1, 2),       # (clock id) -> (clock id, rate in Hz)
    Tag("mem_alloc", 0x0003000C, 3, 1),            # (size, alignment, flags) -> handle (0 = none)
    Tag("mem_lock", 0x0003000D, 1, 1),             # (handle) -> bus address (0 = failed)
    Tag("mem_unlock", 0x0003000E, 1, 1),           # (handle) -> status
    Tag("mem_release", 0x0003000F, 1, 1),          # (handle) -> status
    Tag("execute_qpu", 0x00030011, 4, 1),          # (num_qpus, control, noflush, timeout ms) -> status
    Tag("enable_qpu", 0x00030012, 1, 1),           # (1 = on, 0 = off) -> status
)})

CLOCK_V3D = 5

# execute_qpu's status word: 0 when every QPU raised its host interrupt, this on timeout.
EXECUTE_OK = 0
EXECUTE_TIMEOUT = 0x80000000
# noflush = 0 asks the firmware to clear the V3D caches before the launch, so the QPUs do not
# read stale lines of buffers the ARM has just written.
EXECUTE_FLUSH = 0

# mem_alloc flags, bits 3:2: the bus alias (cache behaviour) of the block's address. Direct:
# uncached; coherent: non-allocating in the VideoCore L2; both: L1 non-allocating, L2 allocating.
# Written once in vc4nn.hardware (the emulator's memory model follows them too).

# The ioctl: IOCTL_MBOX_PROPERTY = _IOWR(100, 0, char *) in the vcio driver. Linux's generic
# _IOC layout: direction bits 31:30 (read|write = 3), argument size bits 29:16, type bits 15:8,
# number bits 7:0. The size is sizeof(char *) *of the calling process*: 4 for 32-bit ARM
# (0xC0046400), 8 for a 64-bit userland (0xC0086400). A 64-bit kernel accepts the 32-bit number
# from 32-bit processes through its compat path, so the right number is always the one for our
# own pointer size, which the OS boundary reports (ctypes.sizeof(c_void_p)).
VCIO_IOC_TYPE = 100
VCIO_IOC_PROPERTY_NR = 0
IOC_READ_WRITE = 3


def ioctl_request(pointer_size):
    return (IOC_READ_WRITE << 30) | (pointer_size << 16) | (VCIO_IOC_TYPE << 8) | VCIO_IOC_PROPERTY_NR


def build_message(tag, args):
    """The request buffer for one tag with its arguments (a bytearray, answered in place)."""
    if len(args) != tag.request_words:
        raise MailboxError(tag.name, f"takes {tag.request_words} arguments, got {len(args)}")
    values = [int(a) & 0xFFFFFFFF for a in args]
    values += [0] * (tag.value_bytes // 4 - len(values))
    words = [0, REQUEST_CODE, tag.id, tag.value_bytes, 4 * tag.request_words, *values, END_TAG]
    words[0] = 4 * len(words)
    return bytearray(struct.pack(f"<{len(words)}I", *words))


def parse_response(tag, buffer):
    """The response words of an answered message, checked against the protocol."""
    words = struct.unpack_from(f"<{len(buffer) // 4}I", buffer)
    if words[1] == RESPONSE_PARSE_ERROR:
        raise MailboxError(tag.name, "the firmware could not parse the request (code 0x80000001)")
    if words[1] != RESPONSE_SUCCESS:
        raise MailboxError(tag.name, f"no answer from the firmware (code {words[1]:#010x})")
    if words[2] != tag.id:
        raise MailboxError(tag.name, f"answer names tag {words[2]:#010x}, expected {tag.id:#010x}")
    if not words[4] & TAG_RESPONSE_BIT:
        raise MailboxError(tag.name, "the firmware did not answer this tag (bit 31 clear)")
    length = words[4] & TAG_LENGTH_MASK
    if length < 4 * tag.response_words:
        raise MailboxError(tag.name, f"answer is {length} bytes, expected {4 * tag.response_words}")
    return tuple(words[5:5 + tag.response_words])


class Mailbox:
    """Property calls on an open /dev/vcio: ``mailbox.call("mem_lock", handle)`` -> (bus address,)."""

    def __init__(self, boundary, fd):
        self._os, self._fd = boundary, fd
        self.request = ioctl_request(boundary.pointer_size())

    def call(self, name, *args):
        tag = TAGS[name]
        buffer = build_message(tag, args)
        self._send(tag, buffer)
        return parse_response(tag, buffer)

    def prepared(self, name):
        """``call`` of one tag with its request buffer made once (launches: one per layer)."""
        return PreparedCall(self, TAGS[name])

    def _send(self, tag, buffer):
        try:
            self._os.ioctl(self._fd, self.request, buffer)
        except OSError as e:
            # The vcio driver turns a firmware error status into an ioctl failure (EINVAL).
            raise MailboxError(tag.name, f"/dev/vcio refused the request: {e.strerror or e}") \
                from None


class PreparedCall:
    """A tag's request buffer, reused: each call restores the request (the firmware answers in
    place) and packs the arguments, so the bytes sent are build_message's."""

    # The request's value buffer starts after: size, code, tag id, value size, request length.
    VALUES_OFFSET = 20

    def __init__(self, mailbox, tag):
        self._mailbox, self._tag = mailbox, tag
        self._request = bytes(build_message(tag, [0] * tag.request_words))
        self._buffer = bytearray(self._request)
        self._values = struct.Struct(f"<{tag.request_words}I")

    def __call__(self, *args):
        tag, buffer = self._tag, self._buffer
        if len(args) != tag.request_words:
            raise MailboxError(tag.name, f"takes {tag.request_words} arguments, got {len(args)}")
        buffer[:] = self._request
        self._values.pack_into(buffer, self.VALUES_OFFSET, *[int(a) & 0xFFFFFFFF for a in args])
        self._mailbox._send(tag, buffer)
        return parse_response(tag, buffer)
