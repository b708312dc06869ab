"""Parameter scans and the batched kernels behind them: norms, the tensor scan, ``param_health``
and the session's scheduled ``param_scan``."""
