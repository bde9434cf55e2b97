#!/usr/bin/env bash
# Build the C emulator core and run the quick test suite (both cores) on a 32-bit userland
# (Debian i386 in a chroot), the nearest thing to a 32-bit ARM Raspberry Pi OS that runs natively
# here: pointers, intp and the C long are 32 bits, as on the Pi. Needs root, debootstrap and
# access to Debian's package mirror. It tests the committed tree (git archive HEAD).
#
#     sudo tools/test_32bit.sh [CHROOT_DIR]
#
# Debian's i386 numpy (1.24) miscomputes int32 floor division with its AVX2/AVX-512 kernels on
# this kind of host (np.arange(256, dtype=np.int32) // 64 gives 0..255), a numpy build problem
# that a Pi's ARM CPU does not have; those CPU features are switched off for the run.
set -euo pipefail
root=${1:-/tmp/vc4nn-i386}
here=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -x "$root/usr/bin/python3" ]; then
    debootstrap --arch=i386 --variant=minbase \
        --include=python3,python3-numpy,python3-pytest,python3-hypothesis,python3-tqdm,python3-dev,python3-setuptools,gcc,libc6-dev \
        bookworm "$root" http://deb.debian.org/debian
fi
rm -rf "$root/work" && mkdir -p "$root/work/vc4nn" && git -C "$here" archive HEAD | tar -x -C "$root/work/vc4nn"
chroot "$root" /bin/sh -c 'cd /work/vc4nn && python3 -c "import struct; assert struct.calcsize(\"P\") == 4" &&
    python3 setup.py --quiet build_ext --inplace && python3 -m vc4nn.cli doctor | grep "emulator core" &&
    NPY_DISABLE_CPU_FEATURES="AVX512F AVX512CD AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX2 FMA3 AVX F16C" \
    python3 -m pytest -q -m "not slow" -p no:cacheprovider'
