"""A session's launch groups on the Pi backend, through the fake OS boundary: the firmware (or
the V3D's request queue) receives one launch per group, and the chain the QPUs will follow is
in the GPU memory the fake holds: each stream's chain word points at its QPU's record, which
names the next launch's uniforms and code (vc4nn/kernels/chain.py)."""

import struct

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")    # the model is built with onnx (a test extra)

from vc4nn.kernels import chain
from vc4nn.pi import PiDevice
from vc4nn.runtime import InferenceSession
from vc4nn.runtime.random_mobilenets import mobilenet_v1

from .fake_os import MIB, pi_zero_w
from .test_backend import assert_all_given_back


def words(fake, address, count):
    return list(struct.unpack(f"<{count}I", fake.read_bus(address, 4 * count)))


@pytest.mark.parametrize("launch", ["mailbox", "direct"])
def test_the_backend_receives_one_launch_per_group_and_the_chain_in_memory(tmp_path, launch):
    path = str(tmp_path / "v1.onnx")
    onnx.save(mobilenet_v1(32, 0.25), path)
    x = np.zeros((1, 3, 32, 32), np.float32)
    fake = pi_zero_w(root=True, heap_bytes=16 * MIB)
    made = {}
    with PiDevice(fake, launch=launch) as device:
        for grouped in (False, True):
            with InferenceSession(path, device=device, group_launches=grouped) as sess:
                before = len(fake.launches)
                sess.run(None, {"input": x})
                received = fake.launches[before:]
                made[grouped] = len(received)
                if not grouped:
                    continue
                chains = sess._chains
                assert chains
                by_first = {tuple(l.programs) for l in received}
                for c in chains:
                    n, control = c.pair
                    programs = list(zip(*[iter(words(fake, control, 2 * n))] * 2))
                    assert tuple(programs) in by_first
                    for j, (_, entries, tails, _) in enumerate(c.launches[:-1]):
                        _, next_entries, _, _ = c.launches[j + 1]
                        for q, tail in enumerate(tails):
                            (record,) = words(fake, tail, 1)
                            parity, leader, uniforms, code = words(fake, record,
                                                                   chain.RECORD_WORDS)
                            assert (parity, leader) == (j % 2, n if q == 0 else 0)
                            if q < len(next_entries):
                                assert (uniforms, code) == next_entries[q]
                    for tail in c.launches[-1][2]:
                        assert words(fake, tail, 1) == [chain.END]
                saved = sum(len(c.launches) - 1 for c in chains)
        assert made[True] == made[False] - saved
    assert_all_given_back(fake)
