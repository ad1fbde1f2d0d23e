"""monitoring package."""
