"""Bad programs end in typed errors naming the QPU, the PC and what went wrong: memory faults
of each unit, dynamic checks, deadlock, timeout, missing host interrupts, unsupported
instructions, and Python failures inside the emulator."""

import numpy as np
import pytest

from asm import (host_int, kernel, mutex_acquire, r1, r2, r4, ra1, sfu_recip, tmu0_s, unif_addr, uniform,
                 vr_addr, vw_addr)
from vc4nn.emulator import EmulatorDevice, alu
from vc4nn.emulator.checks import CheckWarning, Checks
from vc4nn.emulator.errors import (CheckError, DeadlockError, EmulatorError, EmulatorTimeout,
                                   MemoryFault, UnsupportedInstruction)
from vc4nn.errors import DeviceError

BYTES = 8      # per instruction


def run(body, num_qpus=1, uniforms=None, exit=True, check=False, timeout=10.0, **options):
    """Run ``body`` (then exit) and return (RunResult, code address)."""
    @kernel
    def program(a):
        body(a)
        if exit:
            a.exit()
    with EmulatorDevice(**options) as dev:
        code = dev.array(np.frombuffer(program.assemble(check=check).to_bytes(), np.uint32))
        return dev.execute(code, num_qpus, uniforms, timeout=timeout), code.address


def code_address_of(body):
    """Where ``run`` will place the code of ``body`` (same allocation order, fresh device)."""
    with EmulatorDevice() as dev:
        return dev.alloc(8).address


# --- memory faults --------------------------------------------------------------------------

def test_fetch_outside_memory():
    def body(a):
        a.branch(0x40, absolute=True)
        a.nop()
        a.nop()
        a.nop()
    with pytest.raises(MemoryFault) as info:
        run(body)
    fault = info.value
    assert (fault.unit, fault.qpu, fault.pc, fault.address) == ("fetch", 0, 0x40, 0x40)
    assert "QPU 0" in str(fault) and "0x00000040" in str(fault)


def test_running_off_the_end_of_the_code():
    with pytest.raises(MemoryFault) as info:
        run(lambda a: a.nop(), exit=False)
    base = code_address_of(None)
    assert info.value.unit == "fetch" and info.value.pc == base + BYTES


def test_misaligned_branch_target():
    def body(a):
        a.branch(0x10000004, absolute=True)
        a.nop()
        a.nop()
        a.nop()
    with pytest.raises(MemoryFault, match="not 8-byte aligned") as info:
        run(body)
    assert info.value.pc == 0x10000004


def test_uniform_read_past_the_uniforms():
    def body(a):
        for _ in range(3):
            a.mov(r1, uniform)
    with pytest.raises(MemoryFault) as info:
        run(body, uniforms=[[1]])
    base = code_address_of(None)
    assert info.value.unit == "uniform" and info.value.pc == base + 1 * BYTES


def test_uniforms_address_outside_memory():
    def body(a):
        a.ldi(r1, 0x20)
        a.mov(unif_addr, r1)
        a.nop()
        a.nop()
        a.mov(r2, uniform)
    with pytest.raises(MemoryFault) as info:
        run(body)
    assert info.value.unit == "uniform" and info.value.address == 0x20
    assert info.value.pc == code_address_of(None) + 4 * BYTES


def test_tmu_read_outside_memory():
    def body(a):
        a.ldi(r1, 0x100)
        a.mov(tmu0_s, r1)
        a.nop(sig="ldtmu0")
    with pytest.raises(MemoryFault) as info:
        run(body)
    assert info.value.unit == "tmu" and info.value.qpu == 0
    assert info.value.pc == code_address_of(None) + BYTES


@pytest.mark.parametrize("kind", ["store", "load"])
def test_dma_outside_memory(kind):
    def body(a):
        a.ldi(r1, 0x1000)
        if kind == "store":
            a.setup_dma_store(units=1, depth=16, y=0)
            a.mov(vw_addr, r1)
            a.wait_dma_store()
        else:
            a.setup_dma_load(rows=1, rowlen=16, y=0)
            a.mov(vr_addr, r1)
            a.wait_dma_load()
    with pytest.raises(MemoryFault) as info:
        run(body)
    assert info.value.unit == f"dma_{kind}" and info.value.address == 0x1000
    assert info.value.pc is not None and info.value.qpu == 0


def test_control_list_outside_memory():
    with EmulatorDevice() as dev, pytest.raises(MemoryFault) as info:
        dev.execute_control_list(2, 0x1234)
    assert info.value.unit == "control_list"


# --- dynamic checks -------------------------------------------------------------------------

def read_after_write(a):
    a.ldi(ra1, 5)
    a.mov(r1, ra1)


def test_regfile_read_after_write_error():
    with pytest.raises(CheckError) as info:
        run(read_after_write)
    assert info.value.rule == "regfile_read_after_write"
    assert info.value.qpu == 0 and info.value.pc == code_address_of(None) + BYTES


def test_regfile_read_after_write_warn_and_off():
    with pytest.warns(CheckWarning):
        result, _ = run(read_after_write, checks=Checks(regfile_read_after_write="warn"))
    assert len(result.warnings) == 1
    result, _ = run(read_after_write, checks={"regfile_read_after_write": "off"})
    assert result.warnings == []


def test_r4_read_before_the_sfu_result():
    def body(a):
        a.mov(sfu_recip, 2.0)
        a.nop()
        a.mov(r1, r4)
    with pytest.raises(CheckError, match="r4_read_before_sfu_result") as info:
        run(body)
    assert info.value.pc == code_address_of(None) + 2 * BYTES
    result, _ = run(body, checks="off")
    assert result.qpus[0].stalls["sfu"] > 0


def test_r4_overwritten_during_sfu():
    def body(a):
        a.mov(sfu_recip, 2.0)
        a.mov(sfu_recip, 4.0)
        a.nop()
        a.nop()
    with pytest.raises(CheckError, match="r4_overwritten_during_sfu"):
        run(body)


def test_uniform_read_too_soon_after_an_address_write():
    def body(a):
        a.mov(r1, uniform)
        a.mov(unif_addr, r1)
        a.nop()
        a.mov(r2, uniform)
    with pytest.raises(CheckError, match="uniform_read_after_address_write"):
        run(body, uniforms=[[0]])


def test_ldtmu_with_nothing_outstanding():
    with pytest.raises(CheckError, match="ldtmu_empty") as info:
        run(lambda a: a.nop(sig="ldtmu0"))
    assert info.value.qpu == 0 and info.value.pc == code_address_of(None)


def test_semaphores_not_back_at_their_start_values_warn():
    with pytest.warns(CheckWarning, match="semaphore_balance"):
        result, _ = run(lambda a: a.sema_release(2))
    assert "semaphore 2 = 1" in result.warnings[0]
    balanced, _ = run(lambda a: (a.sema_release(2), a.sema_acquire(2)))
    assert not balanced.warnings
    with pytest.raises(CheckError, match="semaphore_balance"):
        run(lambda a: a.sema_release(2), checks="error")


def _interrupt_from_the_master_only(a):
    """The GPU_FFT / py-videocore ending: every QPU ends, only the master (uniform 1) raises
    the host interrupt (a write of 0 raises none)."""
    a.mov(host_int, uniform)
    a.exit(interrupt=False)


def test_one_host_interrupt_for_many_programs_is_legal():
    result, _ = run(_interrupt_from_the_master_only, exit=False, num_qpus=4,
                    uniforms=[[1], [0], [0], [0]])
    assert result.host_interrupts == 1 and not result.warnings


def test_missing_host_interrupt():
    with pytest.warns(CheckWarning, match="missing_host_interrupt"):
        result, _ = run(lambda a: a.exit(interrupt=False), exit=False, num_qpus=2)
    assert result.host_interrupts == 0 and "0 host interrupts" in result.warnings[0]
    with pytest.raises(CheckError, match="missing_host_interrupt"):
        run(lambda a: a.exit(interrupt=False), exit=False, checks="error")


def test_unknown_check_rule_and_mode():
    with pytest.raises(DeviceError, match="unknown check rule.*regfile_raed.*known rules: .*"
                                          "regfile_read_after_write"):
        Checks(regfile_raed="warn")
    Checks(ldtmu_empty="warn", vpm_dma_race="off")       # the units' rules are known too
    with pytest.raises(DeviceError, match="check mode"):
        Checks(default="loud")
    with pytest.raises(DeviceError, match="checks must be"):
        EmulatorDevice(checks=3)


# --- deadlock and timeout -------------------------------------------------------------------

def test_deadlock_lists_every_qpu():
    def body(a):
        a.sema_acquire(5)
    with pytest.raises(DeadlockError) as info:
        run(body, num_qpus=2)
    waiting = info.value.waiting
    assert set(waiting) == {0, 1}
    assert waiting[0] == (code_address_of(None), waiting[0][1])
    assert "semaphore 5" in waiting[0][1] and "semaphore 5" in waiting[1][1]


def test_deadlock_on_the_mutex():
    def body(a):
        a.read(mutex_acquire)
        a.sema_acquire(0)
    with pytest.raises(DeadlockError) as info:
        run(body, num_qpus=2)
    reasons = {q: what for q, (_, what) in info.value.waiting.items()}
    assert "semaphore 0" in reasons[0] and "mutex" in reasons[1]


def endless(a):
    a.label("spin")
    a.branch("spin")
    a.nop()
    a.nop()
    a.nop()


def test_timeout_in_modelled_time():
    with pytest.raises(EmulatorTimeout, match="timeout of 1e-05 s"):
        run(endless, timeout=1e-5)


def test_instruction_budget():
    with pytest.raises(EmulatorTimeout, match="max_instructions") as info:
        run(endless, max_instructions=1000)
    assert "QPU 0 at PC" in str(info.value)
    with pytest.raises(DeviceError):
        EmulatorDevice(max_instructions=0)


# --- unsupported instructions and internal failures -----------------------------------------

@pytest.mark.parametrize("word, what", [
    (0x1900_0000_0000_0000 | (39 << 38) | (39 << 32) | (9 << 24) | (39 << 18) | (39 << 12),
     "ADD op code 9 is reserved"),
    (0x8000_0000_0000_0000 | (39 << 38) | (39 << 32) | (39 << 18) | (39 << 12),
     "signal load_color"),
    (0x1000_0000_0000_0000 | (1 << 49) | (43 << 38) | (39 << 32) | (39 << 18) | (39 << 12),
     "writes tlb_stencil"),
    (0x1000_0000_0000_0000 | (39 << 38) | (39 << 32) | (35 << 18) | (39 << 12),
     "reads varying"),
    (0xE400_0000_0000_0000 | (39 << 38) | (39 << 32), "load immediate mode 2 is reserved"),
])
def test_unsupported_instructions(word, what):
    with pytest.raises(UnsupportedInstruction, match=what) as info:
        run(lambda a: a.raw(word))
    assert info.value.qpu == 0 and info.value.pc == code_address_of(None)


@pytest.mark.python_core
def test_python_failure_inside_the_emulator_becomes_a_typed_error(monkeypatch):
    def broken(a, b):
        raise ValueError("boom")
    monkeypatch.setitem(alu.ADD, "add", broken)

    def body(a):
        a.add(r1, r1, r1)
    with pytest.raises(EmulatorError, match="ValueError: boom") as info:
        run(body)
    assert info.value.qpu == 0 and info.value.pc == code_address_of(None)
    assert isinstance(info.value.__cause__, ValueError)


def test_uniform_address_must_be_word_aligned():
    def body(a):
        a.mov(r1, uniform)
        a.add(r1, r1, 2)
        a.mov(unif_addr, r1)
        a.nop()
        a.nop()
        a.mov(r2, uniform)
    with EmulatorDevice() as dev:
        table = dev.alloc(16, np.uint32)
        with pytest.raises(MemoryFault, match="not 4-byte aligned"):
            program = kernel(lambda a: (body(a), a.exit())).assemble()
            dev.execute(program, 1, [[table.address]])
