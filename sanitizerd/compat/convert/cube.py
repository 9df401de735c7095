"""cube records -> events (placeholder: filled by its family)."""
