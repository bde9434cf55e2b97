"""The model runtime: TFLite and ONNX MobileNets on the QPUs, layer by layer through vc4nn.nn.

    sess = vc4nn.InferenceSession("mobilenet_v2.onnx")
    scores, = sess.run(None, {"input": x})            # x: (1, 3, 224, 224) float32

Details: docs/runtime.md.
"""

from .errors import InputError, ModelError, ModelFormatError, UnsupportedModelError  # noqa: F401
from .image import Normalization  # noqa: F401
from .session import InferenceSession  # noqa: F401
