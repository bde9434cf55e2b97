"""The dynamic checks of the VPM and its DMA engines (vc4nn/emulator/checks.py collects the
rules) and their messages, which both cores report with: the Python Vpm, and the C core
(csrc/vpm.c, csrc/dma.c) through ccore's glue."""

from types import MappingProxyType

from asm import isa

from .checks import Rule
from .vpm_layout import ROW_BYTES, ROW_WORDS

# rule -> Rule(default, catches, hardware)
CHECK_RULES = MappingProxyType({
    "vpm_setup_invalid": Rule(
        "error", "a vr_setup/vw_setup word that selects no setup, or a reserved SIZE or MODEW",
        "the guide leaves these codes undefined (facts §3); no model of what a Pi does "
        "exists, so any result the emulator gave would be invented"),
    "vpm_setup_unused_bits": Rule(
        "warn", "a setup word with bits set that no field uses",
        "the emulator ignores them, as the hardware presumably does; nothing published says "
        "so, and a computed setup that spills into them is usually a bug"),
    "dma_pitch_out_of_range": Rule(
        "error", "an extended VDR pitch word (1001 in 31:28) with bits 27:14 set: a pitch of "
        "16 KB or more",
        "qmkl reports DMA rows 16 KB and more apart loading the wrong rows on a Pi; 14 bits "
        "are proven by py-videocore's SGEMM (facts §5.18)"),
    "vpm_missing_setup": Rule(
        "error", "a VPM read or write, or a DMA start, with no setup written before",
        "a read with no setup waits for vectors that never come (hangs, facts §3); a write or "
        "DMA uses whatever setup the previous program left in the hardware"),
    "vpm_read_past_setup": Rule(
        "error", "more VPM reads than the read setups' NUM",
        "the read waits on an empty read FIFO: the QPU hangs (facts §3)"),
    "vpm_read_queue_overflow": Rule(
        "error", "a third VPM read setup queued while two have vectors unread",
        "the guide allows 2 queued setups (facts §3); the third is lost and the reads that "
        "count on it hang"),
    "vpm_read_pending_at_end": Rule(
        "warn", "a QPU ended with VPM vectors of its read setups unread",
        "whether the vectors stay in the QPU's read FIFO into its next program is not "
        "documented"),
    "vpm_out_of_range": Rule(
        "warn", "a VPM access reaching rows 64..127 (generic access: ADDR beyond Y 63; DMA: "
        "Y 64..127), or a DMA row running past its VPM row or column",
        "the VPM has 12 KB on a Pi 1 but how much a user program owns is disputed (facts "
        "§5.15); how a row wraps is not documented. The emulator wraps into 128 rows"),
    "vpm_dma_race": Rule(
        "error", "a VPM access overlapping a DMA its issuer has not waited for, unless both "
        "only read the VPM (docs/cycle-model.md)",
        "on a Pi the access sees the VPM before or during the DMA (stale or torn data); the "
        "emulator applies a DMA at once and cannot show it"),
    "dma_alignment": Rule(
        "warn", "a DMA memory address that is not a multiple of the element size",
        "the emulator drops the low bits, as the address register presumably does; not "
        "documented"),
    "dma_unsupported": Rule(
        "error", "a DMA store with LANED set (the guide: write as 0) or vertical BLOCKMODE",
        "undefined by the guide and not modelled; any result would be invented"),
    "dma_in_flight_at_end": Rule(
        "warn", "a QPU ended without waiting for its last DMA store",
        "the store keeps running after thrend; the host's wait for the launch (a mailbox "
        "round trip or register polls, microseconds) normally outlasts it, but nothing "
        "guarantees that the data has landed"),
})


# the extended pitch word: everything below its id, of which the hardware honours MPITCHB
_PITCH_WORD_BITS = (1 << isa.VDR_EXTENDED["id"][0]) - 1
_MPITCHB_BITS = isa.VDR_EXTENDED["mpitchb"][1]


def _whose(issuer, qpu):
    return "its own" if issuer == qpu else f"QPU {issuer}'s"


# The messages of those checks, by key.
MESSAGES = MappingProxyType({
    "setup_unused_bits": lambda what, word, unused: (
        f"{what} {word:#010x} sets bits {unused:#010x} that no field uses (the emulator "
        f"ignores them)"),
    "pitch_out_of_range": lambda word: (
        f"extended DMA load pitch word {word:#010x} asks for a pitch of "
        f"{word & _PITCH_WORD_BITS} bytes; the hardware honours {_MPITCHB_BITS} bits (pitches "
        f"below {1 << _MPITCHB_BITS}, facts §5.18) and rows that far apart load wrongly on a Pi"),
    "selects_no_setup": lambda register, word: (
        f"{register} {word:#010x} selects no setup (bits 31:30 = 01)"),
    "reserved_size": lambda register, word: f"{register} {word:#010x} has the reserved SIZE 3",
    "unused_modew": lambda word: f"DMA store setup {word:#010x} has the unused MODEW 1",
    "read_queue_overflow": lambda queued, unread, limit: (
        f"a third VPM read setup while {queued} are queued with {unread} vectors unread "
        f"(facts §3: at most {limit})"),
    "read_missing_setup": lambda: "VPM read with no read setup (hangs on a Pi)",
    "read_past_setup": lambda: "VPM read past the count NUM of its setup (hangs on a Pi)",
    "write_missing_setup": lambda: "VPM write with no write setup",
    "load_missing_setup": lambda: "vr_addr written with no DMA load setup",
    "store_missing_setup": lambda: "vw_addr written with no DMA store setup",
    "store_laned": lambda word: (
        f"DMA store setup {word:#010x} sets LANED, which the guide says to write as 0"),
    "store_vertical_blockmode": lambda: (
        "BLOCKMODE with a vertical DMA store is not modelled (docs/hardware-choices.md)"),
    "store_columns_past_row": lambda units, x: (
        f"DMA store of {units} columns from column {x} runs past column {ROW_WORDS - 1}"),
    "generic_out_of_range": lambda what, addr: (
        f"generic VPM {what} at ADDR {addr} reaches past row {isa.VPM_ROWS - 1}, the generic "
        f"access range (facts §3); the emulator wraps it"),
    "dma_beyond_user_rows": lambda what, row: (
        f"{what} reaches VPM row {row}; rows {isa.VPM_ROWS}..{isa.VPM_DMA_ROWS - 1} are "
        f"reachable only by DMA and may not belong to user programs (facts §5.15)"),
    "dma_row_past_end": lambda what: (
        f"{what} row runs past the end of its VPM row ({ROW_BYTES} bytes)"),
    "dma_race": lambda what, issuer, qpu, kind: (
        f"{what} touches VPM words of {_whose(issuer, qpu)} DMA {kind} that has not been waited "
        f"for (vr_wait/vw_wait)"),
    "dma_alignment": lambda kind, address, width: (
        f"DMA {kind} memory address {address:#010x} is not a multiple of the element size "
        f"({width} bytes); the low bits are dropped"),
    "store_in_flight": lambda: (
        "the program ended without waiting for its last DMA store (read vw_wait): the host "
        "may read memory before it lands"),
    "read_pending": lambda unread: (
        f"the program ended with {unread} VPM vectors of its read setups unread"),
})
