"""Capture: record what a PyTorch model did into a :class:`Trace`."""

from ._backward import BackwardPass, GradFnFire
from ._blind_spots import BlindSpot, BlindSpotKind, opaque_modules
from ._capture import call_arguments, run_capture, trace, validate_model
from ._funcs import func_name
from ._op import HookKind, Op
from ._recorder import Tripwire
from ._recording import ModuleCall
from ._selectors import AnySelector, FuncSelector, ModuleSelector, Selector, func, module
from ._tensors import iter_tensors
from ._trace import PartialTrace, Trace

__all__ = [
    "AnySelector",
    "BackwardPass",
    "BlindSpot",
    "BlindSpotKind",
    "FuncSelector",
    "GradFnFire",
    "HookKind",
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
    "opaque_modules",
    "run_capture",
    "trace",
    "validate_model",
]
