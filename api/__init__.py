"""api package."""
