"""The C core's memory bus (csrc/bus.c) against bus.MemoryBus, the specification: random
sequences of bookings, DMA stores, line fills and uniform lines on both give the same answers,
statistics and written-word epochs."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vc4nn.emulator import ccore
from vc4nn.emulator.timing import Timing
from vc4nn.emulator.bus import MemoryBus

pytestmark = pytest.mark.skipif(not ccore.available(), reason="the C core is not built")


@pytest.fixture(autouse=True)
def emulator_core():
    """Overrides the per-core parametrisation of conftest.py: these tests run both buses."""


# Addresses in a few 64 KB windows of all four bus aliases, so lines collide in the L2 sets.
addresses = st.builds(lambda alias, window, offset: alias << 30 | window << 16 | offset,
                      st.integers(0, 3), st.integers(0, 3), st.integers(0, 0xFFFF))
operations = st.lists(st.one_of(
    st.tuples(st.just("reserve"), st.integers(0, 9000), st.integers(0, 200)),
    st.tuples(st.just("transfer"), st.integers(0, 9000), st.integers(1, 200)),
    st.tuples(st.just("record_write"), addresses, st.integers(0, 300)),
    st.tuples(st.just("read_line"), st.integers(0, 9000), addresses, st.sampled_from([4, 64, 128]),
              st.sampled_from([80, 120])),
    st.tuples(st.just("uniform_line"), st.integers(0, 9000), addresses),
), max_size=120)


def _observe(bus, ops):
    answers = [getattr(bus, name)(*args) for name, *args in ops]
    return answers, dict(bus.written), [getattr(bus, name) for name in (
        "write_epoch", "busy_clocks", "l2_hits", "l2_misses", "vc_l2_hits")]


@settings(max_examples=300, deadline=None)
@given(ops=operations, board=st.sampled_from(["pi1", "pi3"]),
       small=st.booleans())
def test_the_c_bus_answers_as_the_python_bus(ops, board, small):
    # small: caches of a few lines, so evictions happen within a short sequence
    sizes = dict(l2_cache_bytes=512, vc_l2_bytes=1024) if small else {}
    timing = Timing.for_board(board, **sizes)
    assert _observe(ccore.memory_bus(timing), ops) == _observe(MemoryBus(timing), ops)


def test_a_bus_without_l2s():
    timing = Timing.for_board("pi1", l2_cache_bytes=0, vc_l2_bytes=0)
    ops = [("read_line", 0, 0x40000000, 64, 80)] * 3 + [("uniform_line", 10, 0x40000004)]
    c, python = _observe(ccore.memory_bus(timing), ops), _observe(MemoryBus(timing), ops)
    assert c == python and python[2][3] == 4     # every fill missed
