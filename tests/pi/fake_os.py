"""A fake Raspberry Pi at the OS boundary: device files, the /dev/vcio ioctl, /dev/mem, /proc.

It implements the firmware's mailbox property interface as documented (raspberrypi/firmware
wiki "Mailbox property interface", Linux include/soc/bcm2835/raspberrypi-firmware.h and
drivers/char/broadcom/vcio.c) and is deliberately strict: any message that does not follow the
documented layout byte for byte raises ProtocolViolation, which fails the test. It does not
import the code under test: every protocol number below is written down here independently.

Every request received is kept, as bytes, in ``messages`` so that tests can compare them with
layouts they build themselves.
"""

import dataclasses
import errno
import stat
import struct

PAGE = 4096
MIB = 1 << 20

# _IOWR(100, 0, char *): dir 3 << 30 | sizeof(char *) << 16 | 100 << 8 | 0, by pointer size.
IOCTL_MBOX_PROPERTY = {4: 0xC0046400, 8: 0xC0086400}

STATUS_REQUEST = 0x00000000
STATUS_SUCCESS = 0x80000000
TAG_RESPONSE = 0x80000000

# tag id -> (name, request bytes, response bytes), from the firmware wiki.
DOCUMENTED_TAGS = {
    0x00000001: ("get_firmware_revision", 0, 4),
    0x00010002: ("get_board_revision", 0, 4),
    0x00010006: ("get_vc_memory", 0, 8),
    0x00030002: ("get_clock_rate", 4, 8),
    0x0003000C: ("mem_alloc", 12, 4),
    0x0003000D: ("mem_lock", 4, 4),
    0x0003000E: ("mem_unlock", 4, 4),
    0x0003000F: ("mem_release", 4, 4),
    0x00030011: ("execute_qpu", 16, 4),
    0x00030012: ("enable_qpu", 4, 4),
}
QPU_TAGS = ("execute_qpu", "enable_qpu")

# Bus address bits 31:30 the firmware gives a block, by SoC and mem_alloc flags bits 3:2
# (as measured on hardware by Idein's rpimemmgr, src/mailbox.c).
ALIAS_BITS = {
    "BCM2835": {0x0: 0b00, 0x4: 0b01, 0x8: 0b10, 0xC: 0b11},
    "BCM2836": {0x0: 0b00, 0x4: 0b11, 0x8: 0b10, 0xC: 0b10},
    "BCM2837": {0x0: 0b00, 0x4: 0b11, 0x8: 0b10, 0xC: 0b10},
}
SOC_BY_PROCESSOR = {0: "BCM2835", 1: "BCM2836", 2: "BCM2837", 3: "BCM2711"}

# The V3D's registers (VideoCore IV 3D Architecture Reference Guide, section 10), offsets from
# the V3D base = peripheral base + 0xC00000; the peripheral base by SoC (BCM2835 datasheet
# 1.2.3; raspberrypi/documentation "Peripheral addresses") and as the device tree's
# /soc/ranges gives it (child 0x7E000000, parent, size; big-endian).
V3D_REGISTERS = {0x000: "IDENT0", 0x020: "L2CACTL", 0x024: "SLCACTL", 0x430: "SRQPC",
                 0x434: "SRQUA", 0x438: "SRQUL", 0x43C: "SRQCS", 0xE00: "DBCFG",
                 0xE2C: "DBQITE", 0xE30: "DBQITC"}
PERIPHERAL_BASE = {"BCM2835": 0x20000000, "BCM2836": 0x3F000000, "BCM2837": 0x3F000000,
                   "BCM2711": 0xFE000000}
REQUEST_QUEUE_DEPTH = 16

CHAR_DEVICE = stat.S_IFCHR
REGULAR = stat.S_IFREG


class ProtocolViolation(AssertionError):
    """The code under test broke the documented protocol (or asked the fake something absurd)."""


@dataclasses.dataclass
class FakeFile:
    text: str = None
    mode: int = REGULAR | 0o444
    owner: str = "root"
    group: str = "root"


@dataclasses.dataclass
class FakeFileInfo:
    mode: int
    owner: str
    group: str

    @property
    def permissions(self):
        return stat.filemode(self.mode)


@dataclasses.dataclass
class Block:
    physical: int
    size: int
    flags: int
    locked: bool = False


@dataclasses.dataclass
class Launch:
    num_qpus: int
    control: int
    noflush: int
    timeout_ms: int
    programs: list        # [(uniforms bus address, code bus address)] per QPU


class FakeV3D:
    """The V3D's register page as a program sees it. Every access is kept in ``accesses`` as
    ("r" or "w", register name, value). SRQPC queues a request; reading SRQCS dispatches the
    queued requests to free QPUs (``free_qpus`` at a time, one batch per read) and plays them through the Pi's
    runner, whose status decides whether they complete (0) or hang (anything else)."""

    def __init__(self, pi, free_qpus=12, dbcfg=0x1, dbqite=0x1):
        self.pi, self.free_qpus = pi, free_qpus
        self.values = {"DBCFG": dbcfg, "DBQITE": dbqite, "DBQITC": 0, "SRQUA": 0, "SRQUL": 0}
        self.accesses, self.closed = [], False
        self.power_on_reset()

    def power_on_reset(self):
        self.queue, self.running, self.error = [], [], False
        self.made = self.completed = 0
        self.uniforms_fresh = False

    def _name(self, offset):
        if self.closed:
            raise ProtocolViolation(f"V3D register {offset:#x} accessed after the window was closed")
        if not self.pi.qpus_enabled:
            raise ProtocolViolation(f"V3D register {offset:#x} accessed while the V3D is powered off")
        if offset not in V3D_REGISTERS:
            raise ProtocolViolation(f"access to V3D register offset {offset:#x}, not one the "
                                    f"direct launch needs")
        return V3D_REGISTERS[offset]

    def read(self, offset):
        name = self._name(offset)
        if name == "IDENT0":
            value = 0x02443356
        elif name == "SRQCS":
            self._dispatch()
            value = (len(self.queue) | self.error << 7 | (self.made & 0xFF) << 8
                     | (self.completed & 0xFF) << 16)
        elif name in ("SRQPC", "L2CACTL", "SLCACTL"):
            raise ProtocolViolation(f"read of {name}, which is a write-only control")
        else:
            value = self.values[name]
        self.accesses.append(("r", name, value))
        return value

    def write(self, offset, value):
        name = self._name(offset)
        if not 0 <= value < 1 << 32:
            raise ProtocolViolation(f"{name} written with {value}, not a 32-bit value")
        self.accesses.append(("w", name, value))
        if name == "SRQCS":
            self.error = self.error and not value & 1 << 7
            self.made = 0 if value & 1 << 8 else self.made
            self.completed = 0 if value & 1 << 16 else self.completed
        elif name == "SRQPC":
            if not self.uniforms_fresh:
                raise ProtocolViolation("SRQPC written without SRQUA first: the request would "
                                        "take the previous program's uniforms")
            self.uniforms_fresh = False
            self.made += 1
            if len(self.queue) >= REQUEST_QUEUE_DEPTH:
                self.error = True
            else:
                self.queue.append((self.values["SRQUA"], value))
        elif name == "DBQITC":
            self.values[name] &= ~value
        elif name == "IDENT0":
            raise ProtocolViolation("write to IDENT0, a read-only register")
        elif name in self.values:
            self.values[name] = value
            self.uniforms_fresh |= name == "SRQUA"

    def write_all(self, writes):
        for offset, value in writes:
            self.write(offset, value)

    def _dispatch(self):
        """One batch per reading of SRQCS: time passes between two polls."""
        if self.queue and len(self.running) < self.free_qpus:
            batch = self.queue[:self.free_qpus - len(self.running)]
            del self.queue[:len(batch)]
            for uniforms, code in batch:
                self.pi.read_bus(uniforms, 4)
                self.pi.read_bus(code, 8)
            launch = Launch(len(batch), None, None, None, batch)
            self.pi.launches.append(launch)
            status = self.pi.runner(self.pi, launch) if self.pi.runner else 0
            if status == 0:
                self.completed += len(batch)
            else:
                self.running += batch

    def close(self):
        self.closed = True


class FakePi:
    """A Pi with a firmware. ``runner(fake, launch)`` plays the QPUs and returns execute_qpu's
    status (default: every program ends at once, status 0)."""

    def __init__(self, revision=0x9000C1, model="Raspberry Pi Zero W Rev 1.1", *,
                 firmware_revision=0x6152F0C8, clock_hz=300_000_000, ram_mb=512, gpu_mem_mb=128,
                 heap_bytes=4 * MIB, user="pi", groups=("pi", "video"), root=False, kms=None,
                 config_path="/boot/config.txt", config="", pointer_size=4, runner=None,
                 journal=None, vcio=True, device_tree_ranges=True):
        self.revision, self.firmware_revision, self.clock_hz = revision, firmware_revision, clock_hz
        self.soc = SOC_BY_PROCESSOR.get((revision >> 12) & 0xF, "BCM2835") \
            if revision & (1 << 23) else "BCM2835"
        self.vc_base, self.vc_size = (ram_mb - gpu_mem_mb) * MIB, gpu_mem_mb * MIB
        self.heap_base = self.vc_base + MIB           # the firmware's relocatable heap
        self.ram = bytearray(heap_bytes)
        self.user, self.groups, self.root = user, set(groups), root
        self.kms, self.runner, self.journal = kms, runner, journal
        self._pointer_size = pointer_size
        self.blocks, self.next_handle = {}, 1
        self.qpus_enabled = False
        self.messages, self.calls, self.launches, self.mappings = [], [], [], []
        self.attached = {}          # id(view) -> (handle, physical offset, length) still mapped
        self.last_locked = None     # the block a following mmap is for (alloc, lock, map)
        self.open_fds, self.next_fd = {}, 3
        self.v3d = FakeV3D(self)
        self.register_maps, self.clock, self.yields = [], 0.0, 0
        self.clock_step = 1e-4        # seconds that pass between two readings of the clock
        overlay = f"dtoverlay={kms}\n" if kms else ""
        self.files = {
            "/dev/mem": FakeFile(None, CHAR_DEVICE | 0o640, "root", "kmem"),
            "/proc/cpuinfo": FakeFile(f"processor\t: 0\nHardware\t: BCM2835\n"
                                      f"Revision\t: {revision:06x}\nModel\t\t: {model}\n"),
            "/proc/device-tree/model": FakeFile(model + "\0"),
            "/proc/modules": FakeFile("snd_bcm2835 24576 0 - Live 0x00000000\n"
                                      + ("vc4 229376 5 - Live 0x00000000\n" if kms else "")),
            "/proc/device-tree/soc/v3d@7ec00000/status": FakeFile("okay\0" if kms else "disabled\0"),
            config_path: FakeFile(f"# config\ndtparam=audio=on\n{config}{overlay}"),
        }
        self.binary_files = {}
        if device_tree_ranges and self.soc in PERIPHERAL_BASE:
            self.binary_files["/proc/device-tree/soc/ranges"] = struct.pack(
                ">3I", 0x7E000000, PERIPHERAL_BASE[self.soc], 0x01000000)
        if vcio:
            self.files["/dev/vcio"] = FakeFile(None, CHAR_DEVICE | 0o660, "root", "video")

    # -- the OS boundary ---------------------------------------------------------------------
    def pointer_size(self):
        return self._pointer_size

    def page_size(self):
        return PAGE

    def open(self, path, write=False, sync=False):
        if path not in self.files:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
        if not self.can_open(path, write) or (path == "/dev/mem" and not self.root):
            raise PermissionError(errno.EACCES, "Permission denied", path)
        fd, self.next_fd = self.next_fd, self.next_fd + 1
        self.open_fds[fd] = (path, write, sync)
        return fd

    def close(self, fd):
        if fd not in self.open_fds:
            raise ProtocolViolation(f"close of fd {fd}, which is not open")
        del self.open_fds[fd]

    def ioctl(self, fd, request, buffer):
        path = self.open_fds.get(fd, (None,))[0]
        if path != "/dev/vcio":
            raise ProtocolViolation(f"ioctl on fd {fd} ({path}), not on /dev/vcio")
        if request != IOCTL_MBOX_PROPERTY[self._pointer_size]:
            raise ProtocolViolation(f"ioctl request {request:#x}, expected "
                                    f"{IOCTL_MBOX_PROPERTY[self._pointer_size]:#x}")
        if not isinstance(buffer, bytearray):
            raise ProtocolViolation("the message must be a mutable buffer the driver answers into")
        self.messages.append(bytes(buffer))
        self._answer(buffer)

    def mmap(self, fd, length, offset):
        path, write, sync = self.open_fds.get(fd, (None, False, False))
        if path != "/dev/mem" or not write or not sync:
            raise ProtocolViolation(f"mmap of fd {fd} ({path}, write={write}, sync={sync}); "
                                    f"GPU memory is mapped from /dev/mem opened O_RDWR|O_SYNC")
        if offset % PAGE or length % PAGE or length <= 0:
            raise ProtocolViolation(f"mmap offset {offset:#x} / length {length:#x} not page sized")
        start = offset - self.heap_base
        if start < 0 or start + length > len(self.ram):
            raise ProtocolViolation(f"mmap of physical {offset:#x}+{length:#x} is outside GPU memory")
        if not any(b.locked and b.physical < offset + length and offset < b.physical + b.size
                   for b in self.blocks.values()):
            raise ProtocolViolation(f"mmap of physical {offset:#x} covers no locked block")
        self.mappings.append((offset, length))
        view = memoryview(self.ram)[start:start + length]
        self.attached[id(view)] = (self.last_locked, offset, length)
        return view

    def map_registers(self, fd, physical, length):
        path, write, sync = self.open_fds.get(fd, (None, False, False))
        if path != "/dev/mem" or not write or not sync:
            raise ProtocolViolation(f"register mapping of fd {fd} ({path}, write={write}, "
                                    f"sync={sync}); registers are mapped from /dev/mem O_RDWR|O_SYNC")
        expected = PERIPHERAL_BASE[self.soc] + 0xC00000
        if (physical, length) != (expected, PAGE):
            raise ProtocolViolation(f"register mapping at {physical:#x}+{length:#x}; the V3D's "
                                    f"page is at {expected:#x}+{PAGE:#x} on a {self.soc}")
        if not self.qpus_enabled:
            raise ProtocolViolation("V3D registers mapped before enable_qpu(1): the V3D is off")
        self.register_maps.append(physical)
        self.v3d.closed = False
        return self.v3d

    def monotonic(self):
        self.clock += self.clock_step
        return self.clock

    def yield_cpu(self):
        self.yields += 1

    def read_bytes(self, path):
        return self.binary_files.get(path)

    def detach_mapping(self, mapping):
        where = self.attached.pop(id(mapping), None)
        if where is None:
            raise ProtocolViolation("detach_mapping of something that is not a live GPU mapping")
        self.calls.append(("detach_mapping", where[1:], ()))

    def read_text(self, path):
        file = self.files.get(path)
        return file.text if file is not None else None

    def exists(self, path):
        return path in self.files or any(p.startswith(path.rstrip("/") + "/") for p in self.files)

    def stat(self, path):
        file = self.files.get(path)
        return FakeFileInfo(file.mode, file.owner, file.group) if file is not None else None

    def can_open(self, path, write):
        file = self.files.get(path)
        if file is None:
            return False
        if self.root:
            return True
        shift = 6 if file.owner == self.user else 3 if file.group in self.groups else 0
        need = 0o6 if write else 0o4
        return (file.mode >> shift) & need == need

    def is_root(self):
        return self.root

    def user_name(self):
        return "root" if self.root else self.user

    # -- the firmware ------------------------------------------------------------------------
    def _answer(self, buffer):
        if len(buffer) % 4 or len(buffer) < 12:
            raise ProtocolViolation(f"message of {len(buffer)} bytes: not whole words, or too short")
        words = list(struct.unpack(f"<{len(buffer) // 4}I", bytes(buffer)))
        if words[0] != len(buffer):
            raise ProtocolViolation(f"size word {words[0]} but the buffer is {len(buffer)} bytes")
        if words[1] != STATUS_REQUEST:
            raise ProtocolViolation(f"request code {words[1]:#x}, expected 0")
        i = 2
        while True:
            if i >= len(words):
                raise ProtocolViolation("no end tag")
            if words[i] == 0:
                if i != len(words) - 1:
                    raise ProtocolViolation(f"{4 * (len(words) - 1 - i)} bytes after the end tag")
                break
            i = self._answer_tag(words, i)
        words[1] = STATUS_SUCCESS
        buffer[:] = struct.pack(f"<{len(words)}I", *words)

    def _answer_tag(self, words, i):
        if i + 3 > len(words):
            raise ProtocolViolation(f"tag header at byte {4 * i} runs past the end")
        tag_id, value_size, indicator = words[i:i + 3]
        if tag_id not in DOCUMENTED_TAGS:
            raise ProtocolViolation(f"unknown tag {tag_id:#010x}")
        name, request_bytes, response_bytes = DOCUMENTED_TAGS[tag_id]
        if indicator & TAG_RESPONSE:
            raise ProtocolViolation(f"{name}: request/response word has bit 31 set in a request")
        if indicator != request_bytes:
            raise ProtocolViolation(f"{name}: request length {indicator}, documented {request_bytes}")
        if value_size % 4 or value_size < max(request_bytes, response_bytes):
            raise ProtocolViolation(f"{name}: value buffer of {value_size} bytes cannot hold "
                                    f"request {request_bytes} / response {response_bytes}")
        start, end = i + 3, i + 3 + value_size // 4
        if end > len(words):
            raise ProtocolViolation(f"{name}: value buffer runs past the end of the message")
        args = words[start:start + request_bytes // 4]
        if any(words[start + request_bytes // 4:end]):
            raise ProtocolViolation(f"{name}: unused value buffer words are not zero")
        if self.kms and name in QPU_TAGS:
            # The firmware refuses QPU calls while vc4 owns the V3D; vcio reports that as EINVAL.
            raise OSError(errno.EINVAL, "Invalid argument")
        results = getattr(self, "_" + name)(*args)
        self.calls.append((name, tuple(args), tuple(results)))
        self._write_journal(name, args, results)
        words[i + 2] = TAG_RESPONSE | response_bytes
        words[start:start + len(results)] = [r & 0xFFFFFFFF for r in results]
        return end

    def _write_journal(self, name, args, results):
        if self.journal:
            with open(self.journal, "a") as f:
                f.write(" ".join([name, *map(hex, args), "->", *map(hex, results)]) + "\n")

    def _get_firmware_revision(self):
        return (self.firmware_revision,)

    def _get_board_revision(self):
        return (self.revision,)

    def _get_vc_memory(self):
        return (self.vc_base, self.vc_size)

    def _get_clock_rate(self, clock_id):
        return (clock_id, self.clock_hz if clock_id == 5 else 0)

    def _mem_alloc(self, size, align, flags):
        if size == 0 or align == 0 or align & (align - 1):
            raise ProtocolViolation(f"mem_alloc of {size} bytes aligned to {align}")
        if flags & 0xC not in ALIAS_BITS[self.soc]:
            raise ProtocolViolation(f"mem_alloc flags {flags:#x}")
        taken = sorted((b.physical, b.physical + b.size) for b in self.blocks.values())
        candidate = self.heap_base
        for lo, hi in taken + [(self.heap_base + len(self.ram), None)]:
            candidate = -(-candidate // align) * align
            if candidate + size <= lo:
                break
            candidate = hi if hi is not None else lo + 1
        if candidate + size > self.heap_base + len(self.ram):
            return (0,)
        handle, self.next_handle = self.next_handle, self.next_handle + 1
        self.blocks[handle] = Block(candidate, size, flags)
        return (handle,)

    def _block(self, handle, verb):
        if handle not in self.blocks:
            raise ProtocolViolation(f"{verb} of handle {handle}, which is not allocated")
        return self.blocks[handle]

    def _mem_lock(self, handle):
        block = self._block(handle, "mem_lock")
        block.locked = True
        self.last_locked = handle
        return (block.physical | ALIAS_BITS[self.soc][block.flags & 0xC] << 30,)

    def _mem_unlock(self, handle):
        block = self._block(handle, "mem_unlock")
        if not block.locked:
            raise ProtocolViolation(f"mem_unlock of handle {handle}, which is not locked")
        if any(mapped == handle for mapped, _, _ in self.attached.values()):
            # Once unlocked the firmware may move or reuse the memory: a live ARM mapping of it
            # would let stale numpy views write into someone else's memory.
            raise ProtocolViolation(f"mem_unlock of handle {handle} while the ARM still maps it")
        block.locked = False
        return (0,)

    def _mem_release(self, handle):
        block = self._block(handle, "mem_release")
        if block.locked:
            raise ProtocolViolation(f"mem_release of handle {handle} while it is still locked")
        del self.blocks[handle]
        return (0,)

    def _enable_qpu(self, enable):
        if enable not in (0, 1):
            raise ProtocolViolation(f"enable_qpu({enable})")
        self.qpus_enabled = bool(enable)
        if not enable:
            self.v3d.power_on_reset()      # powering the V3D off stops and forgets everything
        return (0,)

    def _execute_qpu(self, num_qpus, control, noflush, timeout_ms):
        if not self.qpus_enabled:
            raise ProtocolViolation("execute_qpu before enable_qpu(1)")
        if not 1 <= num_qpus <= 12 or timeout_ms == 0 or noflush not in (0, 1):
            raise ProtocolViolation(f"execute_qpu({num_qpus}, {control:#x}, {noflush}, {timeout_ms})")
        pairs = struct.unpack(f"<{2 * num_qpus}I", self.read_bus(control, 8 * num_qpus))
        programs = list(zip(pairs[0::2], pairs[1::2]))
        for uniforms, code in programs:
            self.read_bus(uniforms, 4)
            self.read_bus(code, 8)
        launch = Launch(num_qpus, control, noflush, timeout_ms, programs)
        self.launches.append(launch)
        return (self.runner(self, launch) if self.runner else 0,)

    # -- for tests ---------------------------------------------------------------------------
    def _locate(self, bus_address, nbytes):
        physical = bus_address & 0x3FFFFFFF
        for block in self.blocks.values():
            if block.locked and block.physical <= physical and physical + nbytes <= block.physical + block.size:
                return physical - self.heap_base
        raise ProtocolViolation(f"bus address {bus_address:#010x} (+{nbytes}) is in no locked block")

    def read_bus(self, bus_address, nbytes):
        start = self._locate(bus_address, nbytes)
        return bytes(self.ram[start:start + nbytes])

    def write_bus(self, bus_address, data):
        start = self._locate(bus_address, len(data))
        self.ram[start:start + len(data)] = data

    def live_handles(self):
        return sorted(self.blocks)


def pi_zero_w(**kw):
    return FakePi(0x9000C1, "Raspberry Pi Zero W Rev 1.1", **kw)


def pi1_model_b(**kw):
    return FakePi(0x000E, "Raspberry Pi Model B Rev 2", clock_hz=250_000_000, **kw)


def pi2_model_b(**kw):
    return FakePi(0xA01041, "Raspberry Pi 2 Model B Rev 1.1", clock_hz=250_000_000, ram_mb=1024, **kw)


def pi3_model_b(**kw):
    return FakePi(0xA02082, "Raspberry Pi 3 Model B Rev 1.2", ram_mb=1024, **kw)


def pi4_model_b(**kw):
    return FakePi(0xC03111, "Raspberry Pi 4 Model B Rev 1.1", ram_mb=4096, **kw)


def not_a_pi():
    fake = FakePi(vcio=False)
    del fake.files["/proc/device-tree/model"]
    fake.files["/proc/cpuinfo"] = FakeFile("processor\t: 0\nvendor_id\t: GenuineIntel\n")
    return fake
