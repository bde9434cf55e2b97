"""A progress bar for long emulated work: instructions executed, rate and (when the caller can
estimate the total) what remains.

The emulator calls ``device.progress(executed)`` every ``PROGRESS_INTERVAL`` instructions of a
launch (vc4nn.emulator.machine); a Pi runs too fast and reports nothing, so there is no bar.
The bar appears only once the work has run for ``DELAY_S`` seconds: short runs stay silent.
"""

import sys

DELAY_S = 1.0


class InstructionProgress:
    """``with InstructionProgress(device, total=None, quiet=False, what="sgemm"):`` shows a tqdm
    bar on stderr while the block runs work on ``device``. Counts add up over launches."""

    def __init__(self, device, total=None, quiet=False, what="run", file=None):
        self.device, self.total, self.what = device, total, what
        self.enabled = not quiet and hasattr(device, "progress")
        self.file = file if file is not None else sys.stderr
        self._bar = None
        self._previous = None
        self._done_before = 0   # instructions of the launches that ended
        self._last = 0          # last count reported by the current launch

    def __enter__(self):
        if self.enabled:
            try:
                from tqdm import tqdm
            except ImportError:     # a dependency of the package; without it, no bar
                return self
            self._bar = tqdm(total=self.total, desc=self.what, unit=" instr", unit_scale=True,
                             delay=DELAY_S, file=self.file, leave=False, dynamic_ncols=True)
            self._previous = self.device.progress
            self.device.progress = self._update
        return self

    def _update(self, executed):
        if executed < self._last:          # a new launch began; the count restarts at 0
            self._done_before += self._last
        self._last = executed
        self._bar.update(self._done_before + executed - self._bar.n)

    def __exit__(self, *exc):
        if self._bar is not None:
            self.device.progress = self._previous
            self._bar.close()
        return False
