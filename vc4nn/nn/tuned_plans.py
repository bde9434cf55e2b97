"""The tuned-plan cache: the tiling `vc4nn tune` found fastest, per layer shape and board.

A JSON file maps a key (layer kind, the exact shape and options of the layer, QPU count, board)
to a record ``{"tiling": {plan field: value}, "clocks": ..., "default_clocks": ..., ...}``. The
layer functions call ``tuned_tiling`` when no explicit ``tiling=`` is given and build their plan
with it; nothing in the cache changes results, only the tiling (every tiling is a legal plan).

Location: the ``path`` argument, else the environment variable ``VC4NN_TUNE_CACHE`` (``off``
disables the cache), else ``$XDG_CACHE_HOME/vc4nn/tuned-plans.json`` (``~/.cache`` when unset).
A cache file that cannot be read or parsed is a warning (TuneCacheWarning) and counts as empty:
a damaged cache never stops a network from running; `vc4nn tune` rewrites it whole. Each record
carries the version it was measured with (``plans_version``: the kernels' source and the whole
emulator, Python and C, whose cycle model timed it); a record of another version is stale, since
the winner may have changed with the generators or the model, and is ignored with one warning
per file.
"""

import dataclasses
import functools
import hashlib
import json
import os
import warnings

from ..errors import Vc4nnError
from ..source_version import emulator_version, generator_version
from ..user_cache import user_cache_path

ENV_VAR = "VC4NN_TUNE_CACHE"
FILE_NAME = "tuned-plans.json"
FORMAT = 1


class TuneCacheWarning(UserWarning):
    """The tuned-plan cache file could not be used (it is then ignored)."""


class TuneCacheError(Vc4nnError):
    """The tuned-plan cache file could not be written."""


@functools.lru_cache(maxsize=1)
def plans_version():
    """What a record's timings depend on: the program generators (the program cache's version)
    and the whole emulator, Python and C core, whose cycle model measured them."""
    text = f"{generator_version()}\n{emulator_version()}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cache_path(path=None):
    """The cache file to use, or None when the cache is switched off (VC4NN_TUNE_CACHE=off)."""
    return user_cache_path(path, ENV_VAR, FILE_NAME)


def board_of(device):
    """The board a device's timing belongs to: the emulator's preset, or the Pi's board name."""
    timing = getattr(device, "timing", None)
    if timing is not None:
        return timing.name
    board = getattr(device, "board", None)
    return getattr(board, "name", None) or str(board)


def layer_key(kind, shape, num_qpus, board):
    """The cache key: kind, every shape/option field (sorted), QPU count and board, as one
    string (JSON object keys must be strings)."""
    fields = ",".join(f"{name}={_plain(value)}" for name, value in sorted(shape.items()))
    return f"{kind}|{fields}|qpus={num_qpus}|board={board}"


def _plain(value):
    return list(value) if isinstance(value, tuple) else value


class TuneCache:
    """The records of one cache file, loaded at construction."""

    def __init__(self, path=None):
        self.path = cache_path(path)
        self.records = {}
        if self.path is not None and os.path.exists(self.path):
            self.records = _load(self.path)

    def get(self, key):
        return self.records.get(key)

    def put(self, key, record):
        self.records[key] = dict(record, version=plans_version())

    def save(self):
        """Write the file whole (a temporary file renamed over it: never half-written)."""
        if self.path is None:
            raise TuneCacheError(f"the tuned-plan cache is switched off ({ENV_VAR}=off); "
                                 f"give a cache path to store results")
        directory = os.path.dirname(os.path.abspath(self.path))
        temporary = f"{self.path}.{os.getpid()}.tmp"
        try:
            os.makedirs(directory, exist_ok=True)
            with open(temporary, "w") as f:
                json.dump({"format": FORMAT, "plans": self.records}, f, indent=1, sort_keys=True)
            os.replace(temporary, self.path)
        except OSError as error:
            raise TuneCacheError(f"cannot write the tuned-plan cache {self.path}: {error}") \
                from error


def _load(path):
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as error:
        warnings.warn(f"tuned-plan cache {path} is unreadable ({error}); using default plans "
                      f"(`vc4nn tune` rewrites it)", TuneCacheWarning, stacklevel=3)
        return {}
    plans = data.get("plans") if isinstance(data, dict) else None
    if not isinstance(plans, dict) or data.get("format") != FORMAT:
        warnings.warn(f"tuned-plan cache {path} is not a format-{FORMAT} cache; using default "
                      f"plans (`vc4nn tune` rewrites it)", TuneCacheWarning, stacklevel=3)
        return {}
    good = {key: record for key, record in plans.items()
            if isinstance(record, dict) and isinstance(record.get("tiling"), dict)}
    if len(good) != len(plans):
        warnings.warn(f"tuned-plan cache {path}: {len(plans) - len(good)} malformed record(s) "
                      f"ignored", TuneCacheWarning, stacklevel=3)
    current = {key: record for key, record in good.items()
               if record.get("version") == plans_version()}
    if len(current) != len(good):
        warnings.warn(f"tuned-plan cache {path}: {len(good) - len(current)} record(s) were tuned "
                      f"with other kernels or another cycle model and are ignored (default "
                      f"plans for those layers; `vc4nn tune` measures them again)",
                      TuneCacheWarning, stacklevel=3)
    return current


# The fields of each plan class that are tiling choices (what `vc4nn tune` searches); every other
# field except the QPU count is part of the layer's shape and options, hence of the key.
TILING_FIELDS = {
    "PointwisePlan": ("transpose_input", "max_rows", "panel_vectors", "gather_weights",
                      "balance_passes", "spread_rows", "spread_leaves", "pair_gathers",
                      "park_rows", "chunk_depth", "stagger"),
    "WindowPlan": ("tile_cols", "tile_rows", "in_chunk", "out_chunk", "buffers", "store_buffers",
                   "max_qpus", "rolled", "by_variant", "channel_pairs", "split_accumulators",
                   "half_row_buffers"),
    "Conv2dPlan": ("taps_per_pass", "lanes"),
}


def plan_kind(plan):
    """"pointwise", "depthwise", "avg_pool" or "conv2d": the layer a plan belongs to."""
    return {"PointwisePlan": "pointwise", "Conv2dPlan": "conv2d"}.get(type(plan).__name__) \
        or plan.op


# Layout fields added after caches were written: at their NHWC default they stay out of the key,
# so the records of NHWC layers keep their keys.
LAYOUT_FIELDS = {"out_layout": "hwc", "input_layout": "hwc"}


def plan_shape(plan):
    """The plan's shape and option fields (the key's part that names the layer)."""
    tiling = TILING_FIELDS[type(plan).__name__]
    return {f.name: getattr(plan, f.name) for f in dataclasses.fields(plan)
            if f.name not in tiling and f.name != "num_qpus"
            and not (f.name in LAYOUT_FIELDS and getattr(plan, f.name) == LAYOUT_FIELDS[f.name])}


def plan_tiling(plan):
    """The plan's tiling fields as they are set (0 / None: the generator's default)."""
    return {name: getattr(plan, name) for name in TILING_FIELDS[type(plan).__name__]}


def plan_key(plan, board):
    return layer_key(plan_kind(plan), plan_shape(plan), plan.num_qpus, board)


def tuned_plan(plan, device, path=None):
    """``plan`` with the tiling the cache holds for it on ``device``'s board (unchanged when
    the cache has none): the one lookup the layer functions make."""
    tiling = tuned_tiling(plan_kind(plan), plan_shape(plan), plan.num_qpus, device, path)
    if not tiling:
        return plan
    try:
        tuned = with_tiling(plan, tiling)
        validate(tuned)
    except (Vc4nnError, TypeError, ValueError) as error:
        warnings.warn(f"tuned-plan cache {cache_path(path)}: the record for this "
                      f"{plan_kind(plan)} layer is not a legal plan ({error}); using the "
                      f"default plan", TuneCacheWarning, stacklevel=3)
        return plan
    return tuned


def with_tiling(plan, tiling):
    """``plan`` with ``tiling`` as if the layer function had been given it: the tiling fields
    it leaves out are chosen anew for it, not kept as ``plan`` resolved them for its own
    tiling (a depthwise record of tile_cols alone takes the tile height, chunks and QPUs of
    that width)."""
    unset = {f.name: f.default for f in dataclasses.fields(plan)
             if f.name in TILING_FIELDS[type(plan).__name__]
             and f.default is not dataclasses.MISSING}
    tuned = dataclasses.replace(plan, **dict(unset, **tiling))
    return tuned.with_defaults() if hasattr(tuned, "with_defaults") else tuned


def validate(plan):
    """Raise if the plan's tiling is illegal (the generators' own checks)."""
    if hasattr(plan, "check"):
        plan.check()
    else:
        plan.panel      # noqa: B018 (PointwisePlan: the panel plan checks its rows)


_loaded = {}        # path -> (modification time, size, TuneCache)


def tuned_tiling(kind, shape, num_qpus, device, path=None):
    """The tuned tiling {plan field: value} of a layer on ``device``'s board, or None. The file
    is read once and again only when it changes."""
    path = cache_path(path)
    if path is None:
        return None
    try:
        stat = os.stat(path)
    except OSError:
        return None
    stamp = (stat.st_mtime_ns, stat.st_size)
    cached = _loaded.get(path)
    if cached is None or cached[0] != stamp:
        cached = _loaded[path] = (stamp, TuneCache(path))
    record = cached[1].get(layer_key(kind, shape, num_qpus, board_of(device)))
    return None if record is None else dict(record["tiling"])
