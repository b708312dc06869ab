"""Where a forward's cost goes: hot_path, recompute_candidates, op FLOPs and the dispatch cross-check."""

from ._cost import hot_path, hot_path_rows, recompute_candidates
from ._flops import flops_vs_dispatch, op_flops

__all__ = ["flops_vs_dispatch", "hot_path", "hot_path_rows", "op_flops", "recompute_candidates"]
