"""What CI systems read from ``supervisor run``: GitHub Actions workflow commands, JUnit XML.

GitHub Actions (``GITHUB_ACTIONS=true``): jobs of several lanes print at once, and a log
group (``::group::`` ... ``::endgroup::``) can neither nest nor interleave, so each job's
output is kept (:class:`GroupBuffer`, bounded) and printed as one group when the job ends,
titled with its outcome; each job that did not end as expected gets one ``::error`` line,
an annotation on its line of the lanes file. The job's own lines go into its group as they
came (escape sequences removed), so a tool's own annotations still work, as in a plain step.

JUnit XML (``--junit FILE``): one ``<testcase>`` per job, named by the job, its class the
lane; a job that did not end as expected is a ``<failure>`` (message: expected and got, body:
the end of its output), one that never ran as expected is ``<skipped>``, every other one
passed. The file is written whole when the run ends, interrupted runs included.

Reference: https://docs.github.com/en/actions/reference/workflow-commands-for-github-actions
and the JUnit schema most CI systems read (https://github.com/testmoapp/junitxml).
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = (
    "ENDGROUP",
    "GROUP_MAX_BYTES",
    "GroupBuffer",
    "JUnitCase",
    "error_command",
    "group_command",
    "in_github_actions",
    "write_junit",
)

#: The output kept per job for its log group, in bytes of text; past it, the last bytes.
GROUP_MAX_BYTES: Final = 1024 * 1024


def in_github_actions() -> bool:
    """Whether this runs as a GitHub Actions step (the runner sets ``GITHUB_ACTIONS=true``)."""
    return os.environ.get("GITHUB_ACTIONS") == "true"


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def error_command(*, file: str, line: int, title: str, message: str) -> str:
    """An ``::error`` workflow command: an annotation at ``file:line``.

    Args:
        file: The lanes file as the user named it (GitHub resolves it from the workspace).
        line: Its 1-based line (0: no line).
        title: The annotation's title.
        message: Its text (newlines allowed: escaped as the runner wants).
    """
    where = f"file={_escape_property(file)}"
    if line > 0:
        where += f",line={line}"
    return f"::error {where},title={_escape_property(title)}::{_escape_data(message)}"


def group_command(title: str) -> str:
    """``::group::title`` (one line: a newline would end the command)."""
    return f"::group::{title.replace(chr(10), ' ').replace(chr(13), ' ')}"


ENDGROUP: Final = "::endgroup::"


#: The longest line a group keeps, in characters (the rest of it is dropped).
GROUP_MAX_LINE_CHARS: Final = 64 * 1024


class GroupBuffer:
    """One job's output for its log group, as it came: the last :data:`GROUP_MAX_BYTES`.

    Text is kept raw, in lines (:meth:`feed`); the reporter makes each line safe to show when
    it prints the group. Memory stays within the bound plus one line.
    """

    __slots__ = ("_bytes", "_lines", "_partial", "dropped_bytes")

    def __init__(self) -> None:
        self._lines: deque[str] = deque()
        self._bytes = 0
        self._partial = ""
        #: Bytes of lines dropped from the front.
        self.dropped_bytes = 0

    def feed(self, text: str) -> None:
        """Take a chunk of output (lines may be split between chunks)."""
        *ended, rest = text.split("\n")
        for piece in ended:
            self._add(self._partial + piece)
            self._partial = ""
        self._partial = (self._partial + rest)[:GROUP_MAX_LINE_CHARS]

    def _add(self, line: str) -> None:
        line = line[:GROUP_MAX_LINE_CHARS]
        size = len(line.encode("utf-8", "replace")) + 1
        self._lines.append(line)
        self._bytes += size
        while self._bytes > GROUP_MAX_BYTES and len(self._lines) > 1:
            dropped = self._lines.popleft()
            dropped_size = len(dropped.encode("utf-8", "replace")) + 1
            self._bytes -= dropped_size
            self.dropped_bytes += dropped_size

    def __bool__(self) -> bool:
        return bool(self._lines) or bool(self._partial) or self.dropped_bytes > 0

    def lines(self) -> list[str]:
        """The kept lines, raw (the unfinished last one too), after a notice of what was
        dropped (if anything)."""
        head = []
        if self.dropped_bytes:
            head.append(
                f"[{self.dropped_bytes} bytes of output before these lines are not kept here;"
                " --log-dir keeps every byte]"
            )
        tail = [self._partial] if self._partial else []
        return head + list(self._lines) + tail


@dataclass(frozen=True, slots=True)
class JUnitCase:
    """One job as a JUnit test case.

    Attributes:
        name: The job's name.
        lane: Its lane (the case's ``classname``).
        duration_ms: How long it ran, in milliseconds (0 when it never started).
        line: Its line in the lanes file.
        outcome: ``passed``, ``failed`` (not as expected) or ``skipped`` (never ran, as
            expected).
        message: What happened, in words (``expected ok, got failed (exit 1)``).
        output: The end of its output, for the failure's body and ``<system-out>``.
    """

    name: str
    lane: str
    duration_ms: int
    line: int
    outcome: str
    message: str
    output: str


#: Characters XML 1.0 can not hold, even escaped.
_NOT_XML: Final = re.compile("[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_text(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def write_junit(
    path: str, *, suite: str, file: str, cases: Sequence[JUnitCase], duration_ms: int
) -> None:
    """Write ``cases`` as a JUnit XML report to ``path`` (replaced whole, never half-written).

    Args:
        path: The report file.
        suite: The test suite's name (the lanes file).
        file: The lanes file, for each case's ``file`` attribute.
        cases: One per job, in file order.
        duration_ms: The run's duration in milliseconds.

    Raises:
        OSError: The file can not be written.
    """
    failures = sum(1 for c in cases if c.outcome == "failed")
    skipped = sum(1 for c in cases if c.outcome == "skipped")
    counts = {
        "tests": str(len(cases)),
        "failures": str(failures),
        "errors": "0",
        "skipped": str(skipped),
        "time": f"{duration_ms / 1000:.3f}",
    }
    root = ET.Element("testsuites", {"name": "supervisor run", **counts})
    suite_element = ET.SubElement(root, "testsuite", {"name": _xml_text(suite), **counts})
    for case in cases:
        element = ET.SubElement(
            suite_element,
            "testcase",
            {
                "name": _xml_text(case.name),
                "classname": _xml_text(case.lane),
                "time": f"{case.duration_ms / 1000:.3f}",
                "file": _xml_text(file),
                "line": str(case.line),
            },
        )
        if case.outcome == "failed":
            failure = ET.SubElement(
                element, "failure", {"message": _xml_text(case.message), "type": "unexpected"}
            )
            failure.text = _xml_text(case.output)
        elif case.outcome == "skipped":
            ET.SubElement(element, "skipped", {"message": _xml_text(case.message)})
        if case.output:
            ET.SubElement(element, "system-out").text = _xml_text(case.output)
    ET.indent(root)
    temporary = f"{path}.tmp{os.getpid()}"
    try:
        ET.ElementTree(root).write(temporary, encoding="utf-8", xml_declaration=True)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
