"""Recipes that read or run training: ``overfit_one_batch``, ``gradient_flow``,
``weight_distribution`` and ``update_ratio``."""
