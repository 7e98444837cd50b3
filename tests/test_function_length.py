"""No function of ``supervisor/``, ``protocol/`` or ``lanes/`` is over 100 lines (issue 24):
a longer one is split into steps that each have a name.

A function's lines run from its first decorator to its last line, nested functions
included, without its docstring: a public function's docstring is its contract (every
argument, error and unit), which the developers' guide asks for in full, so it does not
count against the code's length.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("supervisor", "protocol", "lanes")
MAX_LINES = 100


def _length(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    assert node.end_lineno is not None
    lines = node.end_lineno - first + 1
    head = node.body[0]
    if (
        isinstance(head, ast.Expr)
        and isinstance(head.value, ast.Constant)
        and isinstance(head.value.value, str)
    ):
        assert head.end_lineno is not None
        lines -= head.end_lineno - head.lineno + 1
    return lines


def _functions(source: str, name: str) -> list[tuple[str, int]]:
    """``(where, lines)`` of every function (methods and nested ones too) in ``source``."""
    return [
        (f"{name}:{node.lineno} {node.name}", _length(node))
        for node in ast.walk(ast.parse(source, name))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]


def test_no_function_is_over_100_lines() -> None:
    long = [
        f"{where}: {lines} lines"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for where, lines in _functions(path.read_text(), str(path.relative_to(ROOT)))
        if lines > MAX_LINES
    ]
    assert long == []


def test_the_count() -> None:
    """Decorators and nested functions count; the docstring does not."""
    body = "".join(f"    x{i} = {i}\n" for i in range(98))
    source = f'@decorator\nasync def f():\n    """A\n    docstring."""\n{body}'
    assert _functions(source, "m.py") == [("m.py:2 f", 100)]
    nested = f"def g():\n    def h():\n{body.replace('    ', '        ')}    return h\n"
    assert dict(_functions(nested, "m.py"))["m.py:1 g"] == 101
