"""Run the same launches on both emulator cores and record everything observable.

``observe(core, scenario, **device_options)`` makes an EmulatorDevice on ``core``, runs
``scenario(device)`` and returns, per launch: the RunResult (cycles, per-QPU instructions,
cycles and stall counters, warnings) or the error (type, message, rule, QPU, PC, unit,
address), the final registers and flags of every QPU, the memory bus's statistics (busy
clocks, V3D and VideoCore L2 hits and misses, write epoch), the instruction caches' hits and
misses, the VPM (its bytes, setups, read
queues and DMAs) and the bytes of every allocation. Two cores are equivalent on a scenario
when the two observations are equal.
"""

import dataclasses
import warnings

import numpy as np

from vc4nn.emulator import EmulatorDevice


def _error_record(error):
    return {"type": type(error).__name__, "message": str(error),
            **{name: getattr(error, name, None) for name in
               ("rule", "qpu", "pc", "unit", "address", "waiting")}}


def _state_record(states):
    if states is None:
        return None
    return [{key: (value.tobytes() if isinstance(value, np.ndarray) else value)
             for key, value in state.items()} for state in states]


def _bus_record(bus):
    return {name: getattr(bus, name) for name in
            ("busy_clocks", "l2_hits", "l2_misses", "vc_l2_hits", "write_epoch")}


def _vpm_record(vpm):
    """The VPM's bytes and what the run left in its units (setups, queues, DMAs)."""
    if vpm is None:
        return None
    setup = lambda s: None if s is None else tuple(getattr(s, n) for n in s.__slots__)  # noqa
    dma = lambda d: None if d is None else (d.qpu, d.kind, d.words.tobytes(), d.complete,  # noqa
                                             d.settled)
    return {"bytes": vpm.bytes.tobytes(),
            "reads": [[setup(s) for s in queue] for queue in vpm._reads],
            "last_read": [setup(s) for s in vpm._last_read], "write": [setup(s) for s in vpm._write],
            "vdr": list(vpm._vdr), "vdr_pitch": list(vpm._vdr_pitch), "vdw": list(vpm._vdw),
            "vdw_stride": list(vpm._vdw_stride), "load": [dma(d) for d in vpm._load],
            "store": [dma(d) for d in vpm._store], "unsettled": [dma(d) for d in vpm._unsettled]}


def _memory(device):
    memory = device.memory
    return [(start, memory._blocks[start].memory.tobytes()) for start in memory._starts]


def observe(core, scenario, **options):
    launches = []
    with EmulatorDevice(core=core, **options) as device:
        machine = device.machine
        machine.keep_final_state = True
        original = machine.run

        def recorded(num_qpus, control_address, timeout):
            record = {}
            try:
                result = original(num_qpus, control_address, timeout)
                record["result"] = dataclasses.asdict(result)
                return result
            except Exception as error:
                record["error"] = _error_record(error)
                raise
            finally:
                record["state"] = _state_record(machine.final_state)
                record["memory"] = _memory(device)
                record["bus"] = _bus_record(machine.bus)
                icache = getattr(machine, "icache", None)
                record["icache"] = None if icache is None else (icache.hits, icache.misses)
                record["vpm"] = _vpm_record(getattr(machine, "vpm", None))
                launches.append(record)

        machine.run = recorded
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                outcome = ("returned", repr(scenario(device)))
            except Exception as error:
                outcome = ("raised", _error_record(error))
    return {"launches": launches, "outcome": outcome}


def assert_equivalent(scenario, **options):
    """Observe ``scenario`` on both cores and assert that everything matches; returns the
    Python core's observation."""
    python = observe("python", scenario, **options)
    c = observe("c", scenario, **options)
    assert len(c["launches"]) == len(python["launches"])
    for i, (p, q) in enumerate(zip(python["launches"], c["launches"])):
        for key in ("error", "result", "state", "memory", "bus"):
            assert q.get(key) == p.get(key), f"launch {i}: {key} differs between the cores"
    assert c["outcome"] == python["outcome"]
    return python
