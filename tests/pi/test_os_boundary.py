"""The real OS boundary on this (non-Pi) machine: files, permissions, mmap; and the real errors."""

import io
import mmap
import os
import stat

import numpy as np
import pytest

from vc4nn.pi import NotAPiError, PiDevice
from vc4nn.pi.doctor import doctor_main
from vc4nn.pi.os_boundary import OsBoundary

ON_A_PI = os.path.exists("/dev/vcio")


def test_files_and_permissions(tmp_path):
    real = OsBoundary()
    path = tmp_path / "config.txt"
    path.write_text("gpu_mem=128\n")
    path.chmod(0o640)
    info = real.stat(str(path))
    assert info.permissions == "-rw-r-----" and stat.S_ISREG(info.mode)
    assert real.read_text(str(path)) == "gpu_mem=128\n"
    assert real.exists(str(path)) and not real.exists(str(tmp_path / "missing"))
    assert real.read_text(str(tmp_path / "missing")) is None and real.stat(str(tmp_path / "missing")) is None
    assert real.can_open(str(path), write=False)


def test_mmap_at_a_page_offset_is_shared(tmp_path):
    real = OsBoundary()
    page = real.page_size()
    path = tmp_path / "memory"
    path.write_bytes(bytes(3 * page))
    fd = real.open(str(path), write=True, sync=True)
    try:
        mapping = real.mmap(fd, page, page)
        view = np.frombuffer(mapping, dtype=np.uint32, count=4, offset=8)
        view[:] = [1, 2, 3, 4]
        del view
        mapping.close()
    finally:
        real.close(fd)
    data = path.read_bytes()
    assert np.frombuffer(data[page + 8:page + 24], dtype="<u4").tolist() == [1, 2, 3, 4]
    assert data[:page + 8] == bytes(page + 8)
    assert page == mmap.PAGESIZE


@pytest.mark.skipif(ON_A_PI, reason="this machine is a Raspberry Pi")
def test_this_machine_is_not_a_pi():
    with pytest.raises(NotAPiError, match="no /dev/vcio: this machine is not a Raspberry Pi"):
        PiDevice()
    out = io.StringIO()
    assert doctor_main([], out=out) == 1
    assert "not a Raspberry Pi" in out.getvalue()


def test_detached_mapping_no_longer_reaches_the_mapped_memory(tmp_path):
    # Stand-in for /dev/mem: a shared mapping of a file. After detach_mapping, a numpy view that
    # outlived the release writes into private pages, not into the file (GPU memory on a Pi).
    real = OsBoundary()
    page = mmap.PAGESIZE
    path = tmp_path / "gpu"
    path.write_bytes(bytes(2 * page))
    fd = real.open(str(path), write=True)
    try:
        mapping = real.mmap(fd, 2 * page, 0)
        view = np.frombuffer(mapping, dtype=np.uint32)
        view[:4] = 7
        assert os.pread(fd, 16, 0) == bytes([7, 0, 0, 0]) * 4
        real.detach_mapping(mapping)
        view[:4] = 9
        view[page // 4] = 9
        assert os.pread(fd, 16, 0) == bytes([7, 0, 0, 0]) * 4
        assert os.pread(fd, 4, page) == bytes(4)
        assert int(view[0]) == 9                 # the stale view still works, harmlessly
        del view
        mapping.close()
    finally:
        real.close(fd)
