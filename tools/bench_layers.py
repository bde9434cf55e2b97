#!/usr/bin/env python3
"""Every layer of MobileNet v1 and v2 in the emulator's cycle model: the same as
``vc4nn bench-layers`` (options and what every column means: ``--help``)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vc4nn.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["bench-layers"] + sys.argv[1:]))
