"""The archive of pruned sessions: store, query, restore into state.db, export."""
