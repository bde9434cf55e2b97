"""Versions of vc4nn's own source, for the caches that must forget what another version made.

A version is a hash of source files' names and contents, so any edit makes old entries stale:
``generator_version`` covers what a program is a function of (the program cache), and
``plans_version`` in ``nn/tuned_plans.py`` adds the cycle model (the tuned-plan cache).
"""

import functools
import hashlib
import os

import asm

PACKAGE = os.path.dirname(os.path.abspath(__file__))
PYTHON_SOURCE = (".py",)
C_SOURCE = (".c", ".h")


def source_digest(paths, suffixes=PYTHON_SOURCE):
    """A hash of the names and contents of the files ending in one of ``suffixes`` in ``paths``
    (folders, not recursed into; or files, hashed whatever their suffix)."""
    digest = hashlib.sha256()
    for path in paths:
        files = [path] if os.path.isfile(path) else \
            [os.path.join(path, n) for n in sorted(os.listdir(path)) if n.endswith(suffixes)]
        for name in files:
            digest.update(os.path.basename(name).encode() + b"\0")
            with open(name, "rb") as f:
                digest.update(f.read())
    return digest.hexdigest()


@functools.lru_cache(maxsize=1)
def generator_version():
    """A hash of the assembler's and the kernels' source, and of the hardware facts the kernels
    choose their layouts by: what a program is a function of."""
    return source_digest([os.path.dirname(asm.__file__), os.path.join(PACKAGE, "kernels"),
                          os.path.join(PACKAGE, "hardware.py")])


@functools.lru_cache(maxsize=1)
def emulator_version():
    """A hash of the whole emulator, its Python and its C core: the cycle model lives in both."""
    emulator = os.path.join(PACKAGE, "emulator")
    return source_digest([emulator, os.path.join(emulator, "csrc")],
                         suffixes=PYTHON_SOURCE + C_SOURCE)
