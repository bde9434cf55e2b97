"""A Python-embedded assembler for the VideoCore IV QPU."""
