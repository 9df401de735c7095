"""The ``sanitizerd`` command line: msSanitizer's options, parsed and validated the way msSanitizer does."""
