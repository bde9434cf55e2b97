"""The only place the Pi backend touches the operating system.

Opening device files, the mailbox ioctl, mapping physical memory, reading /proc and config
files, and asking about permissions all go through one ``OsBoundary`` object. Tests hand the
backend a fake with the same methods (tests/pi/fake_os.py), so everything above this line runs
unchanged against it.
"""

import ctypes
import dataclasses
import fcntl
import grp
import mmap
import os
import pwd
import stat as stat_module
import time


# Linux's MAP_FIXED (the same value on ARM and x86); Python's mmap module does not export it.
MAP_FIXED = 0x10


def _libc_mmap(*args):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long)
    return libc.mmap(*args)


@dataclasses.dataclass(frozen=True)
class FileInfo:
    mode: int          # st_mode (type and permission bits)
    owner: str
    group: str

    @property
    def permissions(self):
        return stat_module.filemode(self.mode)


class OsBoundary:
    def pointer_size(self):
        """sizeof(void *) of this process: the size field of the mailbox ioctl request."""
        return ctypes.sizeof(ctypes.c_void_p)

    def page_size(self):
        return mmap.PAGESIZE

    def open(self, path, write=False, sync=False):
        """A file descriptor. ``sync`` (O_SYNC) makes a /dev/mem mapping uncached on the ARM."""
        flags = (os.O_RDWR if write else os.O_RDONLY) | (os.O_SYNC if sync else 0)
        return os.open(path, flags | getattr(os, "O_CLOEXEC", 0))

    def close(self, fd):
        os.close(fd)

    def ioctl(self, fd, request, buffer):
        """Pass ``buffer`` (a bytearray) by pointer; the driver's answer is written back into it."""
        fcntl.ioctl(fd, request, buffer, True)

    def mmap(self, fd, length, offset):
        """A shared read/write mapping of ``length`` bytes at ``offset`` (page aligned) of ``fd``.

        The mapping stays until the last view of it (numpy arrays included) is gone; releasing a
        block detaches it first (``detach_mapping``).
        """
        return mmap.mmap(fd, length, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE,
                         offset=offset)

    def detach_mapping(self, mapping):
        """Put private anonymous pages where ``mapping`` (from ``mmap``) maps GPU memory.

        A numpy view can outlive the release of its block; after this, writing through it
        lands in memory of this process only, never in GPU memory the firmware has taken back.
        The mmap object still unmaps the range when its last view goes.
        """
        window = (ctypes.c_char * len(mapping)).from_buffer(mapping)
        address = ctypes.addressof(window)
        del window
        result = _libc_mmap(address, len(mapping), mmap.PROT_READ | mmap.PROT_WRITE,
                            mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_FIXED, -1, 0)
        if result != address:
            error = ctypes.get_errno()
            raise OSError(error, f"could not detach the mapping at {address:#x}: "
                                 f"{os.strerror(error)}")

    def map_registers(self, fd, physical, length):
        """Memory-mapped device registers at ``physical`` (page aligned) of ``fd`` (/dev/mem
        opened O_SYNC, so the mapping is uncached and in order): a RegisterWindow."""
        return RegisterWindow(mmap.mmap(fd, length, mmap.MAP_SHARED,
                                        mmap.PROT_READ | mmap.PROT_WRITE, offset=physical))

    def monotonic(self):
        return time.perf_counter()

    def yield_cpu(self):
        """Let other threads and processes run (between polls of a register)."""
        os.sched_yield()

    def read_bytes(self, path):
        """The file's bytes (device-tree properties are binary), or None if it cannot be read."""
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError:
            return None

    def read_text(self, path):
        """The file's text, or None if it cannot be read."""
        try:
            with open(path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return None

    def exists(self, path):
        return os.path.exists(path)

    def stat(self, path):
        """FileInfo, or None if the file does not exist."""
        try:
            st = os.stat(path)
        except OSError:
            return None
        return FileInfo(st.st_mode, _name(pwd.getpwuid, st.st_uid), _name(grp.getgrgid, st.st_gid))

    def can_open(self, path, write):
        return os.access(path, os.R_OK | (os.W_OK if write else 0))

    def is_root(self):
        return os.geteuid() == 0

    def user_name(self):
        return _name(pwd.getpwuid, os.geteuid())


class RegisterWindow:
    """32-bit registers in a mapping. Each access is one aligned 32-bit load or store through
    ctypes (a 4-byte copy, which ARMv6 and later compilers emit as one ldr/str)."""

    def __init__(self, mapping):
        self._mapping = mapping
        self._words = (ctypes.c_uint32 * (len(mapping) // 4)).from_buffer(mapping)

    def read(self, offset):
        return self._words[offset // 4]

    def write(self, offset, value):
        self._words[offset // 4] = value & 0xFFFFFFFF

    def write_all(self, writes):
        """Each (offset, value) of ``writes`` in order, one 32-bit store each (a launch's
        register sequence without a method call per register)."""
        words = self._words
        for offset, value in writes:
            words[offset // 4] = value & 0xFFFFFFFF

    def close(self):
        del self._words
        self._mapping.close()


def _name(lookup, number):
    try:
        return lookup(number)[0]
    except KeyError:
        return str(number)
