"""Data recipes: ``data_sanity``, ``class_balance`` and ``confident_errors``."""
