"""Revision codes, decoded by hand from the documented bit fields (raspberrypi/documentation)."""

import pytest

from vc4nn.pi.board import decode_revision, parse_cpuinfo_revision


@pytest.mark.parametrize("code, name, processor, memory_mb, videocore_iv", [
    # new style: bit 23 set; MMM bits 22:20, PPPP bits 15:12, TTTTTTTT bits 11:4
    (0x9000C1, "Raspberry Pi Zero W", "BCM2835", 512, True),
    (0x900092, "Raspberry Pi Zero", "BCM2835", 512, True),
    (0xA01041, "Raspberry Pi 2 Model B", "BCM2836", 1024, True),
    (0xA22042, "Raspberry Pi 2 Model B", "BCM2837", 1024, True),
    (0xA02082, "Raspberry Pi 3 Model B", "BCM2837", 1024, True),
    (0xA020D3, "Raspberry Pi 3 Model B+", "BCM2837", 1024, True),
    (0x902120, "Raspberry Pi Zero 2 W", "BCM2837", 512, True),
    (0xC03111, "Raspberry Pi 4 Model B", "BCM2711", 4096, False),
    # old style (all BCM2835); bit 24 only marks an over-volted board
    (0x0002, "Raspberry Pi B", "BCM2835", None, True),
    (0x1000002, "Raspberry Pi B", "BCM2835", None, True),
    (0x0012, "Raspberry Pi A+", "BCM2835", None, True),
    (0x0010, "Raspberry Pi B+", "BCM2835", None, True),
])
def test_decode(code, name, processor, memory_mb, videocore_iv):
    board = decode_revision(code)
    assert (board.name, board.processor, board.memory_mb, board.videocore_iv) == \
        (name, processor, memory_mb, videocore_iv)


def test_unknown_codes_say_so():
    assert decode_revision(0x9000F1).model == "(unknown type 0xf)"
    assert decode_revision(0x00FF).model == "(unknown old-style revision 0xff)"
    assert not decode_revision(0x9090C1).videocore_iv      # processor 9: unknown


def test_cpuinfo_revision():
    assert parse_cpuinfo_revision("processor\t: 0\nRevision\t: a02082\nSerial\t: 1\n") == 0xA02082
    assert parse_cpuinfo_revision("vendor_id\t: GenuineIntel\n") is None
    assert parse_cpuinfo_revision(None) is None
