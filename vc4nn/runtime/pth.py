"""Read a PyTorch checkpoint (.pth) without torch: tensors come back as numpy arrays.

Both of torch.save's formats: the zip archive (torch >= 1.6: ``<name>/data.pkl`` and raw storages
``<name>/data/<key>``) and the legacy stream (five pickles back to back: magic number, protocol,
system info, the object, the storage keys; then each storage as an int64 element count and its
raw little-endian bytes). The unpickler is restricted: it builds OrderedDicts and tensors from
storages, and refuses every other global, so a checkpoint cannot run code.
"""

import collections
import io
import pickle
import struct
import zipfile

import numpy as np

from .errors import ModelFormatError
from .loader import read_bytes

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
STORAGE_DTYPES = {"FloatStorage": np.float32, "DoubleStorage": np.float64,
                  "HalfStorage": np.float16, "LongStorage": np.int64, "IntStorage": np.int32,
                  "ShortStorage": np.int16, "CharStorage": np.int8, "ByteStorage": np.uint8,
                  "BoolStorage": np.bool_}


class _StorageType:
    def __init__(self, name):
        self.dtype = np.dtype(STORAGE_DTYPES[name]).newbyteorder("<")


class _Storage:
    def __init__(self, dtype, key):
        self.dtype, self.key, self.data = dtype, str(key), None


class _TensorRef:
    def __init__(self, storage, offset, size, stride):
        self.storage, self.offset = storage, int(offset)
        self.size, self.stride = tuple(size), tuple(stride)

    def materialize(self, path):
        data = self.storage.data
        if data is None:
            raise ModelFormatError(f"storage {self.storage.key} of a tensor is missing", path)
        count = 1 if not self.size else int(np.prod(self.size))
        last = self.offset + sum((s - 1) * st for s, st in zip(self.size, self.stride))
        if count and last >= data.size:
            raise ModelFormatError(f"a tensor of shape {self.size} reads past its storage "
                                   f"{self.storage.key} ({data.size} elements)", path)
        item = data.itemsize
        view = np.lib.stride_tricks.as_strided(
            data[self.offset:], self.size, tuple(st * item for st in self.stride))
        return np.array(view, dtype=data.dtype.newbyteorder("="))


def _rebuild_tensor(storage, offset, size, stride, *rest):
    return _TensorRef(storage, offset, size, stride)


def _rebuild_parameter(data, requires_grad=False, backward_hooks=None, *rest):
    return data


ALLOWED = {("collections", "OrderedDict"): collections.OrderedDict,
           ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
           ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
           ("torch._utils", "_rebuild_parameter"): _rebuild_parameter}


class _Unpickler(pickle.Unpickler):
    def __init__(self, stream, path):
        super().__init__(stream, encoding="latin1")
        self.path, self.storages = path, {}

    def find_class(self, module, name):
        if module == "torch" and name in STORAGE_DTYPES:
            return _StorageType(name)
        if (module, name) in ALLOWED:
            return ALLOWED[(module, name)]
        raise ModelFormatError(f"the checkpoint refers to {module}.{name}, which a weights file "
                               f"does not need; refusing to load it", self.path)

    def persistent_load(self, pid):
        if not isinstance(pid, tuple) or not pid or pid[0] != "storage":
            raise ModelFormatError(f"unknown persistent id {pid!r}", self.path)
        storage_type, key = pid[1], pid[2]
        if not isinstance(storage_type, _StorageType):
            raise ModelFormatError(f"storage of unknown type {storage_type!r}", self.path)
        if key not in self.storages:
            self.storages[key] = _Storage(storage_type.dtype, key)
        storage = self.storages[key]
        view = pid[5] if len(pid) > 5 else None
        if view is not None:          # legacy views into a bigger storage: (key, offset, size)
            return _ViewStorage(storage, view[1])
        return storage


class _ViewStorage:
    """A legacy storage view: tensors on it are offset into the root storage."""
    def __init__(self, root, offset):
        self.root, self.offset = root, int(offset)


def _resolve(obj, path):
    if isinstance(obj, _TensorRef):
        if isinstance(obj.storage, _ViewStorage):
            obj = _TensorRef(obj.storage.root, obj.storage.offset + obj.offset, obj.size,
                             obj.stride)
        return obj.materialize(path)
    if isinstance(obj, dict):
        out = collections.OrderedDict()
        for k, v in obj.items():
            out[k] = _resolve(v, path)
        return out
    if isinstance(obj, (list, tuple)):
        return type(obj)(_resolve(v, path) for v in obj)
    return obj


def load_state_dict(path):
    """The checkpoint's object (an OrderedDict of name -> numpy array for a state dict)."""
    raw = read_bytes(path, "checkpoint")
    try:
        if raw[:4] == b"PK\x03\x04":
            return _load_zip(raw, path)
        return _load_legacy(raw, path)
    except ModelFormatError:
        raise
    except (pickle.UnpicklingError, EOFError, struct.error, zipfile.BadZipFile, ValueError,
            KeyError, IndexError, TypeError) as error:
        raise ModelFormatError(f"not a readable PyTorch checkpoint ({type(error).__name__}: "
                               f"{error})", path) from None


def _load_zip(raw, path):
    archive = zipfile.ZipFile(io.BytesIO(raw))
    pkl = [n for n in archive.namelist() if n.endswith("data.pkl")]
    if not pkl:
        raise ModelFormatError("the zip checkpoint has no data.pkl", path)
    prefix = pkl[0][: -len("data.pkl")]
    unpickler = _Unpickler(io.BytesIO(archive.read(pkl[0])), path)
    obj = unpickler.load()
    for key, storage in unpickler.storages.items():
        storage.data = np.frombuffer(archive.read(f"{prefix}data/{key}"), storage.dtype)
    return _resolve(obj, path)


def _load_legacy(raw, path):
    stream = io.BytesIO(raw)
    magic = pickle.load(stream)
    if magic != LEGACY_MAGIC:
        raise ModelFormatError("not a PyTorch checkpoint (no zip header, wrong legacy magic "
                               "number)", path)
    pickle.load(stream)                       # protocol version
    pickle.load(stream)                       # system info (endianness, type sizes)
    unpickler = _Unpickler(stream, path)
    obj = unpickler.load()
    keys = pickle.load(stream)
    for key in keys:
        storage = unpickler.storages.get(key)
        (count,) = struct.unpack("<q", stream.read(8))
        itemsize = storage.dtype.itemsize if storage else None
        if storage is None:
            raise ModelFormatError(f"storage {key} is not used by any tensor", path)
        data = stream.read(count * itemsize)
        if len(data) != count * itemsize:
            raise ModelFormatError(f"the checkpoint is truncated in storage {key}", path)
        storage.data = np.frombuffer(data, storage.dtype)
    return _resolve(obj, path)
