"""Lineage: the ancestors and descendants of one op, ring by ring."""

from ._walk import lineage

__all__ = ["lineage"]
