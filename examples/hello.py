"""Hello world: every QPU writes one 16-word row of the output, element i of QPU q = 16 * q + i.

Each QPU gets two uniforms: the output address of its row and its index q. The row goes through
the VPM and a DMA store; all QPUs share VPM row 0, so the mutex serialises that part.

    python examples/hello.py            # assemble and print the disassembly (= examples/hello.s)
    python examples/hello.py --run 12   # also run on 12 QPUs of vc4nn.open_device()

The same from the command line, on the text form (out: 12 rows of 16 words; QPU q gets the
address of row q and q):

    vc4nn run examples/hello.s --qpus 12 --buffer out=12x16 --uniforms 'out[q]' q --dump out
"""

import argparse

import numpy as np

from asm import element_number, kernel, r0, r1, ra, uniform, vpm


@kernel
def hello(a):
    a.mov(ra[0], uniform)                   # this QPU's output address
    a.mov(r1, uniform)                      # this QPU's index q
    a.shl(r1, r1, 4)
    a.add(r0, r1, element_number)           # 16 * q + i
    a.mutex_acquire()
    a.setup_vpm_write(y=0)
    a.mov(vpm, r0)
    a.setup_dma_store(units=1, depth=16, y=0)
    a.start_dma_store(ra[0])
    a.wait_dma_store()
    a.mutex_release()
    a.exit()


def run(device, num_qpus=12):
    out = device.alloc((num_qpus, 16), np.uint32)
    device.execute(hello.assemble(), num_qpus=num_qpus,
                   uniforms=[[out[q:q + 1].address, q] for q in range(num_qpus)])
    expected = np.arange(16 * num_qpus, dtype=np.uint32).reshape(num_qpus, 16)
    assert np.array_equal(out, expected), out
    return np.asarray(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=int, metavar="QPUS", help="run on this many QPUs")
    args = parser.parse_args()
    print("# examples/hello.py as text (python examples/hello.py > examples/hello.s). Run it:")
    print("#   vc4nn run examples/hello.s --qpus 12 --buffer out=12x16 --uniforms 'out[q]' q "
          "--dump out")
    print(hello.assemble().disassemble(), end="")
    if args.run:
        import vc4nn
        with vc4nn.open_device() as device:
            print(run(device, args.run))


if __name__ == "__main__":
    main()
