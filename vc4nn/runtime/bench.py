"""Time per inference: GPU time (cycle-model estimate in the emulator, measured on a Pi) plus the
host's own work per inference (the runtime's loop and replays, launches excluded).

Host work is measured on this machine by running the session with every launch answered at once
by the result it gave in a real run (``host_work``): what is left is the runtime's own Python.
In the emulator the Pi backend's own launch code (mailbox message or V3D register writes) does
not run, so it is timed apart on an instant OS boundary (``backend_host_work``) and added. For a
Pi Zero both are scaled by ``PI_ZERO_HOST_FACTOR``, an assumption (not a measurement): a 1 GHz
ARM1176 runs CPython about 20-30 times slower than a current x86 core. The figure is labelled
as such.
"""

import contextlib
import itertools
import statistics
import time

from .profile import memory_text, summarize
from .replay import patched

PI_ZERO_HOST_FACTOR = 25.0
HOST_RUNS = 20


@contextlib.contextmanager
def launch_timer(device):
    """(wall seconds spent inside the device's launches, their RunResults), filled on exit."""
    spent, results = [0.0], []
    launch = device._launch

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            result = launch(*args, **kwargs)
            results.append(result)
            return result
        finally:
            spent[0] += time.perf_counter() - start
    with patched(device, "_launch", timed):
        yield spent, results


def host_work(sess, feed, results, runs=HOST_RUNS):
    """Median wall seconds of ``runs`` runs whose launches return at once (``results`` in turn)."""
    answers = itertools.cycle(results)
    walls = []
    with patched(sess.device, "_launch", lambda *args: next(answers)):
        for _ in range(runs):
            start = time.perf_counter()
            sess.run(None, feed)
            walls.append(time.perf_counter() - start)
    return statistics.median(walls)


def backend_host_work(launch_path, results, runs=HOST_RUNS):
    """Host seconds the Pi backend's own code spends launching the launches that reported
    ``results`` (one execute_control_lists call), on the ``launch_path``: the emulator does not
    run that code, so it is timed on an instant OS boundary (``vc4nn.pi.host_cost``)."""
    from ..pi.host_cost import seconds_per_launch
    per_launch, _ = seconds_per_launch(launch_path, [r.num_qpus for r in results], runs=runs)
    return per_launch * len(results)


def launch_probe(device, num_qpus, repeats=20):
    """(device seconds, host wall seconds) of launching an empty program on ``num_qpus`` QPUs:
    what each of a model's launches costs beyond its kernel's work."""
    from asm import kernel

    @kernel
    def empty(a):
        a.exit()
    program = empty.assemble()
    start = time.perf_counter()
    for _ in range(repeats):
        result = device.execute(program, num_qpus=num_qpus)
    return result.seconds, (time.perf_counter() - start) / repeats


def _timed_run(sess, feed):
    """(wall seconds, of them outside the launches, the launches' RunResults, CPU seconds of
    this process) of one run."""
    with launch_timer(sess.device) as (spent, results):
        start, cpu = time.perf_counter(), time.process_time()
        sess.run(None, feed)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return wall, wall - spent[0], results, cpu


def bench(sess, runs=None):
    feed = {sess.get_inputs()[0].name: _zeros(sess)}
    timed = [_timed_run(sess, feed)]
    estimated = summarize(sess.profile())["estimated"]
    runs = runs or (1 if estimated else 20)
    timed += [_timed_run(sess, feed) for _ in range(runs - 1)]
    walls, outside = [t[0] for t in timed], [t[1] for t in timed]
    records = sess.profile()                               # the last timed run's layers
    total = summarize(records)
    host = host_work(sess, feed, timed[-1][2])
    gpu = total["device_seconds"]
    path = sess.device.launch_path
    report = {"model": sess.path, "device": sess.device.name, "launch_path": path,
              "qpus": sess.num_qpus,
              "layers": total["layers"], "launches": total["launches"],
              "gpu_seconds": gpu, "gpu_estimated": estimated,
              "host_seconds_this_machine": host,
              "host_seconds_outside_launches": statistics.median(outside), "runs": runs,
              "load_seconds": getattr(sess, "load_seconds", None),
              "load_cpu_seconds": getattr(sess, "load_cpu_seconds", None),
              "program_cache": getattr(sess, "program_cache_stats", None),
              "memory": sess.memory()}
    chained = report["chained_layers"] = total["chained_layers"]
    grouping = f"; {chained} layers ran in the launch of the layer before them" if chained \
        else ""
    lines = [f"{sess.path}: {total['layers']} layers, {total['launches']} launches "
             f"({path} path{grouping}), {total['flops'] / 1e6:.1f} MFLOP"]
    if report["load_seconds"] is not None:
        cache = report["program_cache"]
        lines.append(f"load: {report['load_seconds']:.2f} s wall, "
                     f"{report['load_cpu_seconds']:.2f} s CPU" + (
            "" if cache is None else f" (programs: {cache['hits']} from the disk cache, "
                                     f"{cache['misses']} assembled; {cache['folder']})"))
    probe_device, probe_host = launch_probe(sess.device, sess.num_qpus)
    report["launch_probe"] = {"device_seconds": probe_device, "host_seconds": probe_host}
    if probe_device is not None:
        kind = "cycle model" if estimated else "measured"
        lines.append(f"launches: {total['launches']} by the {path} path; an empty launch on "
                     f"{sess.num_qpus} QPUs "
                     f"takes {probe_device * 1e6:.0f} us of device time ({kind}) and "
                     f"{probe_host * 1e6:.0f} us of host wall time here, so launching costs "
                     f"about {probe_device * total['launches'] * 1e3:.2f} ms per inference")
    if estimated:
        backend = report["backend_host_seconds_this_machine"] = \
            backend_host_work(path, timed[-1][2])
        pi_host = (host + backend) * PI_ZERO_HOST_FACTOR
        report["host_seconds_pi_zero_estimate"] = pi_host
        report["total_seconds_estimate"] = (gpu or 0) + pi_host
        timing = getattr(sess.device, "timing", None)
        overhead = report["launch_overhead_s"] = getattr(timing, "launch_overhead", None)
        each = "" if overhead is None else f": {total['launches']} x {overhead * 1e6:.0f} us"
        lines += [f"GPU: {gpu * 1e3:.2f} ms per inference (cycle-model estimate, {path} launch "
                  f"overhead included{each})",
                  f"host work per inference: {host * 1e3:.2f} ms of the runtime on this "
                  f"machine (median of {HOST_RUNS} runs with the launches answered at once) + "
                  f"{backend * 1e3:.2f} ms of the Pi backend's launch code ({path} path, "
                  f"timed on an instant OS boundary), about {pi_host * 1e3:.1f} ms on a Pi "
                  f"Zero's 1 GHz ARM core (assumed {PI_ZERO_HOST_FACTOR:.0f}x slower; an "
                  f"estimate)",
                  f"end to end on a Pi Zero: about {report['total_seconds_estimate'] * 1e3:.1f} "
                  f"ms (estimate)"]
        cpu = report["emulation_cpu_seconds"] = statistics.median(t[3] for t in timed)
        lines.append(f"emulating one inference took {cpu:.1f} s of CPU here")
    else:
        report["wall_seconds_median"] = statistics.median(walls)
        lines += [f"measured over {runs} runs ({path} launches): "
                  f"{statistics.median(walls) * 1e3:.2f} ms per inference (median), of which "
                  f"host work {host * 1e3:.2f} ms"]
    lines.append(memory_text(report["memory"]))
    report["lines"] = lines
    return report


def _zeros(sess):
    import numpy as np
    i = sess.get_inputs()[0]
    return np.zeros(i.shape, i.type)
