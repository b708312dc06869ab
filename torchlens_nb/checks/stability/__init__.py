"""The stability check: loss spikes and divergence warned before they happen (``_stability.py``)."""
