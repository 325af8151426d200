"""The maintenance run: survey -> pure plan -> journaled executor (prune, zombies, files)."""
