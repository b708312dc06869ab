"""The live seam between a session and its notebook dashboard: throttled increments."""
