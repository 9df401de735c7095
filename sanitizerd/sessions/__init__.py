"""Per-connection and per-job state, and the async pumps that drive it."""
