"""The README's kernel tour runs as written and computes what it says."""

import os
import re

import numpy as np

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def test_tour_kernel_runs_and_adds_one(capsys):
    text = open(README, encoding="utf-8").read()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "README has no python block"
    namespace = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)
    data, result = namespace["data"], namespace["result"]
    assert np.array_equal(np.asarray(data), np.arange(64, dtype=np.uint32).reshape(4, 16) + 1)
    assert result.host_interrupts == 1 and result.cycles > 0
