"""Record a layer call's launches once, relaunch them afterwards without the layer's host work.

A session's layers always run on the same buffers (arena views, prepared weights), so the code,
uniforms and control list a layer call builds are the same on every run. While a call is recorded,
the device's frees are deferred (the call's temporaries: its code, uniforms, control lists and
workspaces stay in device memory) and each launch's control list address is kept; a replay is then
one ``execute_control_list`` per launch, as the mailbox's execute_qpu takes it. This removes the
per-call host work of building uniform streams (about 10 ms per layer on the development machine;
docs/runtime.md), at the price of keeping each layer's code and uniforms in device memory.

A layer call that launched nothing (it computed on the host) is not replayable and is called
again each run. Layer calls of ``vc4nn.nn`` given ``out=`` and device buffers do all their work in
their launches (NN-CONTRACT.md), which is what makes a replay equal to the call.
"""

import contextlib
import functools


@contextlib.contextmanager
def patched(obj, name, replacement):
    """``obj.name`` is ``replacement`` inside the block, whatever it was before (nests)."""
    had = name in vars(obj)
    before = vars(obj).get(name)
    setattr(obj, name, replacement)
    try:
        yield
    finally:
        if had:
            setattr(obj, name, before)
        else:
            delattr(obj, name)


class Recording:
    """The launches of one layer call and the device buffers they need kept."""

    def __init__(self, device):
        self.device = device
        self.launches = []          # (num_qpus, control list address, timeout)
        self.kept = []

    @contextlib.contextmanager
    def capture(self):
        device = self.device
        launch = device._launch

        def recorded_launch(num_qpus, control_address, timeout):
            self.launches.append((num_qpus, control_address, timeout))
            return launch(num_qpus, control_address, timeout)

        with patched(device, "_launch", recorded_launch), patched(device, "free",
                                                                  self.kept.append):
            yield self

    def replay(self):
        """The RunResult of relaunching every recorded launch, in order."""
        runs = [self.device.execute_control_list(n, address, timeout)
                for n, address, timeout in self.launches]
        return functools.reduce(lambda first, then: first.followed_by(then), runs)

    @property
    def nbytes(self):
        return sum(int(getattr(getattr(b, "allocation", b), "size", 0)) for b in self.kept)

    def free(self):
        kept, self.kept = self.kept, []
        for buf in kept:
            self.device.free(buf)

    def forget(self):
        """Free what the call kept and drop its launches: the call is no longer replayable."""
        self.free()
        self.launches = []
