"""Assembled kernel programs kept on disk, so that a second start of a session does not assemble
(and hazard-check) its layers' programs again.

Location: the environment variable ``VC4NN_PROGRAM_CACHE`` (a directory; ``off`` disables the
cache), else ``$XDG_CACHE_HOME/vc4nn/programs`` (``~/.cache`` when unset), as the tuning cache.

An entry is named by a hash of what made the program: the generator version (a hash of the
source of every module of ``asm`` and ``vc4nn/kernels`` and of ``vc4nn/hardware.py``, so any
change to the assembler, a kernel or a hardware fact makes old entries unreachable), the
kernel's name and the repr of its arguments (the kernels' plans are frozen dataclasses whose
repr holds every field). The entry stores that whole
description and a digest of the code; an entry whose description or digest does not match, or
that does not parse or decode, is ignored and rewritten. Arguments without a faithful repr (a
default ``<... at 0x...>``) are never cached. Cached programs carry their labels but no source
map. Entries are written atomically (a temporary file, then a rename); a cache that cannot be
written is skipped with a warning.
"""

import contextlib
import hashlib
import importlib
import json
import os
import warnings

import asm
from asm.program import Program

from ..source_version import generator_version
from ..user_cache import user_cache_path

# The module, not the decorator ``asm.kernel`` that the package exports under the same name.
asm_kernel = importlib.import_module("asm.kernel")

ENV_VAR = "VC4NN_PROGRAM_CACHE"
FORMAT = 1


def cache_dir(path=None):
    """The cache directory to use, or None when the cache is off (VC4NN_PROGRAM_CACHE=off)."""
    return user_cache_path(path, ENV_VAR, "programs")


def describe(kernel, args, kwargs, check):
    """What a program is made from, as text; None when an argument has no faithful repr."""
    text = (f"{kernel.__module__}.{kernel.__qualname__}{args!r} {sorted(kwargs.items())!r} "
            f"check={bool(check)}")
    return None if " at 0x" in text else text


class DiskStore:
    """``asm.kernel.program_store`` backed by a directory (see the module's docstring)."""

    def __init__(self, folder, version=None):
        self.folder = folder
        self.version = version or generator_version()
        self.hits = self.misses = 0
        self._warned = False

    def _entry(self, description):
        key = hashlib.sha256(f"{self.version}\n{description}".encode()).hexdigest()
        return os.path.join(self.folder, key[:2], key + ".json")

    def get(self, kernel, args, kwargs, check):
        description = describe(kernel, args, kwargs, check)
        program = None if description is None else self._load(description)
        if program is None:
            self.misses += 1
        else:
            self.hits += 1
        return program

    def _load(self, description):
        try:
            with open(self._entry(description), encoding="utf-8") as f:
                entry = json.load(f)
            code = bytes.fromhex(entry["code"])
            if entry.get("format") != FORMAT or entry.get("generator") != self.version \
                    or entry.get("description") != description \
                    or entry.get("sha256") != hashlib.sha256(code).hexdigest():
                return None
            program = Program.from_bytes(code)
            program.labels = {str(k): int(v) for k, v in entry["labels"].items()}
            return program
        except (OSError, ValueError, KeyError, TypeError, AttributeError, asm.AsmError):
            return None         # missing, unreadable, corrupt: assemble again (and rewrite)

    def put(self, kernel, args, kwargs, check, program):
        description = describe(kernel, args, kwargs, check)
        if description is None:
            return
        code = program.to_bytes()
        entry = {"format": FORMAT, "generator": self.version, "description": description,
                 "sha256": hashlib.sha256(code).hexdigest(), "labels": program.labels,
                 "code": code.hex()}
        path = self._entry(description)
        temporary = f"{path}.{os.getpid()}.tmp"
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(temporary, "w", encoding="utf-8") as f:
                json.dump(entry, f)
            os.replace(temporary, path)
        except OSError as error:
            with contextlib.suppress(OSError):
                os.remove(temporary)
            if not self._warned:
                self._warned = True
                warnings.warn(f"program cache {self.folder!r} cannot be written ({error}); "
                              f"programs are assembled on every start", stacklevel=2)


@contextlib.contextmanager
def active(path=None, version=None):
    """Inside the block, kernels' programs come from (and go to) the disk cache; yields the
    DiskStore (None when the cache is off). ``version``: the generator version (tests)."""
    folder = cache_dir(path)
    if folder is None:
        yield None
        return
    store = DiskStore(folder, version)
    before = asm_kernel.program_store
    asm_kernel.program_store = store
    try:
        yield store
    finally:
        asm_kernel.program_store = before
