"""examples/pytest_lsp_port: pytest-lsp's documented examples on the supervisor's fixtures,
run against real pylsp as an author's own suite (its own pytest.ini, pytest-asyncio's
``auto`` mode) -- issue 28."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.check.test_plugin import run_pytest

pytest.importorskip("pylsp")
pytest.importorskip("pytest_asyncio")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pytest_lsp_port"


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs procfs")
def test_the_ported_pytest_lsp_examples_pass_against_pylsp() -> None:
    done = run_pytest(EXAMPLE, "-rA")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert re.search(r"\b3 passed\b", output), output
    for test in ("test_completions", "test_diagnostics", "test_hover"):
        assert f"PASSED test_pylsp.py::{test}" in output, output
