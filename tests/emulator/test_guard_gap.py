"""The guard gap, as a QPU program meets it on either core: an access by the TMU, a DMA load
(VDR), a DMA store (VDW) or the uniform stream that starts inside buffer X and runs past its end,
or lands anywhere in the ``guard_bytes`` after it, faults naming X (its address, size, shape and
dtype), the unit, the QPU and the PC; the buffer after the gap is untouched. The gap's size is
EmulatorDevice's ``guard_bytes``."""

import numpy as np
import pytest

from asm import kernel, r1, tmu0_s, unif_addr, uniform, vr_addr, vw_addr
from vc4nn.emulator import EmulatorDevice
from vc4nn.emulator.errors import MemoryFault

# unit -> (bytes one access moves, the program: its first uniform is the address)
ACCESS_BYTES = {"tmu": 4, "dma_load": 64, "dma_store": 64, "uniform": 4}


def access(a, unit):
    a.mov(r1, uniform)
    if unit == "tmu":
        a.mov(tmu0_s, r1)
        a.nop(sig="ldtmu0")
    elif unit == "dma_load":
        a.setup_dma_load(rows=1, rowlen=16, y=0)
        a.mov(vr_addr, r1)
        a.wait_dma_load()
    elif unit == "dma_store":
        a.setup_dma_store(units=1, depth=16, y=0)
        a.mov(vw_addr, r1)
        a.wait_dma_store()
    else:
        a.mov(unif_addr, r1)
        a.nop()
        a.nop()
        a.mov(r1, uniform)
    a.exit()


def run_access(device, unit, address):
    program = kernel(lambda a: access(a, unit)).assemble(check=False)
    device.execute(program, uniforms=[[address]])


@pytest.mark.parametrize("unit", sorted(ACCESS_BYTES))
@pytest.mark.parametrize("guard", [64, 4096])
def test_an_overrun_into_the_guard_faults_naming_the_buffer(unit, guard):
    size = ACCESS_BYTES[unit]
    with EmulatorDevice(guard_bytes=guard) as device:
        x = device.alloc((4, 16), np.uint32)          # 256 bytes
        y = device.array(np.full(64, 7, np.uint32))   # the next allocation, after x's gap
        assert (y.address - x.address) & 0x3FFFFFFF >= x.nbytes + guard
        end = x.address + x.nbytes
        # straddling the end, right at the end, and the last access that fits in the gap
        straddling = end - size // 2 if size > 4 else end   # word accesses cannot straddle
        for address in (straddling, end, end + guard - size):
            with pytest.raises(MemoryFault) as caught:
                run_access(device, unit, address)
            fault = caught.value
            message = str(fault)
            assert fault.unit == unit and fault.qpu == 0 and fault.pc is not None, message
            past = address + size - end
            assert f"runs {past} bytes past the end of the 256-byte buffer at " \
                   f"{x.address:#010x} (4x16 uint32)" in message, message
        assert (y == 7).all()


@pytest.mark.parametrize("unit", ["tmu", "dma_store"])
def test_past_the_guard_the_fault_no_longer_names_the_buffer(unit):
    # With no buffer after it, an access just past x's gap is outside every allocation: the gap
    # is guard_bytes long, not more.
    with EmulatorDevice(guard_bytes=128) as device:
        x = device.alloc(64, np.uint32)
        with pytest.raises(MemoryFault) as caught:
            run_access(device, unit, x.address + x.nbytes + 128)
        assert "outside every allocation" in str(caught.value)
