"""Choosing the emulator core: the default, explicit choices, and a C core that is not built."""

import pytest

from vc4nn.emulator import EmulatorDevice, ccore
from vc4nn.errors import DeviceError
from vc4nn.pi.doctor import emulator_core_line


@pytest.fixture(autouse=True)
def emulator_core():
    """Overrides the per-core parametrisation of conftest.py: these tests pick cores."""


def test_explicit_python_core():
    assert EmulatorDevice(core="python").core == "python"


@pytest.mark.skipif(not ccore.available(), reason="the C core is not built")
def test_default_is_the_c_core_when_built(capsys):
    assert EmulatorDevice().core == "c"
    assert EmulatorDevice(core="c").core == "c"
    assert capsys.readouterr().err == ""
    assert "emulator core: C" in emulator_core_line()


def test_unknown_core_is_a_typed_error():
    with pytest.raises(DeviceError, match="core must be one of 'c', 'python'"):
        EmulatorDevice(core="fast")


def test_without_the_extension(monkeypatch, capsys):
    monkeypatch.setattr(ccore, "_ccore", None)
    monkeypatch.setattr(ccore, "_notice_shown", False)
    with pytest.raises(DeviceError, match=r"C core \(core='c'\) is not built; install a C "
                                          r"compiler"):
        EmulatorDevice(core="c")
    assert EmulatorDevice().core == "python"
    assert EmulatorDevice().core == "python"
    err = capsys.readouterr().err
    assert err.count("the emulator's C core is not built, using the pure-Python core") == 1
    assert "pip install -e ." in err
    assert "emulator core: pure Python" in emulator_core_line()


def test_header_is_up_to_date():
    """csrc/isa_gen.h is what cheader.py makes from asm/isa.py today."""
    from vc4nn.emulator import cheader
    with open(cheader.HEADER, encoding="utf-8") as f:
        assert f.read() == cheader.render()


def test_environment_variable_picks_the_default(monkeypatch):
    monkeypatch.setenv("VC4NN_EMULATOR_CORE", "python")
    assert EmulatorDevice().core == "python"
    monkeypatch.setenv("VC4NN_EMULATOR_CORE", "turbo")
    with pytest.raises(DeviceError, match="got 'turbo'"):
        EmulatorDevice()
