"""SQLite on a live Hermes database: connections, the budgeted writer, FTS5 merges, schema, holders."""
