"""Neural-network layers on the QPUs (NHWC float32 activations, any device).

Each layer is generated for its exact shape, assembled once and cached; weights are laid out once
by the ``prepare_*`` functions. Argument conventions: ``vc4nn.nn.layer_args``.
"""

from .pointwise import PreparedPointwise, pointwise, prepare_pointwise  # noqa: F401
