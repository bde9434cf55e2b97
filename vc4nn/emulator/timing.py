"""The cycle model: one table of parameters, each with its source, and the board presets.

Every figure here is an ESTIMATE. The published numbers (facts §4) are few, coarse and were
measured by others on boards we cannot name precisely; where no number was published the entry
says "assumption" and why the value is plausible. docs/cycle-model.md renders this table, explains
how the units use it and compares the model with the published SGEMM measurements.

Times are V3D clocks unless the unit column says otherwise. Bandwidths are memory-side figures in
bytes per second, independent of the V3D clock (SDRAM bound); they are converted to clocks with
the board's V3D clock.
"""

import math
import numbers
from types import MappingProxyType

from .. import hardware
from ..device import checked_launch_path
from ..errors import DeviceError

# name -> (value, unit, source, note)
PARAMETERS = MappingProxyType({
    "issue_clocks": (
        4, "clocks/instruction", "facts §4",
        "16 elements over 4 physical lanes: one instruction per 4 clocks per QPU"),
    "sfu_latency": (
        12, "clocks", "facts §4 (MV): r4 readable 3 instructions after the SFU write",
        "3 instructions x issue_clocks"),
    "tmu_hit_latency": (
        36, "clocks", "facts §4 (WIKI): TMU latency 9-20 instructions (TMU cache / L2 / RAM)",
        "low end (9 instructions): a line in the TMU cache"),
    "tmu_miss_latency": (
        80, "clocks", "facts §4 (WIKI): TMU latency 9-20 instructions (TMU cache / L2 / RAM)",
        "high end (20 instructions): a line in neither the TMU cache nor the L2, read from RAM"),
    "tmu_request_clocks": (
        4, "clocks/request", "assumption",
        "a TMU serves one quad (4 lookups) per clock, so a 16-element request occupies it 4 "
        "clocks; the QPUs of a slice share its two TMUs"),
    "tmu_fifo_depth": (
        4, "requests/QPU", "facts §3 and §5.13 (ADD: more than 4 direct requests unreliable)",
        "more outstanding requests warn (tmu_fifo_unreliable, docs/hardware-choices.md)"),
    "tmu_fifo_limit": (
        8, "requests/QPU", "facts §3: request FIFO 8 per QPU (guide)",
        "more outstanding requests stop the run (tmu_fifo_overflow)"),
    "tmu_cache_bytes": (
        hardware.TMU_CACHE_BYTES, "bytes", "facts §4 (ADD): TMU cache 4 KB",
        "one cache per physical TMU"),
    "tmu_cache_line_bytes": (
        hardware.TMU_CACHE_LINE_BYTES, "bytes", "ADD (cache table): TMU cache lines 64 B", ""),
    "tmu_cache_ways": (
        hardware.TMU_CACHE_WAYS, "ways", "ADD (cache table): TMU cache associativity '-'; 'sequence counts': one read "
        "4 KB away in between evicts a line",
        "direct-mapped: a line has one place in the 4 KB"),
    "l2_cache_bytes": (
        32768, "bytes", "facts §4 (ADD): V3D L2 ~32 KB (uncertain)",
        "UNCERTAIN (the errata write '32 kiB ?'). One L2 shared by all slices; TMU, uniform and "
        "instruction line fills look in it before the memory bus, DMA bypasses it "
        "(docs/cycle-model.md)"),
    "l2_cache_line_bytes": (
        64, "bytes", "ADD (cache table): V3D L2C lines 64 B", ""),
    "l2_cache_ways": (
        4, "ways", "ADD (cache table): V3D L2C 4-way", "LRU within a set (assumption)"),
    "l2_hit_latency": (
        58, "clocks", "assumption",
        "a line in the L2 but not in the TMU or uniform cache: midway (14.5 instructions) "
        "between the TMU cache (9) and RAM (20) of facts §4 (WIKI), which gives no figure for "
        "the L2 alone; docs/cycle-model.md shows the calibration at both ends"),
    "vc_l2_bytes": (
        131072, "bytes", "assumption (issue 11: the VideoCore's 128 KB L2 between GPU and SDRAM)",
        "the VideoCore's own L2, separate from the V3D L2: it serves V3D line fills of memory "
        "whose bus alias is cached (0x0, 0x4, 0x8; mailbox flags, vc4nn.hardware) and keeps "
        "those of the allocating aliases (0x0, 0x4). 0 disables it"),
    "vc_l2_line_bytes": (
        64, "bytes", "assumption", "same line size as the V3D caches"),
    "vc_l2_ways": (
        4, "ways", "assumption", "LRU within a set, as the V3D L2"),
    "vc_l2_hit_latency": (
        58, "clocks", "assumption",
        "a V3D L2 miss that hits the VideoCore L2: as a V3D L2 hit (l2_hit_latency), the next "
        "cache out on the same on-chip bus"),
    "vc_l2_hit_bandwidth": (
        4e9, "bytes/s", "calibrated: GPU_FFT 2.0 timings, Pi 1 (gpu_fft.txt; tools/calibrate.py "
        "--case fft)",
        "the on-chip path from the VideoCore L2: a 64-byte line in 4 clocks at 250 MHz (16 "
        "bytes a clock), against SDRAM line fills at the memory path's 1184 MB/s "
        "(Timing.line_fill_clocks): a line from the VideoCore L2 holds the memory bus for 16 "
        "instead of 54 ns. Was 2e9 (an assumption): the 8192- and 16384-point FFTs, whose "
        "bit-reversed gathers re-read lines from the VideoCore L2, came out 1.33-1.37x the "
        "published times; 4e9 gives 1.09-1.16x (8e9 would give 0.99-1.06x; 16 bytes a clock "
        "is the plainer reading of an on-chip bus, docs/cycle-model.md)"),
    "dma_load_row_bandwidth": (
        700e6, "bytes/s", "facts §4 (WIKI): ~700 MB/s VPM DMA read of full 16-word rows",
        "with dma_load_word_bandwidth fixes the per-row overhead and the peak rate"),
    "dma_load_word_bandwidth": (
        200e6, "bytes/s", "facts §4 (WIKI): ~200 MB/s VPM DMA read of single words", ""),
    "dma_store_row_bandwidth": (
        1000e6, "bytes/s", "facts §4 (WIKI): up to ~1 GB/s VPM DMA write of full rows", ""),
    "dma_store_word_bandwidth": (
        300e6, "bytes/s", "facts §4 (WIKI): ~300 MB/s VPM DMA write of single words", ""),
    "dma_load_latency": (
        24, "clocks", "facts §4 (VC4C issue 15): address write to wait >= 6 instructions (load)",
        "fixed latency added after the transfer; WIKI gives >= 5 instructions"),
    "dma_store_latency": (
        40, "clocks", "facts §4 (VC4C issue 15): address write to wait >= 10 instructions (store)",
        "fixed latency added after the transfer"),
    "vpm_read_latency": (
        20, "clocks", "facts §4 (VC4C issue 15): read setup to first read ~5 instructions",
        "the read FIFO is filled this long after the setup write"),
    "vpm_read_queue": (
        2, "setups/QPU", "facts §3: up to 2 read setups may be queued", "functional limit"),
    "uniform_line_bytes": (
        64, "bytes", "assumption",
        "the uniform stream is fetched a line at a time; same line size as the other caches"),
    "uniform_miss_latency": (
        80, "clocks", "facts §4 (WIKI): 20 instructions, as a TMU read from RAM",
        "a uniform read in a new line waits this long when the line is not in the L2, and the "
        "line takes its turn on the memory bus; no prefetch of the next line (no source "
        "describes one, docs/cycle-model.md)"),
    "icache_bytes": (
        4096, "bytes", "facts §4 (ADD cache table): instruction cache 4 KB",
        "one per slice, shared by its 4 QPUs (the guide, p. 14: 'each slice shares an "
        "instruction cache'; Linux vc4_regs.h SLCACTL.ICC: one clear bit per slice); empty at "
        "each launch (the launch paths clear the V3D caches). 0 models no cache: every new "
        "line is fetched"),
    "icache_line_bytes": (
        64, "bytes", "ADD (cache table): instruction cache lines 64 B",
        "8 instructions. A QPU looks its line up when its PC enters a new line (in sequence "
        "or by a branch) and runs the rest of the line from what it fetched, as it reads "
        "uniforms (docs/cycle-model.md 'Instruction cache')"),
    "icache_ways": (
        4, "ways", "ADD (cache table): instruction cache 4-way (address bits 0:7 in words: "
        "1 KB a way, 16 sets)",
        "LRU within a set (assumption: no source names the replacement; as the L2)"),
    "icache_miss_latency": (
        80, "clocks", "assumption, as uniform_miss_latency: facts §4 (WIKI) 20 instructions "
        "for a read from RAM",
        "a fetch in a line the slice's cache lacks stalls its QPU (stall cause 'icache') "
        "until the line comes through the L2 (l2_hit_latency) or, missing it, over the "
        "memory bus (this long, or when its bus slot ends); a line another QPU of the slice "
        "is fetching is waited for, not fetched twice"),
    "icache_prefetch_lines": (
        0, "lines", "assumption (UNCERTAIN: no source describes a prefetch)",
        "the model's reading is none (0). n > 0 models a next-line prefetch instead: a QPU "
        "entering a line also has the n lines after it fetched if its slice's cache lacks them "
        "(through the L2 and the bus, as a miss), so straight code and long loops wait less; "
        "for comparing the two readings (docs/hardware-choices.md 'Cycle model: the "
        "instruction cache')"),
    "semaphore_clocks": (
        0, "clocks", "assumption", "no cost beyond the instruction's issue when it does not block"),
    "mutex_clocks": (
        4, "clocks", "assumption", "one issue slot for the grant round trip"),
    "launch_overhead_mailbox": (
        100e-6, "s", "facts §3: execute_qpu mailbox call about 100 us",
        "a launch through the firmware (what vc4nn.pi does): added to the modelled run time "
        "when Timing.launch_path is 'mailbox' (the default)"),
    "launch_overhead_direct": (
        5e-6, "s", "calibrated: GPU_FFT 2.0 timings, Pi 1 (gpu_fft.txt; tools/calibrate.py "
        "--case fft)",
        "a launch by direct V3D register writes (cache clears, SRQUA/SRQPC per program, then "
        "SRQCS polls), as GPU_FFT launches batches of at most 20480 points. GPU_FFT's published "
        "per-transform times for batches of 1 and 10 at 256..2048 points differ by 0.9 x (the "
        "launch + the first transform's instruction-cache misses, which later transforms of a "
        "batch do not pay): (T1 - T10) x 10/9 = 22, 27, 28, 17 us. With the instruction cache "
        "modelled, 5 us puts the model's 256..1024-point batch-1 rows at 0.93-1.07x the "
        "published times (10 us: 1.03-1.14x; 20 us: up to 1.38x). Which part of the 22-28 us is "
        "the launch and which the cold cache is UNCERTAIN: only their sum is published. Was "
        "20 us (fitted before the instruction cache was modelled), before that 5 us (an "
        "assumption) (docs/hardware-choices.md 'Launch paths')"),
})


class Board:
    __slots__ = ("name", "title", "clock_hz", "source", "processor")

    def __init__(self, name, title, clock_hz, source, processor):
        self.name, self.title, self.clock_hz, self.source = name, title, clock_hz, source
        self.processor = processor

    @property
    def mem_flags(self):
        """The mailbox memory flags GPU memory gets by default on this board (as vc4nn.pi)."""
        return hardware.MEM_FLAGS_BY_PROCESSOR[self.processor]

    def __repr__(self):
        return f"Board({self.name!r}, {self.clock_hz / 1e6:.0f} MHz)"


_CLOCK_SOURCE = "facts §4 (raspberrypi docs, config-txt overclocking: v3d_freq default)"
# Pi 3: facts §5.16 lists 300 MHz (one source) against 400 MHz (another). We take 300 MHz: it is
# the documented v3d_freq default of the Pi 3 and Pi Zero family, the 400 MHz figure is the
# core_freq of the Pi 3 (the V3D block has its own clock); and py-videocore's SGEMM measured
# lower on a Pi 3 (6.7 GFLOPS) than its README figure, which a faster V3D clock would not explain
# (docs/hardware-choices.md "Emulator units").
BOARDS = MappingProxyType({
    "pi1": Board("pi1", "Raspberry Pi 1 (A, B, A+, B+)", 250e6, _CLOCK_SOURCE, "BCM2835"),
    "pi_zero": Board("pi_zero", "Raspberry Pi Zero / Zero W", 300e6, _CLOCK_SOURCE, "BCM2835"),
    "pi2": Board("pi2", "Raspberry Pi 2", 250e6, _CLOCK_SOURCE, "BCM2836"),
    "pi3": Board("pi3", "Raspberry Pi 3", 300e6, _CLOCK_SOURCE + "; facts §5.16 choice",
                 "BCM2837"),
})
DEFAULT_BOARD = "pi_zero"


class Timing:
    """The parameter table as attributes, for one board. Override entries by keyword.

    ``launch_path``: how the host starts a launch, "mailbox" (the firmware's execute_qpu, as
    vc4nn.pi does) or "direct" (V3D registers); it picks the launch overhead added to every
    launch's run time.
    """

    def __init__(self, board=DEFAULT_BOARD, launch_path="mailbox", **overrides):
        if board not in BOARDS:
            raise DeviceError(f"unknown board {board!r}; known boards: {', '.join(BOARDS)}")
        self.launch_path = checked_launch_path(launch_path)
        unknown = set(overrides) - set(PARAMETERS)
        if unknown:
            raise DeviceError(f"unknown cycle-model parameter(s) {', '.join(sorted(unknown))}")
        for name, value in overrides.items():
            _check_override(name, value)
        self.board = BOARDS[board]
        self.clock_hz = self.board.clock_hz
        for name, (value, *_rest) in PARAMETERS.items():
            setattr(self, name, overrides.get(name, value))
        self.dma_load_overhead, self.dma_load_peak = _row_model(
            self.dma_load_row_bandwidth, self.dma_load_word_bandwidth)
        self.dma_store_overhead, self.dma_store_peak = _row_model(
            self.dma_store_row_bandwidth, self.dma_store_word_bandwidth)

    @classmethod
    def for_board(cls, name, **overrides):
        return cls(name, **overrides)

    @property
    def launch_overhead(self):
        """Seconds the host needs to start and finish one launch on this launch path."""
        return getattr(self, f"launch_overhead_{self.launch_path}")

    @property
    def name(self):
        return self.board.name

    def clocks(self, seconds):
        """V3D clocks covering ``seconds`` (rounded up, so a transfer never takes 0 clocks)."""
        return int(math.ceil(seconds * self.clock_hz - 1e-9))

    def seconds(self, clocks):
        return clocks / self.clock_hz

    def dma_load_clocks(self, rows, row_bytes):
        """Clocks a DMA load keeps the memory bus busy: rows x (row overhead + bytes / peak)."""
        return self.clocks(rows * (self.dma_load_overhead + row_bytes / self.dma_load_peak))

    def dma_store_clocks(self, rows, row_bytes):
        return self.clocks(rows * (self.dma_store_overhead + row_bytes / self.dma_store_peak))

    def vc_l2_fill_clocks(self, nbytes):
        """Clocks a line served by the VideoCore L2 keeps the memory bus busy."""
        return self.clocks(nbytes / self.vc_l2_hit_bandwidth)

    def line_fill_clocks(self, nbytes):
        """Clocks an L2 line fill from SDRAM (for the TMU and uniform caches) keeps the memory
        bus busy: the line moves at the memory path's peak, the highest rate the published DMA
        figures show (the store row model's peak, 1184 MB/s). The VDR's lower peak (840 MB/s)
        is taken to be its own engine's limit, which a line burst does not pay
        (docs/cycle-model.md "Memory bus")."""
        return self.clocks(nbytes / self.dma_store_peak)


_ROW_BYTES, _WORD_BYTES = 64, 4


def _row_model(row_bandwidth, word_bandwidth):
    """(per-row overhead s, peak bytes/s) such that 64-byte rows move at ``row_bandwidth`` and
    4-byte rows at ``word_bandwidth``: t(b) = overhead + b / peak, solved from the two figures."""
    t_row, t_word = _ROW_BYTES / row_bandwidth, _WORD_BYTES / word_bandwidth
    peak = (_ROW_BYTES - _WORD_BYTES) / (t_row - t_word)
    return t_word - _WORD_BYTES / peak, peak


def parameter_table_markdown():
    """The parameter table as a Markdown table (docs/cycle-model.md embeds it)."""
    lines = ["| parameter | value | unit | source | note |", "|---|---|---|---|---|"]
    for name, (value, unit, source, note) in PARAMETERS.items():
        shown = f"{value / 1e6:g}e6" if value >= 1e6 else f"{value:g}"
        lines.append(f"| `{name}` | {shown} | {unit} | {source} | {note} |")
    return "\n".join(lines)


def board_table_markdown():
    lines = ["| board | name | V3D clock | SoC | default memory flags | source |",
             "|---|---|---|---|---|---|"]
    for board in BOARDS.values():
        lines.append(f"| `{board.name}` | {board.title} | {board.clock_hz / 1e6:g} MHz | "
                     f"{board.processor} | {board.mem_flags:#x} | {board.source} |")
    return "\n".join(lines)


# Line sizes, ways, depths and bandwidths divide or index the model's tables: at least 1. Clocks,
# latencies, overheads and cache sizes may be 0 (a cache size of 0 models no cache). A parameter whose default is an int counts clocks or bytes
# (the C core reads it as an integer), so its override must be an int too.
_AT_LEAST_ONE = ("_line_bytes", "_ways", "_depth", "_limit", "_queue", "_bandwidth")


def _check_override(name, value):
    default = PARAMETERS[name][0]
    kind = numbers.Integral if isinstance(default, int) else numbers.Real
    least = 1 if name.endswith(_AT_LEAST_ONE) else 0
    if isinstance(value, bool) or not isinstance(value, kind) or not value >= least:
        what = "an integer" if kind is numbers.Integral else "a number"
        raise DeviceError(f"cycle-model parameter {name}={value!r}: must be {what} >= {least}")
