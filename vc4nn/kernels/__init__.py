"""QPU kernels written with the ``asm`` DSL. ``sgemm`` is the model kernel (docs/sgemm.md)."""

from .sgemm import SgemmPlan, program_for as sgemm_program, sgemm_kernel, uniform_streams as sgemm_uniforms

__all__ = ["SgemmPlan", "sgemm_kernel", "sgemm_program", "sgemm_uniforms"]
