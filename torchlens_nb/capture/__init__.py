"""Capture: record what a PyTorch model did into a :class:`Trace`."""

from ._backward import BackwardPass, GradFnFire
from ._capture import call_arguments, run_capture, trace, validate_model
from ._op import Op
from ._recorder import Tripwire, func_name, iter_tensors
from ._selectors import AnySelector, FuncSelector, ModuleSelector, Selector, func, module
from ._trace import ModuleCall, PartialTrace, Trace

__all__ = [
    "AnySelector",
    "BackwardPass",
    "FuncSelector",
    "GradFnFire",
    "ModuleCall",
    "ModuleSelector",
    "Op",
    "PartialTrace",
    "Selector",
    "Trace",
    "Tripwire",
    "call_arguments",
    "func",
    "func_name",
    "iter_tensors",
    "module",
    "run_capture",
    "trace",
    "validate_model",
]
