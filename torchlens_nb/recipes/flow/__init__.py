"""How information flows through the model: ``batch_independence``, ``causal_dependency``,
``leakage_poison`` and ``prime_dims``."""
