"""Recording a call's launches and replaying them (``vc4nn.runtime.replay``), on a real program:
the replay does what the call did, the call's temporaries stay alive until the recording is
freed, and patching the device nests."""

import numpy as np

import vc4nn
from asm import kernel, r0, ra, uniform, vpm
from vc4nn.runtime.replay import Recording, patched


@kernel
def add_one(a, n_rows):
    a.mov(ra[0], uniform)
    a.setup_dma_load(rows=n_rows, rowlen=16, y=0)
    a.start_dma_load(ra[0])
    a.wait_dma_load()
    a.setup_vpm_read(num=n_rows, y=0)
    a.setup_vpm_write(y=0)
    for _ in range(n_rows):
        a.mov(r0, vpm)
        a.add(vpm, r0, 1)
    a.setup_dma_store(units=n_rows, depth=16, y=0)
    a.start_dma_store(ra[0])
    a.wait_dma_store()
    a.exit()


def test_replay_repeats_the_call_and_keeps_its_temporaries():
    program = add_one.assemble(n_rows=2)
    with vc4nn.open_device() as device:
        data = device.array(np.zeros((2, 16), np.uint32))
        baseline = len(device._allocations)

        def layer_call():                 # like a layer: code and uniforms placed per call
            return device.execute(program, num_qpus=1, uniforms=[[data.address]])

        recording = Recording(device)
        with recording.capture():
            layer_call()
        assert len(recording.launches) == 1 and recording.nbytes > 0
        assert len(device._allocations) > baseline        # code, uniforms, control list kept
        for _ in range(3):         # a replay, as a session's run schedules it
            (run,) = device.execute_control_lists(recording.launches)
        assert run.host_interrupts == 1
        assert (np.asarray(data) == 4).all()               # 1 call + 3 replays
        recording.free()
        assert len(device._allocations) == baseline


def test_patched_restores_instance_attributes_when_nested():
    class Thing:
        def f(self):
            return "class"
    t = Thing()
    with patched(t, "f", lambda: "outer"):
        with patched(t, "f", lambda: "inner"):
            assert t.f() == "inner"
        assert t.f() == "outer"
    assert t.f() == "class" and "f" not in vars(t)


def test_recorded_stream_lengths_are_the_words_execute_placed():
    """The lengths chaining relies on (the last word of each QPU's stream) are counted, not
    encoded: they must equal the streams Device.execute placed, read back from the control list."""
    program = add_one.assemble(n_rows=1)
    with vc4nn.open_device() as device:
        given = device.array(np.arange(3, dtype=np.uint32))
        uniforms = [None, [], [1.5, -1, (1 << 32) - 1, given], given, np.arange(5, dtype=np.int32)]
        recording = Recording(device)
        with recording.capture(run=False):
            device.execute(program, num_qpus=len(uniforms), uniforms=uniforms)
        (num_qpus, control, _), = recording.launches
        entries = np.frombuffer(recording.placed[control].tobytes(), "<u4").reshape(num_qpus, 2)
        placed = [recording.placed[int(address)].nbytes // 4 if int(address) != given.address
                  else given.nbytes // 4 for address, _ in entries]
        assert placed == [1, 1, 4, 3, 5]
        assert recording.stream_words == [placed]
        recording.free()
