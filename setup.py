import re

from setuptools import find_packages, setup

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
    python_requires=">=3.9",
    install_requires=["numpy>=1.19", "tqdm>=4.60"],   # tqdm: progress bars (delay=)
    extras_require={
        "test": ["pytest>=7", "hypothesis>=6", "pytest-xdist>=2"],
        "tflite": ["tflite>=2.4"],
        "onnx": ["onnx>=1.10"],
    },
    entry_points={"console_scripts": ["vc4nn=vc4nn.cli:main"]},
)
