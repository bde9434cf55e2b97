"""The .pth reader (no torch) and the MobileNetV2 exporter: torchvision's weights classify the cat
under onnxruntime, and the runtime's optimized IR gives onnxruntime's top-5."""

import collections
import pickle
import sys
import types
import zipfile

import numpy as np
import onnxruntime as ort
import pytest

from vc4nn.runtime.errors import ModelFormatError
from vc4nn.runtime.image import NORMALIZATIONS, normalize
from vc4nn.runtime.loader import load_graph
from vc4nn.runtime.pth import load_state_dict

from .conftest import CAT_CLASSES, rel_error, top
from .reference import evaluate


def test_cat_top5_matches_onnxruntime(mobilenet_v2_onnx, cat_frame):
    x = normalize(cat_frame, NORMALIZATIONS["torchvision"])
    sess = ort.InferenceSession(mobilenet_v2_onnx, providers=["CPUExecutionProvider"])
    expected = sess.run(None, {"input": x.transpose(2, 0, 1)[None]})[0][0]
    assert top(expected, 1)[0] in CAT_CLASSES
    got = evaluate(load_graph(mobilenet_v2_onnx), x)[0]
    assert top(got) == top(expected)
    assert rel_error(got, expected) <= 1e-4


@pytest.fixture
def fake_torch(monkeypatch):
    """Modules named like torch's, so a test can write a checkpoint the way torch.save does."""
    torch = types.ModuleType("torch")
    utils = types.ModuleType("torch._utils")

    class FloatStorage:
        pass
    FloatStorage.__module__, FloatStorage.__qualname__ = "torch", "FloatStorage"

    def _rebuild_tensor_v2(*args):
        pass
    _rebuild_tensor_v2.__module__ = "torch._utils"
    _rebuild_tensor_v2.__qualname__ = "_rebuild_tensor_v2"
    torch.FloatStorage, utils._rebuild_tensor_v2 = FloatStorage, _rebuild_tensor_v2
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch._utils", utils)
    return torch, utils


class _Tensor:
    def __init__(self, key, offset, shape, stride, utils):
        self.args = (key, offset, shape, stride)
        self.utils = utils

    def __reduce__(self):
        key, offset, shape, stride = self.args
        return (self.utils._rebuild_tensor_v2,
                (_StorageRef(key), offset, shape, stride, False, collections.OrderedDict()))


class _StorageRef:
    def __init__(self, key):
        self.key = key


def checkpoint_pickle(torch, utils, tensors):
    """data.pkl as torch.save writes it; tensors: name -> (storage key, offset, shape, stride)."""
    class P(pickle.Pickler):
        def persistent_id(self, obj):
            if isinstance(obj, _StorageRef):
                return ("storage", torch.FloatStorage, obj.key, "cpu", 0)
            return None
    import io
    buf = io.BytesIO()
    P(buf, protocol=2).dump(collections.OrderedDict(
        (k, _Tensor(*v, utils)) for k, v in tensors.items()))
    return buf.getvalue()


def test_zip_checkpoint_with_strides_and_offsets(tmp_path, fake_torch):
    torch, utils = fake_torch
    storage = np.arange(24, dtype="<f4")
    pkl = checkpoint_pickle(torch, utils, {
        "a": ("0", 0, (2, 3), (3, 1)),          # plain
        "t": ("0", 4, (3, 2), (1, 3)),          # transposed view at an offset
    })
    path = tmp_path / "c.pth"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", pkl)
        z.writestr("archive/data/0", storage.tobytes())
    state = load_state_dict(str(path))
    assert state["a"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert state["t"].tolist() == [[4, 7], [5, 8], [6, 9]]


def test_checkpoint_cannot_run_code(tmp_path):
    class Evil:
        def __reduce__(self):
            import os
            return (os.system, ("echo pwned",))
    path = tmp_path / "evil.pth"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps(Evil(), protocol=2))
    with pytest.raises(ModelFormatError, match="refusing"):
        load_state_dict(str(path))


def test_truncated_legacy_checkpoint(tmp_path):
    from vc4nn.runtime.mobilenet_v2 import weights_path
    try:
        data = open(weights_path(), "rb").read()
    except Exception as error:
        pytest.skip(str(error))
    path = tmp_path / "cut.pth"
    path.write_bytes(data[: len(data) - 1000])
    with pytest.raises(ModelFormatError, match="truncated.*cut.pth"):
        load_state_dict(str(path))
