"""Suppression rules: known findings hidden with a reason, from a TOML file (`run --suppressions FILE`, the daemon's
``suppressions`` setting), and the matcher the daemon marks findings with before it counts and stores them.

The file holds ``[[suppress]]`` tables::

    [[suppress]]
    kind = "misaligned_access"          # or kinds = ["race_raw", "race_war"]; none: any kind
    kernel = "add_custom*"              # fnmatch patterns, case-sensitive; each one given must match
    file = "*/add_custom.cpp"           # a frame of the finding's location or stacks
    function = "CopyIn"
    reason = "UB tail read, fixed in the next CANN (JIRA-1234)"

Every rule needs a reason and at least one of kind, kernel, file and function: a rule that names nothing would
hide every finding. A suppressed finding is still stored and reported, marked with the rule's reason; it is
counted as suppressed, never as an error or a warning.
"""

from __future__ import annotations

import fnmatch
import re
import tomllib
from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec

from sanitizerd_protocol.model import KINDS, MAX_SUPPRESSIONS, Finding, Frame, Suppression

_KEYS = {"kind", "kinds", "kernel", "file", "function", "reason"}
MAX_FILE_BYTES = 1 << 20


class SuppressionError(ValueError):
    """A suppression file that cannot be used; the message names the file and the rule."""


def load(path: Path) -> list[Suppression]:
    """The rules of a suppression file, each checked; SuppressionError says what is wrong and where."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise SuppressionError(f"{path}: larger than {MAX_FILE_BYTES} bytes")
        document = tomllib.loads(path.read_text())
    except OSError as exc:
        raise SuppressionError(f"cannot read suppression file {path}: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SuppressionError(f"{path}: not TOML: {exc}") from None
    return parse(document, where=str(path))


def parse(document: dict[str, object], *, where: str) -> list[Suppression]:
    unknown = sorted(set(document) - {"suppress"})
    if unknown:
        raise SuppressionError(f"{where}: unknown table or key {', '.join(unknown)} (rules are [[suppress]] tables)")
    tables = document.get("suppress", [])
    if not isinstance(tables, list):
        raise SuppressionError(f"{where}: suppress must be an array of tables ([[suppress]])")
    if len(tables) > MAX_SUPPRESSIONS:
        raise SuppressionError(f"{where}: {len(tables)} rules; at most {MAX_SUPPRESSIONS}")
    return [_rule(table, f"{where}: rule {i + 1}") for i, table in enumerate(tables)]


def _rule(table: object, where: str) -> Suppression:
    if not isinstance(table, dict):
        raise SuppressionError(f"{where}: not a table")
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise SuppressionError(f"{where}: unknown key {', '.join(unknown)} (the keys: {', '.join(sorted(_KEYS))})")
    fields = dict(table)
    if "kind" in fields and "kinds" in fields:
        raise SuppressionError(f"{where}: give kind or kinds, not both")
    kinds = fields.pop("kind", fields.pop("kinds", []))
    fields["kinds"] = [kinds] if isinstance(kinds, str) else kinds
    try:
        rule = msgspec.convert(fields, Suppression)
    except msgspec.ValidationError as exc:
        raise SuppressionError(f"{where}: {exc}") from None
    unknown_kinds = [kind for kind in rule.kinds if kind not in KINDS]
    if unknown_kinds:
        raise SuppressionError(f"{where}: unknown finding kind {', '.join(unknown_kinds)}")
    if not (rule.kinds or rule.kernel or rule.file or rule.function):
        raise SuppressionError(f"{where}: names no kind, kernel, file or function, so it would hide every finding")
    return rule


class Suppressor:
    """Rules compiled once (a session's job's and the host's); marks the findings they match."""

    def __init__(self, rules: Iterable[Suppression]) -> None:
        self._rules = [(rule, _compiled(rule.kernel), _compiled(rule.file), _compiled(rule.function))
                       for rule in rules]  # fmt: skip

    def __bool__(self) -> bool:
        return bool(self._rules)

    def mark(self, findings: list[Finding]) -> None:
        """Mark each finding the first matching rule names (findings are few: a loop per finding, not per record)."""
        for finding in findings:
            if finding.suppressed:
                continue
            reason = self.reason(finding)
            if reason is not None:
                finding.suppressed, finding.suppression = True, reason

    def reason(self, finding: Finding) -> str | None:
        for rule, kernel, file, function in self._rules:
            if rule.kinds and finding.kind not in rule.kinds:
                continue
            if kernel is not None and (finding.kernel is None or not kernel.match(finding.kernel)):
                continue
            if file is not None and not any(file.match(frame.file) for frame in _frames(finding)):
                continue
            if function is not None and not any(function.match(frame.function) for frame in _frames(finding)):
                continue
            return rule.reason
        return None


def _compiled(pattern: str) -> re.Pattern[str] | None:
    return re.compile(fnmatch.translate(pattern)) if pattern else None


def _frames(finding: Finding) -> Iterator[Frame]:
    if finding.location is not None:
        yield finding.location
    yield from finding.stack
    for access in finding.accesses:
        if access.location is not None:
            yield access.location
        yield from access.stack
