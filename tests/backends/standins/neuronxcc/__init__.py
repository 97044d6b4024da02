"""STAND-IN for AWS's `neuronxcc` (Neuron compiler) package, for tests only.

It imitates the small part of the API that accelopt-mcp's `nki` backend calls, running kernels
as plain numpy code; it compiles nothing and knows no hardware.
"""

__version__ = "0.0.0+standin"
