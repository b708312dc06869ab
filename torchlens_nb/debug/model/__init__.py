"""The model and its environment: doctor, guess_input_shape, count_compiles, graph_breaks."""

from ._compile import CompileCounts, count_compiles, graph_breaks
from ._doctor import capabilities, doctor
from ._shape_guess import guess_input_shape

__all__ = [
    "CompileCounts",
    "capabilities",
    "count_compiles",
    "doctor",
    "graph_breaks",
    "guess_input_shape",
]
