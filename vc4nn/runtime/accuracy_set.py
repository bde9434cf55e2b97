"""The inputs of ``vc4nn accuracy``: the RGB photos that ship with scikit-image, then seeded
variations of its photos (random crop, rescale, mirror, colour jitter), as uint8 frames.

Why variations of photos rather than noise: on noise a classifier's logits sit close together,
so a rounding error flips the order of near-tied classes and the agreement figure measures the
tie, not the precision. A crop of a photo keeps a photo's statistics and gives the network
something it recognises, as the images a user classifies do.
"""

import os

import numpy as np

from .image import ImageError, load_frame

# Shown as they are (resized to the input, centre crop), in this order.
PHOTOS = ("chelsea.png", "coffee.png", "astronaut.png", "rocket.jpg", "motorcycle_left.png",
          "hubble_deep_field.jpg", "retina.jpg", "ihc.png")
# The sources of the variations: scikit-image's photographs of scenes and objects (the grey
# ones become grey RGB), not its microscope or telescope images.
SCENES = ("chelsea.png", "coffee.png", "astronaut.png", "rocket.jpg", "motorcycle_left.png",
          "motorcycle_right.png", "camera.png", "coins.png", "brick.png", "grass.png",
          "gravel.png", "clock_motion.png")
# Variation ranges: the crop keeps 25-100% of the photo's area (aspect 3:4 to 4:3, the usual
# "random resized crop" of ImageNet training); brightness and contrast scale by 0.7-1.3,
# saturation by 0.6-1.4; half the variations are mirrored.
CROP_AREA = (0.25, 1.0)
CROP_ASPECT = (3 / 4, 4 / 3)
BRIGHTNESS = CONTRAST = (0.7, 1.3)
SATURATION = (0.6, 1.4)


def skimage_folder():
    try:
        import skimage
    except ImportError:
        raise ImageError("the accuracy set is scikit-image's photos: pip install "
                         "'vc4nn[demo]' (scikit-image, Pillow)") from None
    return os.path.join(os.path.dirname(skimage.__file__), "data")


def _existing(names):
    folder = skimage_folder()
    paths = [os.path.join(folder, name) for name in names]
    return [p for p in paths if os.path.exists(p)]


def _label(path):
    return os.path.splitext(os.path.basename(path))[0]


def _read_rgb(path):
    try:
        from PIL import Image
    except ImportError:
        raise ImageError("reading images needs Pillow: pip install 'vc4nn[image]'") from None
    with Image.open(path) as img:
        return img.convert("RGB")


def variation(photo, h, w, rng):
    """A uint8 (h, w, 3) frame: a random crop of the PIL image ``photo`` rescaled to h x w,
    mirrored or not, its brightness, contrast and saturation jittered (ranges above)."""
    from PIL import Image
    width, height = photo.size
    area = width * height * rng.uniform(*CROP_AREA)
    aspect = np.exp(rng.uniform(*np.log(CROP_ASPECT)))
    cw = int(round(min(width, np.sqrt(area * aspect))))
    ch = int(round(min(height, np.sqrt(area / aspect))))
    left = int(rng.integers(0, width - cw + 1))
    top = int(rng.integers(0, height - ch + 1))
    frame = photo.resize((w, h), Image.BILINEAR, box=(left, top, left + cw, top + ch))
    x = np.asarray(frame, np.float64)
    if rng.random() < 0.5:
        x = x[:, ::-1]
    grey = (x @ [0.299, 0.587, 0.114])[..., None]
    x = grey + rng.uniform(*SATURATION) * (x - grey)
    x = x.mean() + rng.uniform(*CONTRAST) * (x - x.mean())
    x = rng.uniform(*BRIGHTNESS) * x
    return np.clip(np.round(x), 0, 255).astype(np.uint8)


def accuracy_inputs(count, h, w, seed=0):
    """[(label, uint8 (h, w, 3) frame)], ``count`` in all: the photos first, then variation k
    (k = 0, 1, ...) of scene k mod the number of scenes, drawn with the seed (seed, k)."""
    out = [(_label(p), load_frame(p, h, w)) for p in _existing(PHOTOS)[:count]]
    scenes = _existing(SCENES)
    if len(out) < count and not scenes:
        raise ImageError(f"no scikit-image photos found in {skimage_folder()}")
    for k in range(count - len(out)):
        path = scenes[k % len(scenes)]
        rng = np.random.default_rng([seed, k])
        out.append((f"{_label(path)}~{seed}.{k}", variation(_read_rgb(path), h, w, rng)))
    return out
