"""Which layers keep tensors in memory as IEEE halves (fp16 storage, float32 arithmetic) and
how a numpy dtype names a storage type. One table, read by the runtime's precision choice and
the per-layer benchmark; a layer joins FP16_LAYERS when its kernel takes float16 input, weights
and result (docs/kernels.md "fp16 storage")."""

import numpy as np

STORAGE_OF_DTYPE = {np.dtype(np.float32): "fp32", np.dtype(np.float16): "fp16"}
DTYPE_OF_STORAGE = {storage: dtype for dtype, storage in STORAGE_OF_DTYPE.items()}
# vc4nn.nn functions (= runtime IR ops) whose input, weights and result may each be float16.
FP16_LAYERS = frozenset({"depthwise", "avg_pool"})
