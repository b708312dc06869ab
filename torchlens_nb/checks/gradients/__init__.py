"""The gradient checks a session arms: non-finite, magnitude, change, update ratio, watchdog."""
