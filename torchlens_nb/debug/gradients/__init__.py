"""Gradient health: saved gradients ranked and flagged, with the frontier."""

from ._grad_health import grad_health, grad_health_rows

__all__ = ["grad_health", "grad_health_rows"]
