"""Which layers keep tensors in memory as IEEE halves (fp16 storage, float32 arithmetic) and
how a numpy dtype names a storage type. One table, read by the runtime's precision choice and
the per-layer benchmark; a layer joins FP16_LAYERS when its kernel takes float16 input, weights
and result (docs/kernels.md "fp16 storage")."""

import numpy as np

STORAGE_OF_DTYPE = {np.dtype(np.float32): "fp32", np.dtype(np.float16): "fp16"}
DTYPE_OF_STORAGE = {storage: dtype for dtype, storage in STORAGE_OF_DTYPE.items()}
# vc4nn.nn functions (= runtime IR ops) by what of theirs may be float16: the activation they
# read, their weights as the kernel reads them (conv2d's travel as 32-bit uniforms: float16
# weights are widened at prepare), their result.
FP16_INPUT = frozenset({"depthwise", "avg_pool", "add", "global_avg_pool", "fully_connected",
                        "pointwise"})
FP16_WEIGHTS = frozenset({"depthwise", "fully_connected", "pointwise"})
FP16_RESULT = frozenset({"depthwise", "avg_pool", "conv2d", "add", "global_avg_pool",
                         "pointwise"})
FP16_LAYERS = FP16_INPUT | FP16_WEIGHTS | FP16_RESULT
