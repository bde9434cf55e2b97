"""A Python-embedded assembler for the VideoCore IV QPU.

Write a kernel as a Python function of an ``Assembler`` (see ``asm.kernel``), assemble it to a
``Program``; registers are importable from here (``r0``..``r5``, ``ra``/``rb``, ``uniform``...).
"""

from . import isa, vpm
from .errors import AsmError, AssemblerError, EncodingError, HazardError, ParseError, SourceLocation
from .kernel import Assembler, InstructionHandle, Kernel, Label, kernel
from .program import Program
from .registers import *  # noqa: F401,F403  (r0..r5, ra, rb, ra0..rb63, named I/O registers, null)
from .registers import REGISTERS, Register, RegisterFile, lookup
from .vpm import vdr_pitch, vdr_setup, vdw_setup, vdw_stride, vpm_read_setup, vpm_write_setup
