"""Findings: the model, its msSanitizer text rendering, and the persistent store."""

from sanitizerd_protocol.model import ERROR, KINDS, WARNING, Finding, Frame, make_finding

__all__ = ["ERROR", "KINDS", "WARNING", "Finding", "Frame", "make_finding"]
