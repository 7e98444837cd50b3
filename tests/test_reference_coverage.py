"""docs/reference-coverage.md stays true: every row names code and tests that exist.

The table traces each in-scope item of the reference (core-api.md, plugin-contract.md,
plugin-sdk-node.md, ide-backend-protocol.schema.json) to the code that implements it and the
test that asserts it. This test fails when

- a row marked ``implemented`` or ``differs`` names no test, or a test node id that does not
  exist (the file is parsed for the function, so a renamed or deleted test is caught);
- such a row names no code, or a ``path:Symbol[.member]`` whose symbol is not defined there;
- a row is neither implemented, nor out of scope with a reason, nor owned by an issue named
  in the table's list of open issues (with a note saying what is left: partial, missing or
  untested);
- a ``differs`` row gives no reason;
- an id repeats, or a method or notification of ide-backend-protocol.schema.json is missing
  from the dialect table.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "reference-coverage.md"

COLUMNS = ["id", "item", "status", "code", "test", "note"]
DIALECT_COLUMNS = ["schema name", "kind", "serve equivalent", "status", "note"]
_OWNED = re.compile(r"owned by issue (\d+)( \(follow-up\))?")
_LEFT = ("partial", "missing", "untested")
_TEST_ID = re.compile(r"(tests/[\w/]+\.py)::(\w+)(?:::(\w+))?")
_CODE_REF = re.compile(r"((?:supervisor|protocol|lanes)/[\w/]+\.py)(?::([\w.]+))?")

# The schema's names, listed here so the test needs nothing outside the repository.
SCHEMA_METHODS = [
    "initialize",
    "textDocument/completion",
    "textDocument/hover",
    "textDocument/definition",
    "textDocument/documentSymbol",
    "mcpp-ide/settings/update",
    "mcpp-ide/settings/registry",
    "mcpp-ide/settings/preset",
    "mcpp-ide/i18n/bundle",
    "mcpp-ide/selfCheck",
    "mcpp-ide/commands/list",
    "mcpp-ide/menu/quick",
    "mcpp-ide/languageService/status",
    "mcpp-ide/source/entries",
    "mcpp-ide/test/cases",
    "mcpp-ide/test/runCases",
    "mcpp-ide/projects/list",
    "mcpp-ide/projects/forFile",
    "mcpp-ide/project/summary",
    "mcpp-ide/project/new",
    "mcpp-ide/result/last",
    "mcpp-ide/job/start",
    "mcpp-ide/job/cancel",
    "mcpp-ide/job/list",
    "mcpp-ide/run/launch",
    "mcpp-ide/debug/configuration",
    "mcpp-ide/test/list",
    "mcpp-ide/library/search",
    "mcpp-ide/library/indexes",
    "mcpp-ide/library/add",
    "mcpp-ide/library/updateIndex",
    "mcpp-ide/toolchains/list",
    "mcpp-ide/toolchains/install",
    "mcpp-ide/toolchains/setDefault",
    "mcpp-ide/targets/list",
    "mcpp-ide/cache/inventory",
    "mcpp-ide/cache/plan",
    "mcpp-ide/cache/apply",
    "mcpp-ide/graph/packages",
    "mcpp-ide/graph/modules",
    "mcpp-ide/pack/formats",
    "mcpp-ide/pack/start",
    "mcpp-ide/manifest/check",
    "mcpp-ide/mcpp/exec",
    "mcpp-ide/languageService/exec",
    "mcpp-ide/project/files",
    "mcpp-ide/project/mcpp",
    "mcpp-ide/project/refresh",
    "mcpp-ide/capabilities/explain",
    "mcpp-ide/report/collect",
    "shutdown",
    "exit",
]
SCHEMA_NOTIFICATIONS = [
    "textDocument/publishDiagnostics",
    "window/showMessage",
    "mcpp-ide/job/started",
    "mcpp-ide/job/output",
    "mcpp-ide/job/plan",
    "mcpp-ide/job/progress",
    "mcpp-ide/job/diagnostic",
    "mcpp-ide/job/artifact",
    "mcpp-ide/job/record",
    "mcpp-ide/job/finished",
    "mcpp-ide/test/result",
    "mcpp-ide/test/summary",
    "mcpp-ide/result/changed",
    "mcpp-ide/manifest/changed",
    "mcpp-ide/manifest/diagnostics",
    "mcpp-ide/project/mcppChanged",
    "mcpp-ide/test/caseResult",
    "mcpp-ide/languageService/changed",
]


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def _tables(text: str) -> list[tuple[list[str], list[tuple[int, list[str]]]]]:
    """Every markdown table in the text: (header, [(line number, cells)])."""
    tables: list[tuple[list[str], list[tuple[int, list[str]]]]] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        if (
            lines[index].startswith("|")
            and index + 1 < len(lines)
            and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[index + 1].strip())
        ):
            header = _cells(lines[index])
            rows = []
            index += 2
            while index < len(lines) and lines[index].startswith("|"):
                rows.append((index + 1, _cells(lines[index])))
                index += 1
            tables.append((header, rows))
            continue
        index += 1
    return tables


def _open_issues(text: str) -> set[int]:
    match = re.search(r"^Open issues named here: (.*)$", text, re.MULTILINE)
    assert match, "the table must list the open issues it names"
    return {int(n) for n in re.findall(r"\d+", match.group(1))}


@functools.cache
def _defined(path: str) -> dict[str, set[str]]:
    """Module-level names of a file, each with the names defined in its body (classes)."""
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    names: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            members = set()
            for inner in node.body:
                if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    members.add(inner.name)
                elif isinstance(inner, ast.AnnAssign) and isinstance(inner.target, ast.Name):
                    members.add(inner.target.id)
                elif isinstance(inner, ast.Assign):
                    members.update(t.id for t in inner.targets if isinstance(t, ast.Name))
            names[node.name] = members
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = set()
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = set()
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = set()
    return names


def _code_problem(ref: str) -> str | None:
    match = _CODE_REF.fullmatch(ref)
    if not match:
        return f"{ref!r} is not path.py[:Symbol]"
    path, symbol = match.groups()
    if not (ROOT / path).is_file():
        return f"{path} does not exist"
    if symbol is None:
        return None
    head, _, member = symbol.partition(".")
    names = _defined(path)
    if head not in names:
        return f"{path} defines no {head}"
    if member and member.split(".")[0] not in names[head]:
        return f"{path}:{head} has no member {member}"
    return None


def _test_problem(ref: str) -> str | None:
    match = _TEST_ID.fullmatch(ref)
    if not match:
        return f"{ref!r} is not tests/path.py::test_name"
    path, first, second = match.groups()
    if not (ROOT / path).is_file():
        return f"{path} does not exist"
    names = _defined(path)
    if second is None:
        if first not in names or not first.startswith("test"):
            return f"{path} has no test {first}"
    elif first not in names or second not in names[first]:
        return f"{path} has no test {first}::{second}"
    return None


def _row_problems(cells: list[str], open_issues: set[int]) -> list[str]:
    row_id, _item, status, code, test, note = cells
    problems: list[str] = []
    codes = [] if code in ("", "-") else [c.strip() for c in code.split("<br>")]
    tests = [] if test in ("", "-") else [t.strip() for t in test.split("<br>")]
    if status in ("implemented", "differs"):
        if not tests:
            problems.append("names no test")
        if not codes:
            problems.append("names no code")
        if status == "differs" and not note:
            problems.append("differs without a reason")
    elif status == "out of scope":
        if not note:
            problems.append("out of scope without a reason")
    elif owned := _OWNED.fullmatch(status):
        if int(owned.group(1)) not in open_issues:
            problems.append(f"issue {owned.group(1)} is not in the list of open issues")
        if not note.startswith(_LEFT):
            problems.append("an owned row must say what is left (partial/missing/untested: ...)")
    else:
        problems.append(f"unknown status {status!r}")
    problems += [p for p in map(_code_problem, codes) if p]
    problems += [p for p in map(_test_problem, tests) if p]
    return [f"{row_id}: {p}" for p in problems]


def _document() -> str:
    return DOC.read_text(encoding="utf-8")


def _item_rows() -> list[tuple[int, list[str]]]:
    rows: list[tuple[int, list[str]]] = []
    for header, table in _tables(_document()):
        if header == COLUMNS:
            rows += table
    return rows


def test_the_table_has_fixed_columns_and_unique_ids() -> None:
    rows = _item_rows()
    assert len(rows) > 500
    bad = [line for line, cells in rows if len(cells) != len(COLUMNS)]
    assert bad == [], f"rows with the wrong number of cells at lines {bad}"
    ids = [cells[0] for _line, cells in rows]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})


def test_every_row_is_implemented_out_of_scope_or_owned_and_names_what_exists() -> None:
    open_issues = _open_issues(_document())
    problems: list[str] = []
    for _line, cells in _item_rows():
        problems += _row_problems(cells, open_issues)
    assert problems == []


def test_every_schema_name_has_a_row_in_the_dialect_table() -> None:
    named: dict[str, str] = {}
    open_issues = _open_issues(_document())
    problems: list[str] = []
    for header, table in _tables(_document()):
        if header == DIALECT_COLUMNS:
            for _line, cells in table:
                name, kind, _equivalent, status, note = cells
                named[name.strip("`")] = kind
                # The same status rules as the item table, without code and test columns
                # (the items behind each name carry those).
                row = [name, kind, status, "-", "-", note]
                problems += [
                    p
                    for p in _row_problems(row, open_issues)
                    if "names no" not in p or status not in ("implemented", "differs")
                ]
                if status == "differs" and not note:
                    problems.append(f"{name}: differs without a reason")
    assert problems == []
    for method in SCHEMA_METHODS:
        assert named.get(method) == "method", method
    for notification in SCHEMA_NOTIFICATIONS:
        assert named.get(notification) == "notification", notification


@pytest.mark.parametrize(
    ("cells", "expected"),
    [
        (["X1", "i", "implemented", "-", "-", ""], ["names no test", "names no code"]),
        (
            ["X2", "i", "implemented", "protocol/_codes.py:NoSuch", "tests/nowhere.py::test_x", ""],
            ["protocol/_codes.py defines no NoSuch", "tests/nowhere.py does not exist"],
        ),
        (
            [
                "X3",
                "i",
                "differs",
                "protocol/_codes.py:CoreErrorCode.nope",
                "tests/test_reference_coverage.py::test_gone",
                "",
            ],
            ["differs without a reason", "has no member nope", "has no test test_gone"],
        ),
        (["X4", "i", "out of scope", "-", "-", ""], ["out of scope without a reason"]),
        (["X5", "i", "owned by issue 99", "-", "-", "missing: x"], ["issue 99 is not"]),
        (["X6", "i", "owned by issue 20", "-", "-", "later"], ["must say what is left"]),
        (["X7", "i", "done", "-", "-", ""], ["unknown status"]),
        (["X8", "i", "out of scope", "-", "-", "editor feature"], []),
    ],
)
def test_the_checks_catch_what_they_claim(cells: list[str], expected: list[str]) -> None:
    problems = _row_problems(cells, {20})
    assert len(problems) == len(expected), problems
    for problem, fragment in zip(problems, expected, strict=True):
        assert fragment in problem
