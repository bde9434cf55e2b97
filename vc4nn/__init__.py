"""vc4nn: QPU programs on the Raspberry Pi's VideoCore IV, and what is built on them."""
