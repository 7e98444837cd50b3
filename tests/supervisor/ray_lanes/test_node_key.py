"""The lanes file's ``node`` key (``supervisor run --ray``), and ``--ray`` refusals that
need no cluster. Runs without Ray."""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING

import pytest

from supervisor._cli._runfile import RunFileError, parse_run_file

if TYPE_CHECKING:
    from pathlib import Path


def parse(text: str, directory: Path) -> list[str | None]:
    run_file = parse_run_file(textwrap.dedent(text), path="lanes.toml", directory=str(directory))
    return [job.node for job in run_file.jobs]


def test_node_pins_by_label_or_resource_and_jobs_without_it_follow(tmp_path: Path) -> None:
    text = """
    [[job]]
    project = "."
    kind = "build"
    argv = ["make"]
    node = "zone=eu"

    [[job]]
    project = "."
    kind = "test"
    argv = ["make", "check"]

    [[job]]
    project = "/tmp"
    kind = "command"
    argv = ["true"]
    node = "bigbox"
    """
    assert parse(text, tmp_path) == ["zone=eu", None, "bigbox"]


@pytest.mark.parametrize(
    ("node", "line", "fragment"),
    [
        ("1", 6, "'node' must be a string"),
        ('""', 6, "'node' must be \"label=value\""),
        ('"=eu"', 6, "'node' must be \"label=value\""),
        ('"zone="', 6, "'node' must be \"label=value\""),
    ],
)
def test_bad_node_names_its_line(tmp_path: Path, node: str, line: int, fragment: str) -> None:
    text = f"""\
[[job]]
project = "."
kind = "build"
argv = ["make"]

node = {node}
"""
    with pytest.raises(RunFileError) as caught:
        parse(text, tmp_path)
    assert caught.value.line == line
    assert fragment in caught.value.message


def test_jobs_of_one_project_agree_on_its_node(tmp_path: Path) -> None:
    text = """\
[[job]]
project = "."
kind = "build"
argv = ["make"]
node = "zone=eu"

[[job]]
project = "."
kind = "test"
argv = ["make", "check"]
node = "zone=us"
"""
    with pytest.raises(RunFileError) as caught:
        parse(text, tmp_path)
    assert caught.value.line == 11
    assert "node 'zone=us' differs from 'zone=eu' (line 1)" in caught.value.message


def test_a_bad_file_is_refused_before_ray_is_touched(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('[[job]]\nproject = "."\nkind = "build"\nargv = ["make"]\nnode = 3\n')
    result = subprocess.run(
        [sys.executable, "-m", "supervisor", "run", str(path), "--ray", "auto"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert f"{path}:5: 'node' must be a string" in result.stderr


def test_without_ray_the_option_says_which_extra_to_install(tmp_path: Path) -> None:
    path = tmp_path / "ok.toml"
    path.write_text('[[job]]\nproject = "."\nkind = "command"\nargv = ["/bin/true"]\n')
    # ``sys.modules["ray"] = None`` makes ``import ray`` fail as if it were not installed.
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "from supervisor._cli._main import main\n"
        f"sys.exit(main(['run', {str(path)!r}, '--ray', 'auto']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 2
    assert "--ray needs Ray: pip install 'trio-process-supervisor[ray]'" in result.stderr


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs the [ray] extra")
def test_an_address_nothing_answers_at_is_refused_at_once(tmp_path: Path) -> None:
    path = tmp_path / "ok.toml"
    path.write_text('[[job]]\nproject = "."\nkind = "command"\nargv = ["/bin/true"]\n')
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Closed again: nothing listens there (Ray alone would retry for minutes).
    result = subprocess.run(
        [sys.executable, "-m", "supervisor", "run", str(path), "--ray", f"127.0.0.1:{port}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2
    assert f"--ray 127.0.0.1:{port}: nothing answers at 127.0.0.1:{port}" in result.stderr
