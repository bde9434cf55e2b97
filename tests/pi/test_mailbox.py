"""The mailbox messages, byte for byte, against layouts written here from the documented protocol.

Layout (raspberrypi/firmware wiki, "Mailbox property interface"), little-endian 32-bit words:
total size | request code 0 | tag id | value buffer size | request length (bit 31 clear) |
value buffer (request, zero padded to the larger of request and response) | end tag 0.
"""

import ctypes
import struct

import numpy as np
import pytest

from vc4nn.errors import Vc4nnError
from vc4nn.pi import MailboxError, PiDevice
from vc4nn.pi.mailbox import Mailbox, ioctl_request
from vc4nn.pi.os_boundary import OsBoundary

from .fake_os import pi3_model_b, pi_zero_w

# Hand-assembled messages. Tag ids: get firmware revision 0x00000001, get board revision
# 0x00010002, get clock rate 0x00030002 (V3D clock id 5), allocate 0x3000c, lock 0x3000d,
# unlock 0x3000e, release 0x3000f, execute QPU 0x30011, enable QPU 0x30012.
GET_BOARD_REVISION = struct.pack("<7I", 28, 0, 0x00010002, 4, 0, 0, 0)
GET_FIRMWARE_REVISION = struct.pack("<7I", 28, 0, 0x00000001, 4, 0, 0, 0)
GET_V3D_CLOCK = struct.pack("<8I", 32, 0, 0x00030002, 8, 4, 5, 0, 0)
ENABLE_QPUS = struct.pack("<7I", 28, 0, 0x00030012, 4, 4, 1, 0)
DISABLE_QPUS = struct.pack("<7I", 28, 0, 0x00030012, 4, 4, 0, 0)


def mem_alloc(size, align, flags):
    return struct.pack("<9I", 36, 0, 0x0003000C, 12, 12, size, align, flags, 0)


def one_handle(tag_id, handle):
    return struct.pack("<7I", 28, 0, tag_id, 4, 4, handle, 0)


def execute_qpu(num_qpus, control, noflush, timeout_ms):
    return struct.pack("<10I", 40, 0, 0x00030011, 16, 16, num_qpus, control, noflush, timeout_ms, 0)


def test_ioctl_request_is_iowr_100_0_char_pointer():
    # _IOWR(type 100, nr 0, char *): direction 3 in bits 31:30, sizeof(char *) in bits 29:16.
    assert ioctl_request(4) == 0xC0046400      # 32-bit ARM (Raspberry Pi OS armhf)
    assert ioctl_request(8) == 0xC0086400      # 64-bit userland
    assert OsBoundary().pointer_size() == struct.calcsize("P") == ctypes.sizeof(ctypes.c_void_p)


@pytest.mark.parametrize("pointer_size", [4, 8])
def test_mailbox_uses_this_process_pointer_size(pointer_size):
    fake = pi_zero_w(root=True, pointer_size=pointer_size)   # the fake checks the number
    with PiDevice(fake):
        pass
    assert fake.messages[0] == GET_BOARD_REVISION


def test_open_and_close_send_exactly_the_documented_messages():
    fake = pi_zero_w(root=True)
    PiDevice(fake).close()
    assert fake.messages == [GET_BOARD_REVISION, GET_FIRMWARE_REVISION, GET_V3D_CLOCK,
                             ENABLE_QPUS, DISABLE_QPUS]


@pytest.mark.parametrize("make, flags", [(pi_zero_w, 0xC), (pi3_model_b, 0x4)])
def test_allocation_messages(make, flags):
    fake = make(root=True)
    with PiDevice(fake) as dev:
        start = len(fake.messages)
        buf = dev.alloc(256, np.float32)
        assert fake.messages[start:] == [mem_alloc(1024, 4096, flags), one_handle(0x0003000D, 1)]
        start = len(fake.messages)
        dev.free(buf)
        assert fake.messages[start:] == [one_handle(0x0003000E, 1), one_handle(0x0003000F, 1)]


def test_execute_messages_and_what_the_firmware_is_handed():
    seen = {}

    def runner(fake, launch):
        seen["programs"] = [(fake.read_bus(u, 8), fake.read_bus(c, 16)) for u, c in launch.programs]
        return 0

    fake = pi_zero_w(root=True, runner=runner)
    code = np.array([0x1111111122222222, 0x3333333344444444], dtype=np.uint64)
    with PiDevice(fake) as dev:
        start = len(fake.messages)
        dev.execute(code, num_qpus=2, uniforms=[[7, -1], [2.0, 9]], timeout=2.5)
        sent = fake.messages[start:]
    # code, uniforms of QPU 0 and 1, control list: allocate + lock each (handles 1..4), then run.
    assert sent[0::2][:4] == [mem_alloc(16, 4096, 0xC), mem_alloc(8, 4096, 0xC),
                              mem_alloc(8, 4096, 0xC), mem_alloc(16, 4096, 0xC)]
    assert sent[1:8:2] == [one_handle(0x0003000D, h) for h in (1, 2, 3, 4)]
    lock_answers = {call[1][0]: call[2][0] for call in fake.calls if call[0] == "mem_lock"}
    control, code_at, uniforms_at = lock_answers[4], lock_answers[1], (lock_answers[2], lock_answers[3])
    assert sent[8] == execute_qpu(2, control, 0, 2500)
    assert sorted(sent[9:]) == sorted(one_handle(tag, h) for tag in (0x0003000E, 0x0003000F)
                                      for h in (1, 2, 3, 4))
    assert fake.launches[0].programs == [(uniforms_at[0], code_at), (uniforms_at[1], code_at)]
    code_bytes = struct.pack("<4I", 0x22222222, 0x11111111, 0x44444444, 0x33333333)
    assert seen["programs"] == [(struct.pack("<iI", 7, 0xFFFFFFFF), code_bytes),
                                (struct.pack("<fI", 2.0, 9), code_bytes)]


def test_every_launch_of_a_sequence_sends_the_documented_message():
    """The execute_qpu buffer is reused: the firmware's answer in it must not leak into the
    next request."""
    fake = pi_zero_w(root=True)
    with PiDevice(fake) as dev:
        code = dev.array(np.zeros(2, np.uint64))
        unif = dev.array(np.zeros(2, np.uint32))
        lists = [dev.array(np.array([[unif.address, code.address]] * n, np.uint32))
                 for n in (3, 1, 2)]
        start = len(fake.messages)
        dev.execute_control_lists([(n, c.address) for n, c in zip((3, 1, 2), lists)],
                                  timeout=0.75)
        assert fake.messages[start:] == [execute_qpu(n, c.address, 0, 750)
                                         for n, c in zip((3, 1, 2), lists)]


def test_a_prepared_call_checks_its_arguments_and_the_answer():
    mailbox = Mailbox(ScriptedVcio(answered(0x80000001, 0x80000004, 0)), 3)
    with pytest.raises(MailboxError, match="takes 0 arguments, got 1"):
        mailbox.prepared("get_board_revision")(5)
    with pytest.raises(MailboxError, match="could not parse"):
        mailbox.prepared("get_board_revision")()


class ScriptedVcio:
    """A /dev/vcio whose answer is given by the test: to exercise the response checks."""

    def __init__(self, answer=None, error=None):
        self.answer, self.error = answer, error

    def pointer_size(self):
        return 4

    def ioctl(self, fd, request, buffer):
        if self.error:
            raise self.error
        buffer[:] = self.answer(bytes(buffer))


def answered(code, indicator, value):
    return lambda request: struct.pack("<7I", 28, code, 0x00010002, 4, indicator, value, 0)


def test_a_good_answer_is_read():
    mailbox = Mailbox(ScriptedVcio(answered(0x80000000, 0x80000004, 0xA02082)), 3)
    assert mailbox.call("get_board_revision") == (0xA02082,)


@pytest.mark.parametrize("answer, complaint", [
    (answered(0x80000001, 0x80000004, 0), "could not parse"),
    (answered(0x00000000, 0x00000000, 0), "no answer"),
    (answered(0x80000000, 0x00000000, 0), "bit 31 clear"),
    (answered(0x80000000, 0x80000000, 0), "answer is 0 bytes"),
    (lambda r: struct.pack("<7I", 28, 0x80000000, 0x00010001, 4, 0x80000004, 0, 0), "names tag"),
])
def test_bad_answers_are_typed_errors(answer, complaint):
    with pytest.raises(MailboxError, match=complaint) as info:
        Mailbox(ScriptedVcio(answer), 3).call("get_board_revision")
    assert info.value.tag == "get_board_revision" and isinstance(info.value, Vc4nnError)


def test_a_refused_ioctl_is_a_typed_error():
    mailbox = Mailbox(ScriptedVcio(error=OSError(22, "Invalid argument")), 3)
    with pytest.raises(MailboxError, match="mem_lock: /dev/vcio refused the request: Invalid argument"):
        mailbox.call("mem_lock", 5)


def test_wrong_argument_count_is_a_typed_error():
    with pytest.raises(MailboxError, match="takes 3 arguments, got 1"):
        Mailbox(ScriptedVcio(), 3).call("mem_alloc", 4096)
