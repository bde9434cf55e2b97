import ast
import importlib.util
import os

import numpy as np
import pytest

import vc4nn
import vc4nn.nn
from vc4nn.runtime.errors import ModelError

from . import fake_nn

# Modules that build their models with the test extras (onnx, tflite) or compare with
# onnxruntime are not collected where an extra cannot be installed (a 32-bit userland:
# tools/test_32bit.sh), rather than failing to import. Read from each module's own imports, so
# a new test module needs no entry here.
_EXTRAS = ("onnx", "onnxruntime", "tflite", "flatbuffers")
_HERE = os.path.dirname(os.path.abspath(__file__))


def _needs_missing_extra(module):
    """Whether ``module`` (a file name here), or a module it imports from here, imports an
    extra that is not installed."""
    with open(os.path.join(_HERE, module)) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Import):
            roots = [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            roots = [node.module.split(".")[0]]
        elif isinstance(node, ast.ImportFrom) and node.level == 1:
            local = [node.module] if node.module else [alias.name for alias in node.names]
            if any(os.path.isfile(os.path.join(_HERE, name + ".py")) and name != "conftest"
                   and _needs_missing_extra(name + ".py") for name in local):
                return True
            continue
        else:
            continue
        if any(root in _EXTRAS and importlib.util.find_spec(root) is None for root in roots):
            return True
    return False


collect_ignore = [module for module in sorted(os.listdir(_HERE))
                  if module.startswith("test_") and module.endswith(".py")
                  and _needs_missing_extra(module)]


@pytest.fixture
def fake_layers(monkeypatch):
    """vc4nn.nn's layers replaced by the numpy stand-in (fake_nn.py)."""
    for name, fn in vars(fake_nn.module).items():
        monkeypatch.setattr(vc4nn.nn, name, fn, raising=False)


@pytest.fixture
def emulator():
    with vc4nn.open_device("emulator") as dev:
        yield dev


@pytest.fixture(scope="session")
def mobilenet_v2_onnx(tmp_path_factory):
    """torchvision's MobileNetV2 exported to ONNX from the offline weights package."""
    from vc4nn.runtime.mobilenet_v2 import export_mobilenet_v2, weights_path
    try:
        weights_path()
    except ModelError as error:
        pytest.skip(f"{error} (the test set-up installs it without torch)")
    path = tmp_path_factory.mktemp("mnv2") / "mobilenet_v2.onnx"
    return str(export_mobilenet_v2(path))


@pytest.fixture(scope="session")
def cat_frame():
    """scikit-image's chelsea.png (a cat) as a 224x224 uint8 frame."""
    skimage = pytest.importorskip("skimage", reason="the cat photo ships with scikit-image")
    from vc4nn.runtime.image import load_frame
    path = os.path.join(os.path.dirname(skimage.__file__), "data", "chelsea.png")
    return load_frame(path, 224, 224)


CAT_CLASSES = range(281, 286)      # tabby, tiger cat, Persian, Siamese, Egyptian cat


def top(scores, k=5):
    return list(np.argsort(-np.asarray(scores).reshape(-1), kind="stable")[:k])


def rel_error(got, expected):
    return np.max(np.abs(got - expected)) / np.max(np.abs(expected))


@pytest.fixture(scope="session")
def tiny_v1(tmp_path_factory):
    """MobileNet v1 0.25/32 (random weights, 10 classes) as an ONNX file."""
    import onnx
    from vc4nn.runtime import random_mobilenets
    path = str(tmp_path_factory.mktemp("v1") / "m.onnx")
    onnx.save(random_mobilenets.mobilenet_v1(32, 0.25), path)
    return path
