"""A README-style program embedding the Core type-checks under ``mypy --strict``, and runs.

The typed helpers (``core.process_run`` -> ``ProcessResult`` ...) are generated from the
declarations in ``supervisor/_api``; this is the user's side of them. mypy is in the
``[dev]`` extra: the check is skipped where it is not installed (CI's ``.ci/run`` mypy step
covers ``tests/typing`` as well).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import trio

from tests.typing.readme_embedding import main

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def test_readme_embedding_type_checks_under_mypy_strict() -> None:
    pytest.importorskip("mypy")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--cache-dir=/dev/null",
            str(HERE / "readme_embedding.py"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_readme_embedding_runs() -> None:
    assert trio.run(main) == 0
