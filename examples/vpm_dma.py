"""VPM and DMA: load a block from memory into the VPM, compute 2x + 1 on every word through
generic VPM reads and writes, store the block back.

Uniforms: input address, output address. The block is ``rows`` (1..16) rows of 16 words.

    python examples/vpm_dma.py           # assemble and print the disassembly (= examples/vpm_dma.s)
    python examples/vpm_dma.py --run     # also run on vc4nn.open_device()

The same from the command line, on the text form (16 rows; src holds 3i, dst gets 6i + 1):

    python -c "import numpy as np; np.save('src.npy', 3 * np.arange(256, dtype=np.uint32).reshape(16, 16))"
    vc4nn run examples/vpm_dma.s --input src=src.npy --buffer dst=16x16 --uniforms src dst --dump dst
"""

import argparse

import numpy as np

from asm import kernel, r0, ra, uniform, vpm


@kernel
def double_plus_one(a, rows=16):
    a.mov(ra[0], uniform)                   # input address
    a.mov(ra[1], uniform)                   # output address
    a.setup_dma_load(rows=rows, rowlen=16, y=0)
    a.start_dma_load(ra[0])
    a.wait_dma_load()
    a.setup_vpm_read(num=rows, y=0)
    a.setup_vpm_write(y=0)
    for _ in range(rows):                   # unrolled: one VPM row per step
        a.mov(r0, vpm)
        a.add(r0, r0, r0)
        a.add(vpm, r0, 1)
    a.setup_dma_store(units=rows, depth=16, y=0)
    a.start_dma_store(ra[1])
    a.wait_dma_store()
    a.exit()


def run(device, rows=16):
    data = np.arange(rows * 16, dtype=np.uint32) * 3
    src = device.array(data.reshape(rows, 16))
    dst = device.alloc((rows, 16), np.uint32)
    device.execute(double_plus_one.assemble(rows=rows), uniforms=[[src.address, dst.address]])
    assert np.array_equal(dst.ravel(), 2 * data + 1), dst
    return np.asarray(dst)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--run", action="store_true", help="run on vc4nn.open_device()")
    args = parser.parse_args()
    print(f"# examples/vpm_dma.py --rows {args.rows} as text (python examples/vpm_dma.py > "
          f"examples/vpm_dma.s). Run it on src.npy ({args.rows}x16 uint32):")
    print(f"#   python -c \"import numpy as np; np.save('src.npy', 3 * np.arange({16 * args.rows}, "
          f"dtype=np.uint32).reshape({args.rows}, 16))\"")
    print(f"#   vc4nn run examples/vpm_dma.s --input src=src.npy --buffer dst={args.rows}x16 "
          f"--uniforms src dst --dump dst")
    print(double_plus_one.assemble(rows=args.rows).disassemble(), end="")
    if args.run:
        import vc4nn
        with vc4nn.open_device() as device:
            print(run(device, args.rows))


if __name__ == "__main__":
    main()
