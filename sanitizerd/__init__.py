"""sanitizerd: msSanitizer's detectors as a shared host service."""

__version__ = "0.1.0"
