"""`vc4nn tune`'s search: the legal tilings of a layer, each run in the cycle model, the fastest
kept in the tuned-plan cache (vc4nn/nn/tuned_plans.py) under the layer's key and board.

What is searched (the generators' tiling fields):
  pointwise: the route, i.e. pixels per QPU (``max_rows`` 8..2: fewer re-read the weights
    more often but can dodge TMU cache aliasing) and whether the activation is transposed on the
    GPU first (``transpose_input``), each row count on both; and the panel width
    (``panel_vectors``, each of PANEL_WIDTHS on its own default route); each of them also with
    the weights DMA'd instead of gathered (``gather_weights``); and the default with every
    pass of the same rows (``balance_passes``), without the leftover pixels spread one
    vector per QPU (``spread_rows``), with those pieces on every QPU instead of the
    leaves only (``spread_leaves``), with A gathered one k at a time (``pair_gathers``),
    without rows parked for the next pass (``park_rows``), with other chunk depths
    (``chunk_depth``: PointwisePlan.depths) and with or without staggered retirement
    (``stagger``);
  depthwise: tile width (``tile_cols``, up to what the accumulator registers hold) and tile
    height (``tile_rows``: from one tile per QPU to six), with the VPM chunks that fit each;
    every candidate also with the other loop shape (``rolled``: one output row per iteration,
    or a period of rows unrolled); the default also with the other order of the tiles over
    the QPUs (``by_variant``) and with or without split accumulators (``split_accumulators``:
    14-column strips at stride 1, or 10 at most), each on its default tiling.
A depthwise layer is also tuned over the QPUs it spreads over (``max_qpus``: its load and
staging buffers grow as they shrink). Layers handed over channel-major (vc4nn/nn/handoff.py:
``layouts``) are tuned as they run: a "chw" pointwise layer over its rows per QPU and panel
widths (its route is the transposed one).
Every candidate is the resolved tiling of a plan that it rebuilds as it is (``replayed``): the
record `vc4nn tune` writes must give the layer functions the plan that was measured (the parking
default, say, takes fewer rows per QPU than its route: its tiling says so). A wanted tiling that
cannot be built, or whose run fails, is skipped with its reason; a layer whose default plan
cannot be is not tuned (TuneError, reported), and the others still are.
A layer is tuned in the storage it runs in (``storage``: "fp16" tunes the fp16 kernels'
plans, which have keys of their own: the storage fields are part of the plan's shape).
Conv2d (``taps_per_pass``) is not searched: its weights are laid out for one value by
``prepare_conv2d`` before the input's shape is known, so a per-shape choice could not reach them.

Pointwise candidates may run on fewer pixels (``pixels``): the route moves the same rows per
pass whatever the pixel count, so their ranking carries over (docs/kernels.md); the record says
what it was measured on. Depthwise candidates run at full size: tile heights only mean
something against the layer's real height.
"""

import dataclasses
import datetime

from ..errors import Vc4nnError
from ..kernels.pointwise import PANEL_WIDTHS, PointwisePlan
from .layer_figures import Reduction, measure_layer
from .layer_plans import TUNABLE, plan_for, resolved_tiling
from .tuned_plans import TuneCache, board_of, plan_key

# Pixels per QPU. A reduced run (96 pixels) tries only those that divide it into whole passes
# of 12 QPUs, so that it runs the rows per QPU the full layer would (6 would run as 4); a full
# run tries every count: fewer rows can fill the last pass better (196 pixels: 3 passes of 8
# rows leave the third nearly empty, 3 passes of 6 do not).
POINTWISE_ROWS_REDUCED = (8, 4, 2)
POINTWISE_ROWS_FULL = (8, 7, 6, 5, 4, 3, 2)
TILES_PER_QPU = (1, 2, 3, 4, 6)
# QPUs a depthwise layer may spread over (the default: as many as hold its chunks, "chw": a
# whole tile row staged; 4-5 were up to 5% faster on some v1 layers, docs/kernels.md).
SPREADS = (3, 4, 5, 6, 8, 12)


class TuneError(Vc4nnError):
    """A layer that cannot be tuned: its default plan cannot be built, replayed or run."""


@dataclasses.dataclass
class TuneResult:
    layer: object
    key: str
    default: dict               # resolved tiling of the default plan
    default_clocks: float       # scaled to the full layer
    best: dict
    best_clocks: float
    tried: list                 # [(tiling, clocks scaled)] in the order run
    run_shape: str
    scale: float
    clock_hz: float

    @property
    def speedup(self):
        return self.default_clocks / self.best_clocks

    def record(self):
        return {"tiling": self.best, "clocks": self.best_clocks,
                "default_tiling": self.default, "default_clocks": self.default_clocks,
                "measured_on": self.run_shape, "scale": self.scale, "candidates": len(self.tried),
                "estimate": "cycle model",
                "when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def candidates(layer, height, width, num_qpus, device, reduced=False, layout="hwc",
               storage="fp32", skipped=None):
    """Resolved tilings to try, the default first, no two the same, each a legal plan that it
    rebuilds (``replayed``). ``skipped``: a list that gets (wanted tiling, why) for each one
    left out because its plan cannot be built or replayed. TuneError if the default's cannot."""
    default, _ = plan_for(layer, height, width, num_qpus, device, {}, storage, layout)
    if layer.kind == "pointwise":
        rows = POINTWISE_ROWS_REDUCED if reduced else POINTWISE_ROWS_FULL
        routes = (True,) if layout == "chw" else (False, True)
        wanted = [{"transpose_input": t, "max_rows": r} for t in routes for r in rows]
        wanted += [{"panel_vectors": vectors} for vectors in PANEL_WIDTHS]
        wanted += [dict(tiling, gather_weights=False) for tiling in wanted]
        wanted += [{"balance_passes": False}, {"spread_rows": False}, {"spread_leaves": False},
                   {"pair_gathers": False}, {"park_rows": 0}, {"stagger": not default.staggers}]
        wanted += [{"chunk_depth": depth} for depth in default.depths()]
    elif layer.kind == "depthwise":
        wanted = depthwise_tilings(default, num_qpus)
        wanted += [{"max_qpus": qpus} for qpus in SPREADS if qpus <= num_qpus]
        wanted += [dict(tiling, rolled=not default.rolled) for tiling in wanted]
        wanted += [{"by_variant": 1 - default.by_variant, "rolled": rolled}
                   for rolled in (False, True)]
        wanted.append({"split_accumulators": 1 - default.split_accumulators})
        if default.can_halve_load_rows:
            wanted.append({"half_row_buffers": 1 - default.half_row_buffers})
    else:
        raise Vc4nnError(f"layer {layer.name}: {layer.kind} layers have no tiling to tune "
                         f"(tunable: {', '.join(TUNABLE)})")
    out = []
    for tiling in [{}] + wanted:
        resolved, why = replayed(layer, height, width, num_qpus, device, tiling, storage, layout)
        if why and not out:
            raise TuneError(f"layer {layer.name}: its default plan {why}")
        if why:
            if skipped is not None:
                skipped.append((tiling, why))
        elif resolved not in out:
            out.append(resolved)
    return out


def replayed(layer, height, width, num_qpus, device, tiling, storage="fp32", layout="hwc"):
    """(resolved tiling, None) of the plan ``tiling`` gives, where that resolved tiling,
    given as a tiling (a tuned record), rebuilds the same plan; else (None, why)."""
    def build(fields):
        return plan_for(layer, height, width, num_qpus, device, fields, storage, layout)[0]

    try:
        plan = build(tiling)
        resolved = resolved_tiling(plan)
    except (Vc4nnError, ValueError) as error:
        return None, f"cannot be built: {error}"
    try:
        again = build(resolved)
        rebuilt = resolved_tiling(again)
    except (Vc4nnError, ValueError) as error:
        return None, f"has a resolved tiling {resolved} that cannot be built again: {error}"
    if rebuilt != resolved or (isinstance(plan, PointwisePlan) and
                               (again.panel, again.transposed) != (plan.panel, plan.transposed)):
        return None, f"has a resolved tiling {resolved} that builds another plan ({rebuilt})"
    return resolved, None


def depthwise_tilings(default, num_qpus):
    """Tile widths around the default's and tile heights giving 1..6 tiles per QPU (the
    chunk fields left to their defaults for each)."""
    widest = max(1, min(default.accumulators // default.acc_sets, default.out_w))
    widths = sorted({default.tile_cols, max(1, default.tile_cols // 2), min(4, widest),
                     min(8, widest), widest})
    out = []
    for cols in widths:
        strips = default.blocks * -(-default.out_w // cols)
        out.append({"tile_cols": cols, "tile_rows": default.out_h})     # one tile per strip
        for per_qpu in TILES_PER_QPU:
            splits = max(1, min(default.out_h, -(-per_qpu * num_qpus // strips)))
            out.append({"tile_cols": cols, "tile_rows": -(-default.out_h // splits)})
    return out


def tune_layer(layer, device, num_qpus=12, pixels=0, progress=None, layout="hwc",
               storage="fp32"):
    """Run every candidate tiling of ``layer`` (its result, for a depthwise layer, or its
    input, for a pointwise one, in ``layout``; activations and weights in ``storage``); the
    TuneResult (nothing stored)."""
    reduction = Reduction(pixels=pixels if layer.kind == "pointwise" else 0)
    full_plan, _ = plan_for(layer, layer.height, layer.width, num_qpus, device, {}, storage,
                            layout)
    key = plan_key(full_plan, board_of(device))
    run = None
    tried = []
    reduced = layer.kind == "pointwise" and 0 < pixels < layer.height * layer.width
    report = progress or (lambda line: None)
    skipped = []
    tilings = candidates(layer, layer.height, layer.width, num_qpus, device, reduced, layout,
                         storage, skipped)
    for tiling, why in skipped:
        report(f"  {layer.name} {tiling}: skipped, its plan {why}")
    for tiling in tilings:
        try:
            figures = measure_layer(layer, device, num_qpus, reduction, tiling, storage=storage,
                                    layout=layout)
        except (Vc4nnError, ValueError) as error:
            if not tried:
                on = f" on {pixels} pixels (--pixels)" if reduced else ""
                raise TuneError(f"layer {layer.name}: its default plan cannot run{on}: "
                                f"{error}") from error
            report(f"  {layer.name} {tiling}: skipped, its run failed: {error}")
            continue
        tried.append((tiling, figures.full_clocks))
        run = run or figures
        report(f"  {layer.name} {tiling}: {figures.full_clocks:.0f} clocks"
               f"{'' if figures.scale == 1 else ' (scaled)'}")
    best, best_clocks = min(tried, key=lambda t: t[1])
    return TuneResult(layer, key, tried[0][0], tried[0][1], best, best_clocks, tried,
                      run.run_shape, run.scale, run.clock_hz)


def tune_layers(layers, device, cache_path=None, num_qpus=12, pixels=0, progress=None,
                layouts=None, storage="fp32"):
    """Tune each tunable layer (one per distinct plan key) and store each winner as soon as it
    is found: [TuneResult] (a layer that cannot be tuned, TuneError, is reported through
    ``progress`` and left out). ``layouts``: {layer: "chw"} for the layers handed over
    channel-major (vc4nn/nn/handoff.py); ``storage``: that of the activations and weights."""
    cache = TuneCache(cache_path)
    results, seen = [], {}
    for layer in layers:
        if layer.kind not in TUNABLE:
            continue
        layout = (layouts or {}).get(layer, "hwc")
        plan, _ = plan_for(layer, layer.height, layer.width, num_qpus, device, {}, storage,
                           layout)
        key = plan_key(plan, board_of(device))
        if key not in seen:
            try:
                seen[key] = tune_layer(layer, device, num_qpus, pixels, progress, layout,
                                       storage)
            except TuneError as error:
                seen[key] = error
            else:
                cache.put(key, seen[key].record())
                cache.save()
        if isinstance(seen[key], TuneError):
            if progress:
                progress(f"{layer.name}: not tuned ({seen[key]})")
            continue
        results.append(dataclasses.replace(seen[key], layer=layer))
    return results
