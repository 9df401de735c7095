"""moves records -> events (placeholder: filled by its family)."""
