"""Layer calls recorded without running and chained into one launch, as a session chains its
launch groups (vc4nn/runtime/replay_chain.py), for tests of the chain itself."""

from vc4nn.runtime.replay import CodePool, Recording
from vc4nn.runtime.replay_chain import Chain, WordWriter, chainable


class Chained:
    """Layer calls recorded without running, then chained into one launch."""

    def __init__(self, device, calls):
        self.device, self.pool, self.recordings = device, CodePool(device), []
        for call in calls:
            recording = Recording(device)
            with recording.capture(run=False):
                call()
            recording.pack(self.pool)
            self.recordings.append(recording)
        code = {buf.address: key for key, buf in self.pool.programs.items()}
        write = WordWriter([b for r in self.recordings for b in r.buffers()])
        self.launches = [part for r in self.recordings
                         for part in chainable(r, code.get, write)]
        self.chain = Chain(device, self.pool, self.launches, write)
        self.chain.link()

    def run(self):
        return self.device.execute_control_list(*self.chain.pair, timeout=self.chain.timeout)

    def run_apart(self):
        """The same recorded launches one by one (chain words back to 0)."""
        self.chain.unlink()
        try:
            return [self.device.execute_control_list(n, control, timeout)
                    for r in self.recordings for n, control, timeout in r.launches]
        finally:
            self.chain.link()

    def free(self):
        self.chain.free()
        for recording in self.recordings:
            recording.free()
        self.pool.free()
