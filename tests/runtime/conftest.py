import os

import numpy as np
import pytest

import vc4nn
import vc4nn.nn
from vc4nn.runtime.errors import ModelError

from . import fake_nn


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
