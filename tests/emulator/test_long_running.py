"""What a long-running user of the emulator relies on: freed bus addresses are reused (with
coalescing), re-uploading a program does not grow the plan cache, an overrun into the guard gap
faults and names the buffer, and long launches report progress."""

import numpy as np
import pytest

from asm import kernel, r0, r1, uniform
from vc4nn.emulator import EmulatorDevice
from vc4nn.device import BUS_ADDRESS_MASK
from vc4nn.emulator.errors import MemoryFault
from vc4nn.emulator.machine import PROGRESS_INTERVAL
from vc4nn.emulator.memory import ARENA_BASE, ARENA_LIMIT, BusMemory
from vc4nn.errors import DeviceError

from examples import hello


def test_thousands_of_alloc_free_cycles_reuse_the_same_addresses():
    # 1 MiB buffers: without reuse the 752 MiB arena is exhausted after ~750 of them.
    with EmulatorDevice() as device:
        addresses = set()
        for _ in range(3000):
            buf = device.alloc(1 << 18, np.uint32)
            addresses.add(buf.address & BUS_ADDRESS_MASK)     # alias bits follow the board
            device.free(buf)
        assert addresses == {ARENA_BASE}
        assert device.memory.free_ranges == [(ARENA_BASE, ARENA_LIMIT)]


def test_freed_neighbours_coalesce_into_one_range():
    memory = BusMemory(guard_bytes=4096)
    blocks = [memory.allocate(8192, 4096) for _ in range(4)]
    # Each block takes 8192 bytes plus a 4096-byte guard.
    assert [b.bus_address & 0x3FFFFFFF for b in blocks] == \
        [ARENA_BASE + i * 12288 for i in range(4)]
    memory.release(blocks[1])
    memory.release(blocks[3])
    assert memory.free_ranges == [(ARENA_BASE + 12288, ARENA_BASE + 24576),
                                  (ARENA_BASE + 36864, ARENA_LIMIT)]
    memory.release(blocks[2])      # joins the range before and the range after
    assert memory.free_ranges == [(ARENA_BASE + 12288, ARENA_LIMIT)]
    # A block that fits the first hole goes there; a bigger one goes past it.
    assert memory.allocate(4096, 4096).bus_address & 0x3FFFFFFF == ARENA_BASE + 12288


def test_exhausted_memory_is_a_memory_error_and_recovers_after_free():
    memory = BusMemory(guard_bytes=0)
    big = memory.allocate(ARENA_LIMIT - ARENA_BASE, 4096)
    with pytest.raises(MemoryError):
        memory.allocate(16, 16)
    memory.release(big)
    assert memory.allocate(16, 16).bus_address & 0x3FFFFFFF == ARENA_BASE


def test_rerunning_a_reuploaded_program_does_not_grow_the_plan_cache():
    program = hello.hello.assemble()
    with EmulatorDevice() as device:
        out = device.alloc((1, 16), np.uint32)
        sizes, addresses = [], set()
        for i in range(300):
            padding = device.alloc(4096 * (i % 37 + 1), np.uint8)   # moves the code around
            code = device.array(np.frombuffer(program.to_bytes(), dtype=np.uint32))
            addresses.add(code.address)
            device.execute(code, uniforms=[[out.address, i % 12]])
            sizes.append(len(device.machine._plan_cache))
            device.free(code)
            device.free(padding)
        assert np.array_equal(out[0], 16 * (299 % 12) + np.arange(16))
    assert len(addresses) == 37
    assert sizes[0] <= len(program) and sizes[-1] == sizes[0]


def test_a_branch_plan_is_shared_by_copies_of_a_program_at_different_addresses():
    @kernel
    def loop(a):
        a.mov(r0, uniform)                  # iterations
        a.mov(r1, 0)
        a.label("top")
        a.sub(r0, r0, 1, sf=True)
        a.add(r1, r1, 1)
        a.branch("top", cond="any_zc")
        a.nop()
        a.nop()
        a.nop()
        a.exit()
    program = loop.assemble()
    with EmulatorDevice() as device:
        counts = []
        for shift in range(5):
            padding = device.alloc(4096 * (shift + 1), np.uint8)   # moves the next allocation
            result = device.execute(program, uniforms=[[shift + 2]])
            counts.append(result.qpus[0].instructions)
            device.free(padding)
        # One more iteration = sub, add, branch and its 3 delay slots; wrong targets (a plan
        # keeping the first copy's address) would fault or loop a different number of times.
        per_iteration = counts[1] - counts[0]
        assert per_iteration == 6
        assert counts == [counts[0] + per_iteration * s for s in range(5)]
        assert len(device.machine._plan_cache) <= len(program)


def test_an_overrun_into_the_guard_gap_faults_and_names_the_buffer():
    with EmulatorDevice(guard_bytes=8192) as device:
        src = device.array(np.arange(16, dtype=np.uint32))
        victim = device.alloc(16, np.uint32)
        # DMA store 64 bytes at 4 KiB past the end of src: inside src's guard.
        with pytest.raises(MemoryFault) as caught:
            device.memory.write_words(src.address + 64 + 4096, np.zeros(16), "dma_store")
        message = str(caught.value)
        assert "past the end of the 64-byte buffer" in message and "16 uint32" in message
        assert f"{src.address:#010x}" in message
        assert victim.address - src.address >= 64 + 8192
        assert not victim.any()


def test_guard_bytes_is_checked():
    with pytest.raises(DeviceError, match="guard_bytes"):
        EmulatorDevice(guard_bytes=-1)
    with pytest.raises(DeviceError, match="guard_bytes"):
        EmulatorDevice(guard_bytes=1.5)


def test_progress_is_called_at_each_multiple_of_the_interval():
    @kernel
    def spin(a):
        a.mov(r0, uniform)
        a.label("top")
        a.sub(r0, r0, 1, sf=True)
        a.branch("top", cond="any_zc")
        a.nop()
        a.nop()
        a.nop()
        a.exit()
    calls = []
    with EmulatorDevice(progress=calls.append) as device:
        iterations = (2 * PROGRESS_INTERVAL + 100) // 5
        result = device.execute(spin.assemble(), uniforms=[[iterations]])
    total = result.instructions
    assert total == 5 * iterations + 5 > 2 * PROGRESS_INTERVAL
    assert calls == [PROGRESS_INTERVAL * n for n in range(1, total // PROGRESS_INTERVAL + 1)]
