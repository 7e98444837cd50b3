"""The distribution as a reviewer and a user's environment meet it (issue 29).

The wheel and the sdist are built from a copy of this tree by setuptools' own PEP 517 hooks
in a throwaway virtual environment; the wheel is then installed there next to supervisord
(``supervisor`` on PyPI) and PyPI's ``protocol``, which install our top-level names too, and
each of our entry points must name the other package and the fix. The fast tests shadow a
package with a file of the working directory and need nothing from the network; the
throwaway environment needs PyPI (or pip's cache) and is skipped without it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import textwrap
import zipfile
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pathlib import Path

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))
#: What the throwaway environment installs from PyPI: supervisord and PyPI's `protocol`.
SUPERVISORD = "supervisor==4.2.5"
PYPI_PROTOCOL = "protocol==0.37"


def run(
    argv: list[str], *, cwd: str | Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        stdin=subprocess.DEVNULL,
    )


# --- a file of the working directory or of PYTHONPATH (no network) ------------------------


def test_a_protocol_py_in_the_working_directory_is_named_with_the_fix(tmp_path: Path) -> None:
    """`python -m supervisor` from a directory holding a protocol.py failed with `cannot
    import name 'MAX_ECHO_BYTES' from 'protocol'`; now the error names the file and the fix."""
    (tmp_path / "protocol.py").write_text("x = 1\n")
    env = {**os.environ, "PYTHONPATH": REPO}
    for argv in (
        [sys.executable, "-m", "supervisor", "--version"],
        [sys.executable, "-c", "import lanes"],
    ):
        done = run(argv, cwd=tmp_path, env=env)
        assert done.returncode == 1
        assert (
            f"ShadowedPackageError: trio-process-supervisor: Python imports 'protocol' from"
            f" {tmp_path}/protocol.py, which is not ours. A module or directory named"
            " 'protocol' in the current directory or on PYTHONPATH comes before the installed"
            " package. Fix: rename it, or run from another directory."
        ) in done.stderr
    # Ours, from anywhere else.
    assert run([sys.executable, "-c", "import lanes"], cwd=REPO).returncode == 0


def test_the_command_names_a_shadowed_supervisor_package(tmp_path: Path) -> None:
    """A `supervisor` package earlier on the path never runs a line of ours: the command's
    entry point (`_trio_process_supervisor:main`) checks before it imports it."""
    fake = tmp_path / "path" / "supervisor"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("# another project's supervisor package\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'path'}{os.pathsep}{REPO}"}
    code = "import _trio_process_supervisor as d; raise SystemExit(d.main())"
    done = run([sys.executable, "-c", code, "--version"], cwd=tmp_path, env=env)
    assert done.returncode == 1
    assert done.stderr.startswith(
        f"trio-process-supervisor: Python imports 'supervisor' from {fake}/__init__.py,"
        " which is not ours."
    )
    assert "Traceback" not in done.stderr
    # Ours is found and checked, and the command runs.
    ok = run(
        [sys.executable, "-c", code, "--version"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": REPO},
    )
    assert (ok.returncode, ok.stdout.split()[0]) == (0, "supervisor"), ok.stderr


def test_each_package_says_it_is_ours() -> None:
    import lanes
    import protocol
    import supervisor
    from _trio_process_supervisor import DISTRIBUTION, PACKAGES, check

    assert PACKAGES == ("supervisor", "protocol", "lanes")
    for package in (supervisor, protocol, lanes):
        assert package.__distribution__ == DISTRIBUTION
    check()


# --- the built distribution, and other distributions of our names -------------------------


def _copy_of_the_tree(destination: Path) -> Path:
    """This tree without environments, caches and build output (a clean checkout's files)."""
    ignored = shutil.ignore_patterns(
        ".git",
        ".venv*",
        ".peers",
        "__pycache__",
        "*.egg-info",
        "build",
        "dist",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        ".hypothesis",
    )
    return shutil.copytree(REPO, destination, ignore=ignored, symlinks=True)


class Throwaway:
    """A virtual environment of its own, our dependencies borrowed from this one."""

    def __init__(self, root: Path) -> None:
        self.root = root
        made = run([sys.executable, "-m", "venv", str(root)])
        assert made.returncode == 0, made.stderr
        self.python = str(root / "bin" / "python")
        purelib = run(
            [self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
        )
        self.site = purelib.stdout.strip()
        # Our dependencies (trio, msgspec, ...) from this environment, after its own
        # packages: what is installed there wins, as in any environment.
        ours = sysconfig.get_paths()["purelib"]
        with open(os.path.join(self.site, "zz_borrowed.pth"), "w") as f:
            f.write(ours + "\n")

    def pip(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run([self.python, "-m", "pip", "--disable-pip-version-check", *args])

    def supervisor(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run([str(self.root / "bin" / "supervisor"), *args], cwd=self.root)

    def python_c(self, code: str) -> subprocess.CompletedProcess[str]:
        return run([self.python, "-c", code], cwd=self.root)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Throwaway, Path, Path]:
    """A throwaway environment, and the wheel and sdist built in it from a copy of the tree."""
    root = tmp_path_factory.mktemp("distribution")
    env = Throwaway(root / "venv")
    # The build backend the tree declares (build-system.requires), from PyPI or pip's cache.
    got = env.pip("install", "-q", "setuptools>=77")
    if got.returncode != 0:
        pytest.skip(f"setuptools>=77 could not be installed (no network?): {got.stderr[-300:]}")
    tree = _copy_of_the_tree(root / "tree")
    out = root / "dist"
    out.mkdir()
    build = textwrap.dedent(
        f"""
        import setuptools.build_meta as backend
        sdist = backend.build_sdist({str(out)!r})
        wheel = backend.build_wheel({str(out)!r})
        print("BUILT", sdist, wheel)
        """
    )
    done = run([env.python, "-c", build], cwd=tree)
    assert done.returncode == 0, done.stderr[-2000:]
    built_line = next(line for line in done.stdout.splitlines() if line.startswith("BUILT "))
    _built, sdist_name, wheel_name = built_line.split()
    return env, out / wheel_name, out / sdist_name


def test_the_wheel_holds_the_licence_the_metadata_and_every_package(
    built: tuple[Throwaway, Path, Path],
) -> None:
    _env, wheel, _sdist = built
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(info).decode()
        entry_points = archive.read(info.replace("METADATA", "entry_points.txt")).decode()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    # The manual and the reference docs, under <prefix>/share/doc/ once installed.
    docs = [n.split(".data/data/", 1)[1] for n in names if ".data/data/" in n]
    for doc in ("README.md", "architecture.md", "commands.md", "schema/core.json"):
        assert f"share/doc/trio-process-supervisor/{doc}" in docs, docs
    for package in ("supervisor", "protocol", "lanes", "_trio_process_supervisor"):
        assert f"{package}/__init__.py" in names
        assert f"{package}/py.typed" in names
    assert "License-Expression: MIT" in metadata
    assert "License-File: LICENSE" in metadata
    for classifier in (
        "Operating System :: POSIX :: Linux",
        "Programming Language :: Python :: 3.11",
        "Framework :: Trio",
        "Typing :: Typed",
    ):
        assert f"Classifier: {classifier}" in metadata
    assert "Classifier: License ::" not in metadata  # PEP 639: the expression says it
    assert 'Requires-Dist: psutil>=5.9; sys_platform != "linux"' in metadata
    assert "supervisor = _trio_process_supervisor:main" in entry_points
    assert "supervisor = _trio_process_supervisor._pytest_plugin" in entry_points


def test_the_sdist_holds_docs_examples_tests_and_the_constraints(
    built: tuple[Throwaway, Path, Path],
) -> None:
    _env, _wheel, sdist = built
    with tarfile.open(sdist) as archive:
        top = archive.getnames()[0].split("/")[0]
        names = {name.removeprefix(top + "/") for name in archive.getnames()}
    for path in (
        "LICENSE",
        "README.md",
        "docs/architecture.md",
        "docs/commands.md",
        "examples/demo.toml",
        "examples/project/pyproject.toml",
        "tests/conftest.py",
        "tests/packaging/test_distribution.py",
        "benchmarks/__main__.py",
        "scripts/install-peers",
        ".ci/run",
        ".ci/lowest-versions.txt",
    ):
        assert path in names, path
    assert not any(name.startswith((".peers", ".venv")) for name in names)
    assert not any("__pycache__" in name for name in names)


def test_supervisord_and_pypi_protocol_installed_over_ours(
    built: tuple[Throwaway, Path, Path],
) -> None:
    """supervisord installed after us overwrote our `supervisor/__init__.py` (`cannot import
    name 'open_core'`), PyPI's `protocol` broke even `--version`, and uninstalling either
    deleted our `__init__.py`. Each case is now one error that names the other
    distribution and the fix."""
    env, wheel, _sdist = built
    assert env.pip("install", "-q", "--no-deps", "--force-reinstall", str(wheel)).returncode == 0
    version = env.supervisor("--version")
    assert (version.returncode, version.stdout.strip()) == (0, "supervisor 0.1.0"), version.stderr
    got = env.pip("install", "-q", "--no-deps", SUPERVISORD, PYPI_PROTOCOL)
    if got.returncode != 0:
        pytest.skip(
            f"{SUPERVISORD} and {PYPI_PROTOCOL} could not be installed: {got.stderr[-300:]}"
        )
    site = env.site
    # pip sees nothing wrong: two distributions may share a directory.
    shadowed = env.supervisor("--version")
    assert shadowed.returncode == 1
    assert shadowed.stderr == (
        f"trio-process-supervisor: Python imports 'supervisor' from {site}/supervisor/__init__.py,"
        " which is not ours. The distribution 'supervisor' (supervisord, the process control"
        " system) installs a top-level 'supervisor' too, and the two can not share an"
        " environment. Fix: install them in separate virtual environments; or `pip uninstall"
        " supervisor` and then `pip install --force-reinstall trio-process-supervisor`"
        " (uninstalling it removes files both installed).\n"
    )
    lanes = env.python_c("import lanes")
    assert lanes.returncode == 1
    assert (
        f"ShadowedPackageError: trio-process-supervisor: Python imports 'protocol' from"
        f" {site}/protocol/__init__.py, which is not ours. The distribution 'protocol'"
        " (PyPI's 'protocol' package) installs a top-level 'protocol' too"
    ) in lanes.stderr
    # The pytest plugin names it too, rather than failing every pytest run on a lost name.
    plugin = env.python_c("import _trio_process_supervisor._pytest_plugin")
    assert "Python imports 'supervisor' from" in plugin.stderr
    # Uninstalling them removes our __init__.py files as well (they shared the paths).
    assert env.pip("uninstall", "-q", "-y", "supervisor", "protocol").returncode == 0
    missing = env.supervisor("--version")
    assert missing.returncode == 1
    assert "Its __init__.py is missing" in missing.stderr
    assert "Fix: pip install --force-reinstall trio-process-supervisor" in missing.stderr
    # The fix it names works.
    assert env.pip("install", "-q", "--no-deps", "--force-reinstall", str(wheel)).returncode == 0
    again = env.supervisor("--version")
    assert (again.returncode, again.stdout.strip()) == (0, "supervisor 0.1.0"), again.stderr
    assert (
        json.loads(
            env.python_c("import json, lanes; print(json.dumps(lanes.__distribution__))").stdout
        )
        == "trio-process-supervisor"
    )
