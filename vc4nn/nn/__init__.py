"""Neural-network layers on the QPUs (NHWC float32 activations, any device).

Each layer is generated for its exact shape, assembled once and cached; weights are laid out once
by the ``prepare_*`` functions. Argument conventions: ``vc4nn.nn.layer_args``.
"""

from .avg_pool import avg_pool  # noqa: F401
from .conv2d import PreparedConv2d, conv2d, prepare_conv2d  # noqa: F401
from .depthwise import PreparedDepthwise, depthwise, prepare_depthwise  # noqa: F401
from .elementwise import add  # noqa: F401
from .fully_connected import PreparedFullyConnected, fully_connected, prepare_fully_connected  # noqa: F401
from .global_pool import global_avg_pool  # noqa: F401
from .pointwise import PreparedPointwise, pointwise, prepare_pointwise  # noqa: F401
