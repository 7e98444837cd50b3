"""The conformance report: one row per check, as a table for people and JSON for machines."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from protocol import cut_utf8

if TYPE_CHECKING:
    from protocol import JSONObject

__all__ = (
    "EXIT_BAD_USAGE",
    "EXIT_FAILED",
    "EXIT_OK",
    "CheckResult",
    "ConformanceReport",
    "Outcome",
)

#: ``supervisor check``: every check passed or was skipped.
EXIT_OK: Final = 0
#: ``supervisor check``: at least one check failed.
EXIT_FAILED: Final = 1
#: ``supervisor check``: bad usage (no program, unknown client profile or check, bad
#: ``--launch`` JSON) or the program could not be started at all; nothing was checked.
EXIT_BAD_USAGE: Final = 2

#: Evidence longer than this (UTF-8 bytes) is cut, so one chatty peer cannot flood a table.
_EVIDENCE_BYTES: Final = 600


class Outcome(enum.Enum):
    """The result of one check."""

    PASS = "pass"
    FAIL = "fail"
    #: The check could not run here (a capability the program does not announce, no
    #: debuggee to launch, no procfs) -- neither a pass nor a failure.
    SKIP = "skip"


@dataclass(frozen=True)
class CheckResult:
    """One row of the report.

    Attributes:
        check: The check's name (``initialize``, ``shutdown-exit``, ...).
        outcome: pass, fail or skip.
        evidence: What was observed (timings in ms, exit status, pids left behind, ...).
        rule: The rule checked, with the section of the specification it comes from.
    """

    check: str
    outcome: Outcome
    evidence: str
    rule: str

    def to_json(self) -> JSONObject:
        return {
            "check": self.check,
            "result": self.outcome.value,
            "evidence": self.evidence,
            "rule": self.rule,
        }


@dataclass
class ConformanceReport:
    """Every check run against one program.

    Attributes:
        protocol: ``"lsp"`` or ``"dap"``.
        argv: The program checked.
        client: The client-capability profile used (``vscode``, ``neovim``, ``helix``).
        results: One :class:`CheckResult` per check, in the order they ran.
    """

    protocol: str
    argv: list[str]
    client: str
    results: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No check failed (skips do not count against the program)."""
        return all(r.outcome is not Outcome.FAIL for r in self.results)

    @property
    def failed(self) -> list[str]:
        """Names of the failed checks."""
        return [r.check for r in self.results if r.outcome is Outcome.FAIL]

    def outcome_of(self, check: str) -> Outcome:
        """The outcome of ``check``.

        Raises:
            KeyError: No such check ran.
        """
        for r in self.results:
            if r.check == check:
                return r.outcome
        raise KeyError(check)

    def add(self, check: str, outcome: Outcome, evidence: str, rule: str) -> None:
        self.results.append(CheckResult(check, outcome, cut_utf8(evidence, _EVIDENCE_BYTES), rule))

    def exit_status(self) -> int:
        """:data:`EXIT_OK` or :data:`EXIT_FAILED`."""
        return EXIT_OK if self.ok else EXIT_FAILED

    def to_json(self) -> JSONObject:
        return {
            "protocol": self.protocol,
            "argv": list(self.argv),
            "client": self.client,
            "ok": self.ok,
            "results": [r.to_json() for r in self.results],
        }

    def table(self, *, width: int = 100) -> str:
        """The report as plain text: a table (check, result, evidence), then the rules."""
        import textwrap

        name_w = max([len("check"), *(len(r.check) for r in self.results)])
        text_w = max(30, width - name_w - 10)
        lines = [
            f"{self.protocol.upper()} conformance of: {' '.join(self.argv)}"
            f"  (client profile: {self.client})",
            "",
            f"{'check':<{name_w}}  result  evidence",
            f"{'-' * name_w}  ------  {'-' * min(text_w, 40)}",
        ]
        for r in self.results:
            for i, line in enumerate(textwrap.wrap(r.evidence, text_w) or [""]):
                head = (
                    f"{r.check:<{name_w}}  {r.outcome.value:<6}" if i == 0 else " " * (name_w + 8)
                )
                lines.append(f"{head}  {line}")
        counts = {o: sum(r.outcome is o for r in self.results) for o in Outcome}
        lines += [
            "",
            f"{counts[Outcome.PASS]} passed, {counts[Outcome.FAIL]} failed,"
            f" {counts[Outcome.SKIP]} skipped",
            "",
            "rules:",
        ]
        for r in self.results:
            wrapped = textwrap.wrap(r.rule, width - name_w - 4)
            for i, line in enumerate(wrapped):
                lines.append(f"  {r.check if i == 0 else '':<{name_w}}  {line}")
        return "\n".join(lines)
