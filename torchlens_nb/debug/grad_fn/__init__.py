"""The autograd graph of a tensor you already have: walk_grad_fn and sketch_grad_fn."""

from ._sketch import sketch_grad_fn
from ._walk import walk_grad_fn

__all__ = ["sketch_grad_fn", "walk_grad_fn"]
