"""Load a model file into the optimized IR, choosing the reader by the file's content."""

import os
import stat

from .errors import ModelFormatError
from .passes import optimize

TFLITE_MAGIC = b"TFL3"


def read_bytes(path, what="model"):
    """The file's bytes, or a ModelFormatError naming it."""
    try:
        with open(path, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise ModelFormatError(f"cannot read the {what}: not a regular file", path)
            return f.read()
    except OSError as error:
        raise ModelFormatError(f"cannot read the {what}: {error.strerror}", path) from None


def read_graph(path):
    """The file's graph, as the loader converted it (before the passes)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            # A device or a pipe (/dev/zero) would be read until memory runs out.
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise ModelFormatError("not a regular file (a .tflite or .onnx model file)",
                                       path)
            head = f.read(8)
    except OSError as error:
        raise ModelFormatError(f"cannot read the model: {error.strerror}", path) from None
    if len(head) == 8 and head[4:8] == TFLITE_MAGIC:
        from .tflite_loader import load_tflite
        return load_tflite(path)
    if path.endswith(".tflite"):
        raise ModelFormatError(f"not a TFLite file: the identifier at bytes 4-8 is {head[4:8]!r}, "
                               f"not {TFLITE_MAGIC!r}", path)
    from .onnx_loader import load_onnx
    return load_onnx(path)


def load_graph(path):
    """The optimized IR of a .tflite or .onnx file."""
    return optimize(read_graph(path))
