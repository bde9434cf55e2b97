"""Harness for the emulator core tests: run a kernel body, get the vectors it left in registers.

``run_body(body, outputs, uniforms=...)`` assembles a program that reads its output address
from the first uniform into ra31, runs ``body(a)``, stores the registers named in ``outputs``
(one 16-word row each) through the VPM and a DMA store, and exits. It returns the stored rows
as a (num_qpus, len(outputs), 16) uint32 array and the RunResult. With several QPUs the stores
take turns under the mutex. The body must leave ra31 alone.
"""

import os

import numpy as np
import pytest

from asm import kernel, mutex_acquire, qpu_number, r1, ra31, uniform, vpm
from vc4nn.emulator import EmulatorDevice

OUT = ra31


def store_and_exit(a, outputs, shared):
    if shared:
        a.read(mutex_acquire)
    a.setup_vpm_write(y=0)
    for reg in outputs:
        a.mov(vpm, reg)
    a.setup_dma_store(units=len(outputs), depth=16, y=0)
    a.start_dma_store(OUT)
    a.wait_dma_store()
    if shared:
        a.mutex_release()
    a.exit()


def branch_by_qpu(a):
    """QPU 0 falls through; every other QPU goes to label "other"."""
    a.mov(r1, qpu_number, sf=True)
    a.branch("other", cond="all_zc")
    a.nop()
    a.nop()
    a.nop()


def assemble_body(body, outputs, num_qpus=1, check=True):
    @kernel
    def program(a):
        a.mov(OUT, uniform)
        body(a)
        store_and_exit(a, outputs, num_qpus > 1)
    return program.assemble(check=check)


def run_program(program, rows, uniforms=(), num_qpus=1, device=None, **options):
    """Run an assembled program whose first uniform is the output address of ``rows`` rows."""
    dev = device or EmulatorDevice(**options)
    with dev:
        out = dev.alloc((num_qpus, max(rows, 1), 16), np.uint32)
        per_qpu = uniforms if uniforms and isinstance(uniforms[0], (list, tuple)) \
            else [list(uniforms)] * num_qpus
        result = dev.execute(program, num_qpus,
                             [[out[q].address] + list(u) for q, u in enumerate(per_qpu)])
        return np.array(out), result


@pytest.fixture
def run_body():
    def run(body, outputs, uniforms=(), num_qpus=1, check=True, **options):
        program = assemble_body(body, outputs, num_qpus, check)
        return run_program(program, len(outputs), uniforms, num_qpus, **options)
    return run


def f32(values):
    """Float values as their uint32 bit patterns (a 16-lane vector when given one value)."""
    array = np.asarray(values, dtype=np.float32)
    if array.ndim == 0:
        array = np.full(16, array, dtype=np.float32)
    return array.view(np.uint32)


def as_float(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def _cores():
    """Every emulator test runs on both cores (the C one only when it is built); the
    environment variable VC4NN_TEST_CORES=c (or python) narrows that down."""
    from vc4nn.emulator import ccore
    wanted = os.environ.get("VC4NN_TEST_CORES", "python,c").split(",")
    return [core for core in wanted if core == "python" or ccore.available()]


@pytest.fixture(autouse=True, params=_cores())
def emulator_core(request, monkeypatch):
    """The core EmulatorDevice(core=None) picks in this test."""
    from vc4nn.emulator import ccore
    if request.param == "c" and request.node.get_closest_marker("python_core"):
        pytest.skip("patches the Python core's internals")
    monkeypatch.setattr(ccore, "default_override", request.param)
    return request.param
