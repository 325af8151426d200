"""Snapshots of state.db: take, rotate, restore, and compact (space back while Hermes runs)."""
