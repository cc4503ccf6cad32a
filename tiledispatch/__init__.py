"""tiledispatch: grouped-convolution kernels for NVIDIA Hopper, picked by learned models, served over gRPC.

Sub-packages (each maps a top-level folder of the repository):
``tiledispatch.native`` (native/), ``tiledispatch.models`` (models/), ``tiledispatch.server`` (server/),
``tiledispatch.client`` (client/) and the generated API ``tiledispatch.v1`` (proto/tiledispatch/v1/).
Importing any of them has no side effects.
"""

__version__ = "0.1.0"
