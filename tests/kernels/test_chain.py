"""Several layers in one launch (vc4nn/kernels/chain.py, vc4nn/runtime/replay_chain.py): the
layer kernels' shared end chains recorded launches on the emulator with its default dynamic
checks; numpy is the reference, and a stale TMU read inside one launch is caught."""

import numpy as np
import pytest

from asm import isa
from asm.encoding import decode, words_from_bytes
from vc4nn import nn
from vc4nn.emulator import EmulatorDevice
from vc4nn.emulator.checks import Checks
from vc4nn.emulator.errors import CheckError
from vc4nn.kernels import chain

from tests.emulator.chained_launch import Chained

# Every rule a chained launch could break that only warns by default stops the run here.
STRICT = Checks(semaphore_balance="error", missing_host_interrupt="error",
                dma_in_flight_at_end="error", tmu_outstanding_at_end="error",
                vpm_read_pending_at_end="error")


def relu(x):
    return np.maximum(x, 0)


def small_network(device, rng):
    """pointwise (12 QPUs) -> depthwise -> global pool (2 QPUs, for a long time) -> fully
    connected (12 QPUs, each reading the whole pool result: without the barrier most would
    read it before it is written), on device buffers; and the float64 reference."""
    h, w = 12, 10
    x = rng.standard_normal((h, w, 16)).astype(np.float32)
    w1, b1 = rng.standard_normal((16, 24)).astype(np.float32), rng.standard_normal(24)
    w2, b2 = rng.standard_normal((3, 3, 24)).astype(np.float32), rng.standard_normal(24)
    w3, b3 = rng.standard_normal((24, 200)).astype(np.float32), rng.standard_normal(200)
    b1, b2, b3 = (b.astype(np.float32) for b in (b1, b2, b3))
    bufs = {"x": device.array(x), "y1": device.alloc((h, w, 24), np.float32),
            "y2": device.alloc((h, w, 24), np.float32), "g": device.alloc(24, np.float32),
            "z": device.alloc(200, np.float32)}
    p1 = nn.prepare_pointwise(w1, b1, device)
    p2 = nn.prepare_depthwise(w2, b2, device)
    p3 = nn.prepare_fully_connected(w3, b3, device)
    calls = [lambda: nn.pointwise(bufs["x"], p1, activation="relu", out=bufs["y1"],
                                  device=device, num_qpus=12),
             lambda: nn.depthwise(bufs["y1"], p2, stride=1, padding="same", activation="relu6",
                                  out=bufs["y2"], device=device),
             lambda: nn.global_avg_pool(bufs["y2"], out=bufs["g"], device=device),
             lambda: nn.fully_connected(bufs["g"], p3, out=bufs["z"], device=device)]
    y1 = relu(x.astype(np.float64) @ w1 + b1)
    padded = np.pad(y1, ((1, 1), (1, 1), (0, 0)))
    y2 = sum(padded[i:i + h, j:j + w] * w2[i, j] for i in range(3) for j in range(3)) + b2
    z = np.clip(y2, 0, 6).mean(axis=(0, 1)) @ w3 + b3
    return bufs, calls, z, [p1, p2, p3]


def test_layers_chained_in_one_launch_match_numpy_and_the_launches_apart():
    with EmulatorDevice(checks=STRICT) as device:
        bufs, calls, expected, prepared = small_network(device, np.random.default_rng(0))
        chained = Chained(device, calls)
        counts = [n for n, _, _, _ in chained.launches]
        assert len(counts) == 4 and max(counts) == 12 and min(counts) < 12   # pass programs run
        result = chained.run()
        together = np.array(bufs["z"])
        np.testing.assert_allclose(together, expected, rtol=1e-4, atol=1e-4)
        # One launch: every QPU raised the host interrupt once, at its very end; the
        # semaphores ended at 0 (semaphore_balance is an error here).
        assert (result.launches, result.num_qpus, result.host_interrupts) == (1, 12, 12)
        for name in ("y1", "y2", "g", "z"):
            bufs[name][...] = 0
        apart = chained.run_apart()
        np.testing.assert_array_equal(np.array(bufs["z"]), together)
        # The chained launch saves the launches' overhead and pays a barrier per joint.
        overhead = device.timing.launch_overhead
        saved = sum(r.seconds for r in apart) - result.seconds
        assert 2.5 * overhead < saved < 3 * overhead
        chained.free()
        # A launch whose first layer (the pool) uses fewer QPUs than the next: the others start
        # in the pass program.
        bufs["z"][...] = 0
        tail = Chained(device, calls[2:])
        assert tail.launches[0][0] < tail.chain.num_qpus
        tail.run()
        np.testing.assert_array_equal(np.array(bufs["z"]), together)
        tail.free()
        for p in prepared:
            p.free()
        for buf in bufs.values():
            device.free(buf)
        assert device._allocations == []


def test_a_grouping_that_rereads_rewritten_bytes_is_a_stale_tmu_read():
    """c = a + b reads a through the TMU; a = c + c rewrites it by VDW; d = a + b reads a again:
    in one launch the TMU cache or the L2 still holds the old line (facts section 3)."""
    with EmulatorDevice() as device:
        rng = np.random.default_rng(1)
        a, b = (device.array(rng.standard_normal((4, 4, 16)).astype(np.float32)) for _ in "ab")
        c, d = (device.alloc((4, 4, 16), np.float32) for _ in "cd")
        calls = [lambda: nn.add(a, b, out=c, device=device),
                 lambda: nn.add(c, c, out=a, device=device),
                 lambda: nn.add(a, b, out=d, device=device)]
        first = np.array(a)
        chained = Chained(device, calls)
        with pytest.raises(CheckError) as info:
            chained.run()
        assert info.value.rule == "tmu_stale_read"
        a[...] = first                      # apart, each launch starts with clean caches
        chained.run_apart()
        np.testing.assert_allclose(np.array(d), 2 * (first + np.array(b)) + np.array(b),
                                   rtol=1e-6)
        chained.free()


def test_the_barrier_semaphores_are_used_by_no_kernel():
    with EmulatorDevice() as device:
        bufs, calls, _, _ = small_network(device, np.random.default_rng(2))
        a = device.array(np.ones((4, 4, 16), np.float32))
        calls.append(lambda: nn.add(a, a, out=a.reshape(4, 4, 16), device=device))
        calls.append(lambda: nn.conv2d(np.ones((9, 9, 3), np.float32),
                                       np.ones((3, 3, 3, 8), np.float32), None, 2, "same",
                                       device=device))
        chained = Chained(device, calls)
        tail = chain.tail_code()
        used = set()
        for code in chained.pool.programs:
            assert chain.chains(code)
            for word in words_from_bytes(code.replace(tail, b"")):
                ins = decode(word)
                if ins.sig == isa.SIGNALS["load_imm"] and \
                        ins.ldi_mode == isa.LOAD_IMM_MODES["semaphore"]:
                    used.add(ins.immediate & 15)
        assert used and not used & {chain.ARRIVE, *chain.GO}
        chained.free()
