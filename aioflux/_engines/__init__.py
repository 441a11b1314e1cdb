"""_engines."""
