"""Backend selection for the whole suite: ``pytest --device=emulator`` (default) or ``--device=pi``.

Kernel and device tests take the ``device`` fixture and so run unchanged on either backend. On a
machine without a Pi, ``--device=pi`` skips them with the reason; tests marked ``pi`` (they need
real hardware) are skipped unless ``--device=pi`` is given.
"""

import os

import pytest

DEVICES = ("emulator", "pi")
VCIO = "/dev/vcio"


def pytest_addoption(parser):
    parser.addoption("--device", choices=DEVICES, default=os.environ.get("VC4NN_DEVICE", "emulator"),
                     help="backend for kernel and device tests (default: emulator, or $VC4NN_DEVICE)")


def pytest_configure(config):
    # The layer functions read `vc4nn tune`'s cache: the user's must not change which plans the
    # tests run (tests/nn/test_tuning.py points it at files of its own).
    os.environ["VC4NN_TUNE_CACHE"] = "off"
    if config.getoption("--device") not in DEVICES:
        raise pytest.UsageError(f"--device (or $VC4NN_DEVICE) must be one of {', '.join(DEVICES)}, "
                                f"not {config.getoption('--device')!r}")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--device") == "pi":
        return
    skip = pytest.mark.skip(reason="needs a real Raspberry Pi: run with --device=pi on a Pi Zero/1/2/3")
    for item in items:
        if item.get_closest_marker("pi") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def device_name(request):
    return request.config.getoption("--device")


@pytest.fixture
def device(device_name):
    """An open device of the chosen backend, closed (all memory freed) after the test."""
    if device_name == "pi":
        if not os.path.exists(VCIO):
            pytest.skip(f"--device=pi, but {VCIO} does not exist: this machine is not a "
                        f"Raspberry Pi (or its vcio driver is missing)")
        from vc4nn.pi import PiDevice
        dev = PiDevice()
    else:
        from vc4nn import open_device
        dev = open_device("emulator")
    with dev:
        yield dev
