"""The cycle model's parameter table and board presets."""

import math
import pathlib

import numpy as np
import pytest

from vc4nn.emulator import timing
from vc4nn.emulator.timing import BOARDS, PARAMETERS, Timing
from vc4nn.errors import Vc4nnError

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "cycle-model.md"


# Where a value may come from: a section of the fact sheet, one of its source keys (e.g. "ADD",
# the vc4asm errata, for cache geometry the sheet does not list), a labelled assumption, or
# "calibrated:" naming the published measurement it was fitted to (tools/calibrate.py).
SOURCE_KEYS = ("ADD", "VA", "MD", "MV", "MS", "MX", "KV", "PV", "CE", "CO", "CV", "CS", "WIKI",
               "HH", "AS")


def test_every_parameter_has_a_value_unit_and_source():
    for name, entry in PARAMETERS.items():
        value, unit, source, note = entry
        assert isinstance(value, (int, float)) and value >= 0, name
        assert unit and source.strip(), name
        assert (source.startswith(("facts §", "assumption", "calibrated: "))
                or source.split(" ")[0] in SOURCE_KEYS), name


def test_assumptions_and_calibrated_values_say_why():
    for name, (_value, _unit, source, note) in PARAMETERS.items():
        if source.startswith(("assumption", "calibrated")):
            assert len(note) > 20, name
        if source.startswith("calibrated"):
            assert "calibrate.py" in source, name      # the table that checks the fit


def test_cache_latencies_are_ordered_as_facts_section_4_says():
    # facts §4: TMU latency 9-20 instructions (TMU cache / L2 / RAM)
    t = Timing()
    assert 9 * t.issue_clocks == t.tmu_hit_latency < t.l2_hit_latency < t.tmu_miss_latency \
        == 20 * t.issue_clocks == t.uniform_miss_latency
    assert t.l2_cache_bytes == 32 * 1024 and t.l2_cache_ways == 4       # ADD cache table
    assert t.l2_cache_line_bytes == t.tmu_cache_line_bytes == 64
    assert "uncertain" in PARAMETERS["l2_cache_bytes"][2]


def test_board_clocks_follow_facts_section_4():
    clocks = {name: board.clock_hz for name, board in BOARDS.items()}
    # 250 MHz Pi 1/2, 300 MHz Pi Zero; Pi 3: 300 MHz is our choice between 300 and 400 (§5.16)
    assert clocks == {"pi1": 250e6, "pi2": 250e6, "pi_zero": 300e6, "pi3": 300e6}
    assert Timing.for_board("pi1").clock_hz == 250e6


def test_parameters_are_attributes_and_can_be_overridden():
    t = Timing.for_board("pi3", tmu_fifo_depth=8)
    assert t.issue_clocks == 4 and t.sfu_latency == 12 and t.tmu_fifo_depth == 8
    assert t.name == "pi3"
    with pytest.raises(Vc4nnError):
        Timing.for_board("pi5")
    with pytest.raises(Vc4nnError):
        Timing(no_such_parameter=1)


@pytest.mark.parametrize("override", [{"l2_hit_latency": -1}, {"tmu_cache_ways": 0},
                                      {"issue_clocks": 4.5}, {"dma_load_row_bandwidth": 0.0},
                                      {"mutex_clocks": True}, {"sfu_latency": "12"}])
def test_bad_overrides_are_typed_errors_naming_the_parameter(override):
    (name,) = override
    with pytest.raises(Vc4nnError, match=name):
        Timing(**override)


def test_zero_clocks_and_float_bandwidths_are_accepted():
    t = Timing(semaphore_clocks=0, launch_overhead_mailbox=0.0, dma_load_row_bandwidth=5e8,
               tmu_hit_latency=np.int64(30))
    assert t.launch_overhead == 0.0 and t.tmu_hit_latency == 30


@pytest.mark.parametrize("kind, row_bw, word_bw", [("load", 700e6, 200e6), ("store", 1000e6, 300e6)])
def test_dma_row_model_reproduces_the_published_bandwidths(kind, row_bw, word_bw):
    t = Timing.for_board("pi1")
    cost = getattr(t, f"dma_{kind}_clocks")
    rows = 1000
    for row_bytes, bandwidth in ((64, row_bw), (4, word_bw)):
        seconds = t.seconds(cost(rows, row_bytes))
        assert rows * row_bytes / seconds == pytest.approx(bandwidth, rel=1e-3)


def test_clocks_round_up():
    t = Timing.for_board("pi_zero")
    assert t.clocks(1 / 300e6) == 1 and t.clocks(1.5 / 300e6) == 2 and t.clocks(0) == 0
    assert t.dma_load_clocks(1, 64) == math.ceil(64 / 700e6 * 300e6)


def test_doc_renders_the_current_tables():
    text = DOC.read_text(encoding="utf-8")
    assert timing.parameter_table_markdown() in text
    assert timing.board_table_markdown() in text


def test_doc_renders_the_rules_table():
    from vc4nn.emulator.checks import rules_table_markdown
    choices = DOC.parent / "hardware-choices.md"
    assert rules_table_markdown() in choices.read_text(encoding="utf-8")
