"""Counts the end-of-run summary of the fault suite reads (see conftest.py)."""

from __future__ import annotations

from collections import Counter

categories: dict[str, str] = {}
"""Test node id -> its fault category (filled at collection)."""

examples: Counter[str] = Counter()
"""Category -> generated examples tried by property tests (hypothesis)."""
