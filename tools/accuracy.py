#!/usr/bin/env python3
"""fp16 storage and precision="auto" against float32 on photos and synthetic images: the same as
``vc4nn accuracy`` (options: ``--help``; what each figure means: vc4nn/runtime/accuracy.py).

    python tools/accuracy.py /tmp/mnv2.onnx -n 8 --png growth.png
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vc4nn.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["accuracy"] + sys.argv[1:]))
