"""A session's device memory (``InferenceSession.memory()``): against the device's own list of
allocations and against sizes derived by hand, and the zero row the layers share."""

import numpy as np
import onnx
import pytest

from vc4nn.nn import layer_call
from vc4nn.runtime import InferenceSession
from vc4nn.runtime import random_mobilenets as onnx_models

WORD, HALF = 4, 2


def held_bytes(device):
    return sum(int(allocation.size) for allocation in device._allocations)


# The arena of tiny_v1 (MobileNet v1 0.25/32: the stem writes 16x16x8, pw1 16x16x8 ->
# 16x16x16) by hand: the most bytes alive at one step. float32: pw1 reads 16x16x8 and writes
# 16x16x16; halves: the stem reads the float32 frame, 32x32x3 and its padding (1 on each
# side), 34 x 34 x 3 words in whole 64-byte lines (the graph's input stays float32), and writes
# 16x16x8 halves, more than pw1's 16x16x(8 + 16) halves.
FRAME = -(-34 * 34 * 3 * WORD // 64) * 64
ARENA = {"fp32": 16 * 16 * (8 + 16) * WORD, "fp16": FRAME + 16 * 16 * 8 * HALF}


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_memory_is_every_allocation_the_session_holds(tiny_v1, device, precision):
    with InferenceSession(tiny_v1, device=device, precision=precision) as sess:
        memory = sess.memory()
        assert memory["total_bytes"] == held_bytes(device)
        assert memory["total_bytes"] == sum(memory[part] for part in (
            "arena_bytes", "weight_bytes", "recorded_bytes", "zero_bytes"))
        assert memory["arena_bytes"] == ARENA[precision]
        sess.run(None, {"input": np.zeros((1, 3, 32, 32), np.float32)})
        assert held_bytes(device) == memory["total_bytes"]      # a run allocates nothing
    assert device._allocations == []


def two_convs(path):
    """The stem, then a 3x3 convolution padded on every side, which reads a zero row; the stem
    reads the padded input frame and so none."""
    b = onnx_models.OnnxBuilder(seed=3)
    y = b.conv_bn("input", 3, 8, stride=2)
    y = b.conv_bn(y, 8, 16)
    onnx.save(b.model("input", 32, b.head(y, 16, 10)), path)
    return path


def test_layers_read_one_shared_zero_row(tmp_path, device, monkeypatch):
    """Every zero row a layer asks for is one buffer: the largest request, which every
    recorded conv2d launch that pads rows addresses (its uniform words hold the buffer's
    address), and the only zero row the session holds (before: one per layer). The depthwise
    layers ask for none: they fill padding rows with zeros in the VPM (docs/kernels.md
    "Schedule"); nor does the stem, which reads the padded input frame."""
    requests = []
    zeros = layer_call.LayerCall.zeros

    def spy(call, shape, dtype=np.float32):
        requests.append(int(np.prod(shape)) * np.dtype(dtype).itemsize)
        return zeros(call, shape, dtype)
    monkeypatch.setattr(layer_call.LayerCall, "zeros", spy)
    with InferenceSession(two_convs(str(tmp_path / "two.onnx")), device=device,
                          precision="fp16") as sess:
        (pool,) = sess._zeros.buffers
        assert pool.nbytes == -(-max(requests) // 64) * 64
        assert sess.memory()["zero_bytes"] == pool.nbytes
        stem, conv = [n.name for n in sess.graph.nodes if n.op == "conv2d"]
        assert len(requests) == 1
        for name, reads_zeros in ((stem, False), (conv, True)):
            recording = sess._recordings[name]    # conv2d keeps its streams in a buffer of its own
            words = np.concatenate([np.asarray(b).view(np.uint8).view("<u4") for b in
                                    [recording.packed] + recording.kept])
            assert (pool.address in words) == reads_zeros, name


def test_mobilenet_v1_reads_no_zero_row(tiny_v1, device):
    with InferenceSession(tiny_v1, device=device, precision="fp16") as sess:
        assert sess._zeros.buffers == [] and sess.memory()["zero_bytes"] == 0


@pytest.mark.slow
def test_mobilenet_v1_224_fp16_within_12_mb(tmp_path, device):
    """The issue's target: MobileNet v1 1.0/224 in fp16 holds at most 12,000,000 bytes of GPU
    memory with every layer recorded. By hand: the arena is pw1's 112x112x(32 + 64) halves; the
    weights are ~4.2 M parameters as halves (the stem's float32 864 and the 32-column padding
    of the channel-pair layouts add little)."""
    path = str(tmp_path / "v1.onnx")
    onnx.save(onnx_models.mobilenet_v1(224, 1.0, classes=1000), path)
    with InferenceSession(path, device=device, precision="fp16") as sess:
        memory = sess.memory()
        assert memory["arena_bytes"] == 112 * 112 * (32 + 64) * HALF
        assert 4.2e6 * HALF < memory["weight_bytes"] < 4.3e6 * HALF
        assert len(sess._recordings) == len(sess.steps) - 1        # all but the reshape
        assert memory["total_bytes"] == held_bytes(device) <= 12_000_000
