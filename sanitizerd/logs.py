"""structlog configuration: JSON lines on stderr, one place, once per process."""

from __future__ import annotations

import logging
import sys

import structlog


def configure(level: str = "info") -> None:
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        # One write per line: the listener and its workers share stderr, and print() writes the newline apart, so
        # two processes' lines could run together (seen: a worker's line and the next on one line of the file).
        logger_factory=structlog.WriteLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,  # SIGHUP may change the level: loggers must see the new configuration
    )
