"""``supervisor run`` as a CI user's first choice (issue 29): real subprocesses.

Lanes in one project (lint beside build and test), ``-j``, ``--list``, ``--dry-run``,
``--junit``, GitHub Actions groups and annotations, ``run.finished`` per job, colours that
CI asks for, and shell completion of files, job names and scenarios.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pathlib import Path

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, os.pardir))


def supervisor(
    *args: str, env: dict[str, str] | None = None, cwd: str = REPO
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "FORCE_COLOR")}
    base.pop("CLICOLOR_FORCE", None)
    base.pop("NO_COLOR", None)
    return subprocess.run(
        [sys.executable, "-m", "supervisor", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**base, **(env or {})},
        stdin=subprocess.DEVNULL,
    )


def events_of(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines()]


def py(code: str) -> str:
    """An argv running ``code`` with the supervisor's interpreter, as TOML."""
    return json.dumps(["{python}", "-c", textwrap.dedent(code)])


#: Lint waits for the test job's marker: it ends ok only if it runs while test runs.
REPOSITORY_CI = """\
[defaults]
timeout_ms = 120000
env = {{ MARKERS = "{markers}" }}

[[job]]
name = "lint"
lane = "lint"
argv = {lint}

[[job]]
name = "build"
kind = "build"
argv = {build}

[[job]]
name = "test"
kind = "test"
needs = ["build"]
argv = {test}

[[job]]
name = "package"
kind = "pack"
needs = ["test"]
argv = {package}
"""

LINT = py(
    """
    import os, sys, time
    markers = os.environ["MARKERS"]
    open(os.path.join(markers, "lint.started"), "w").close()
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(markers, "test.started")):
        if time.monotonic() > deadline:
            sys.exit("lint ran alone: test never started beside it")
        time.sleep(0.02)
    """
)
BUILD = py(
    """
    import os, sys, time
    markers = os.environ["MARKERS"]
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(markers, "lint.started")):
        if time.monotonic() > deadline:
            sys.exit("build ran alone: lint never started beside it")
        time.sleep(0.02)
    open(os.path.join(markers, "build.done"), "w").close()
    """
)
TEST = py(
    """
    import os, sys
    markers = os.environ["MARKERS"]
    if not os.path.exists(os.path.join(markers, "build.done")):
        sys.exit("test ran before build")
    open(os.path.join(markers, "test.started"), "w").close()
    """
)
PACKAGE = py("print('packaged')")


def repository_ci(tmp_path: Path) -> str:
    markers = tmp_path / "markers"
    markers.mkdir()
    path = tmp_path / "ci.toml"
    path.write_text(
        REPOSITORY_CI.format(markers=markers, lint=LINT, build=BUILD, test=TEST, package=PACKAGE)
    )
    return str(path)


def test_lint_runs_beside_build_and_test_of_one_repository(tmp_path: Path) -> None:
    """Lint on its own lane runs while build and then test run on the project's lane: each
    of lint and build waits (bounded) for the other to have started, so the run passes only
    if they overlap; test still comes after build and package after test."""
    path = repository_ci(tmp_path)
    result = supervisor("run", path, "--json")
    assert result.returncode == 0, result.stderr
    events = events_of(result.stdout)
    started = [e["name"] for e in events if e["event"] == "job.started"]
    assert started.index("test") > started.index("build")
    assert started[-1] == "package"
    lanes = {e["name"]: e["lane"] for e in events if e["event"] == "job.started"}
    assert lanes == {
        "lint": "lint",
        "build": tmp_path.name,
        "test": tmp_path.name,
        "package": tmp_path.name,
    }
    assert "on lanes: lint, " in result.stderr


def test_j_bounds_the_jobs_at_once(tmp_path: Path) -> None:
    """With -j 1 the same jobs never overlap: every job appends its start and end to one
    file, and the lines alternate."""
    log = tmp_path / "log"
    code = (
        "import os, sys, time; name = sys.argv[1]; log = open(os.environ['LOG'], 'a');"
        " log.write(f'start {name}\\n'); log.flush(); time.sleep(0.2);"
        " log.write(f'end {name}\\n')"
    )
    jobs = "".join(
        f'[[job]]\nname = "{name}"\nlane = "{name}"\n'
        f'argv = ["{{python}}", "-c", {json.dumps(code)}, "{name}"]\n'
        for name in ("a", "b", "c")
    )
    path = tmp_path / "lanes.toml"
    path.write_text(f'[defaults]\nenv = {{ LOG = "{log}" }}\n' + jobs)
    result = supervisor("run", str(path), "-j", "1")
    assert result.returncode == 0, result.stderr
    lines = log.read_text().splitlines()
    assert len(lines) == 6
    for start, end in zip(lines[::2], lines[1::2], strict=True):
        assert (start.split()[0], end.split()[0], start.split()[1]) == (
            "start",
            "end",
            end.split()[1],
        )
    bad = supervisor("run", str(path), "-j", "0")
    assert bad.returncode == 2
    assert "-j 0: must be at least 1" in bad.stderr


def test_list_prints_jobs_lanes_needs_and_expectations(tmp_path: Path) -> None:
    path = repository_ci(tmp_path)
    result = supervisor("run", path, "--list")
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()]
    assert rows[0] == ["JOB", "LANE", "KIND", "NEEDS", "EXPECT", "LINE"]
    assert rows[1] == ["lint", "lint", "command", "-", "ok", "5"]
    assert rows[3] == ["test", tmp_path.name, "test", "build", "ok", "15"]
    assert not os.listdir(tmp_path / "markers")  # nothing ran
    as_json = json.loads(supervisor("run", path, "package", "--list", "--json").stdout)
    assert [job["name"] for job in as_json["jobs"]] == ["build", "test", "package"]
    assert as_json["jobs"][2] == {
        "name": "package",
        "lane": tmp_path.name,
        "kind": "pack",
        "project": os.path.realpath(tmp_path),
        "needs": ["test"],
        "expected": ["ok"],
        "line": 21,
    }


def test_dry_run_prints_the_resolved_plan_and_runs_nothing(tmp_path: Path) -> None:
    (tmp_path / "ci.env").write_text("TOKEN=secret-value\n")
    path = tmp_path / "ci.toml"
    marker = tmp_path / "ran"
    path.write_text(
        "[defaults]\n"
        'env_file = "ci.env"\n'
        "[[job]]\n"
        'name = "touch"\n'
        f'argv = ["{{python}}", "-c", "open({str(marker)!r}, \'w\')", "{{here}}"]\n'
        "timeout_ms = 5000\n"
        'node = "zone=eu"\n'
        "[[job]]\n"
        'name = "lint"\n'
        'lane = "lint"\n'
        'argv = ["ruff check ."]\n'
    )
    result = supervisor("run", str(path), "--dry-run", "-j", "2")
    assert result.returncode == 0, result.stderr
    assert not marker.exists()
    out = result.stdout
    assert "2 jobs on 2 lanes (at most 2 at once); nothing is run" in out
    assert sys.executable in out  # {python} resolved
    assert str(tmp_path) in out  # {here} resolved
    assert "env sets TOKEN" in out
    assert "secret-value" not in out  # names, never values
    assert "deadline 5000 ms; node zone=eu (with --ray); expected" in out
    assert out.count("node ") == 1  # only the job that pins one
    assert 'did you mean argv = ["ruff", "check", "."]?' in out
    plan = json.loads(supervisor("run", str(path), "--dry-run", "--json").stdout)
    assert plan["maxRunning"] is None
    assert plan["lanes"] == {tmp_path.name: ["touch"], "lint": ["lint"]}
    touch, lint = plan["jobs"]
    assert touch["argv"][0] == sys.executable
    assert touch["envNames"] == ["TOKEN"]
    assert touch["node"] == "zone=eu"
    assert "node" not in lint
    assert "notNow" not in touch
    assert lint["notNow"].startswith("job.start: executable not found on PATH: ruff check .")


def test_junit_report(tmp_path: Path) -> None:
    path = tmp_path / "ci.toml"
    path.write_text(
        '[[job]]\nname = "passes"\nargv = ["true"]\n'
        '[[job]]\nname = "fails"\nargv = ["sh", "-c", "echo out; echo boom >&2; exit 3"]\n'
        '[[job]]\nname = "after"\nneeds = ["fails"]\nargv = ["true"]\n'
        '[[job]]\nname = "denied"\nkind = "build"\ntrusted = false\nexpect = "denied"\n'
        'argv = ["true"]\n'
    )
    report = tmp_path / "report.xml"
    result = supervisor("run", str(path), "--junit", str(report))
    assert result.returncode == 1
    suites = ET.parse(report).getroot()
    assert suites.tag == "testsuites"
    assert (suites.get("tests"), suites.get("failures"), suites.get("skipped")) == ("4", "2", "1")
    cases = {case.get("name"): case for case in suites.iter("testcase")}
    assert list(cases) == ["passes", "fails", "after", "denied"]
    assert cases["passes"].find("failure") is None
    assert cases["passes"].get("classname") == tmp_path.name
    failure = cases["fails"].find("failure")
    assert failure is not None
    assert failure.get("message") == cases["fails"].get("message") or failure.get(
        "message", ""
    ).startswith("expected ok, got failed in ")
    assert failure.text == "out\nboom"
    assert cases["fails"].get("line") == "4"
    assert float(cases["fails"].get("time", "-1")) >= 0
    after = cases["after"].find("failure")
    assert after is not None
    assert "needs 'fails', which ended failed" in after.get("message", "")
    skipped = cases["denied"].find("skipped")
    assert skipped is not None
    assert "denied" in skipped.get("message", "")
    unwritable = supervisor("run", str(path), "--junit", str(tmp_path / "no" / "r.xml"))
    assert unwritable.returncode == 2
    assert "does not exist" in unwritable.stderr


def test_github_actions_groups_each_jobs_output_and_annotates_unexpected_ends(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ci.toml"
    loud = "import sys\nfor i in range(5): print(f'{sys.argv[1]} line {i}', flush=True)\n"
    path.write_text(
        "".join(
            f'[[job]]\nname = "{name}"\nlane = "{name}"\n'
            f'argv = ["{{python}}", "-c", {json.dumps(loud)}, "{name}"]\n'
            for name in ("one", "two", "three")
        )
        + '[[job]]\nname = "bad"\nargv = ["sh", "-c", "echo 100%; echo a:b,c; exit 1"]\n'
    )
    result = supervisor("run", str(path), env={"GITHUB_ACTIONS": "true"})
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    for name in ("one", "two", "three"):
        # Each job's output is one contiguous group, titled with its outcome.
        start = next(i for i, line in enumerate(lines) if line.startswith(f"::group::[{name}]"))
        assert lines[start] == (
            f"::group::[{name}] {name} finished ok in " + lines[start].split(" finished ok in ")[1]
        )
        assert lines[start + 1 : start + 7] == [f"{name} line {i}" for i in range(5)] + [
            "::endgroup::"
        ]
    (error,) = [line for line in lines if line.startswith("::error")]
    assert error.startswith(f"::error file={path},line=13,title=job bad did not end as expected::")
    # The data is escaped as the runner wants: % and newlines.
    assert error.endswith("(exit 1)%0A100%25%0Aa:b,c")
    plain = supervisor("run", str(path))
    assert "::group::" not in plain.stderr
    assert "::error" not in plain.stderr


def test_run_finished_gives_each_jobs_duration_and_exit_code(tmp_path: Path) -> None:
    path = tmp_path / "ci.toml"
    path.write_text(
        '[[job]]\nname = "a"\nargv = ["sh", "-c", "exit 4"]\nexpect = "failed"\n'
        '[[job]]\nname = "b"\nneeds = ["a"]\nargv = ["true"]\nexpect = "skipped"\n'
        '[[job]]\nname = "c"\nlane = "c"\nargv = ["sh", "-c", "kill -9 $$"]\n'
        'expect = "failed"\n'
    )
    result = supervisor("run", str(path), "--json")
    assert result.returncode == 0, result.stderr
    jobs = {job["name"]: job for job in events_of(result.stdout)[-1]["jobs"]}
    assert (jobs["a"]["exitCode"], jobs["a"]["signal"]) == (4, None)
    assert isinstance(jobs["a"]["durationMs"], int)
    assert jobs["a"]["durationMs"] >= 0
    assert (jobs["b"]["exitCode"], jobs["b"]["durationMs"], jobs["b"]["ran"]) == (None, None, False)
    assert (jobs["c"]["exitCode"], jobs["c"]["signal"]) == (None, 9)


COLOURED = "import sys; sys.stdout.write('\\x1b]0;title\\x07\\x1b[31mred\\x1b[0m plain\\x1b[2J\\n')"


@pytest.mark.parametrize(
    ("env", "coloured"),
    [
        ({}, False),
        ({"FORCE_COLOR": "1"}, True),
        ({"CLICOLOR_FORCE": "1"}, True),
        ({"CLICOLOR_FORCE": "0"}, False),
        ({"FORCE_COLOR": "1", "NO_COLOR": "1"}, False),
    ],
)
def test_colours_ci_asks_for_and_a_jobs_own_colours(
    tmp_path: Path, env: dict[str, str], coloured: bool
) -> None:
    path = tmp_path / "ci.toml"
    path.write_text(f'[[job]]\nname = "c"\nargv = ["{{python}}", "-c", {json.dumps(COLOURED)}]\n')
    result = supervisor("run", str(path), env=env)
    assert result.returncode == 0, result.stderr
    line = next(
        line for line in result.stderr.splitlines() if line.startswith(f"[{tmp_path.name}] c | ")
    )
    # Never a title, a screen clear or any escape but colours.
    assert "]0;" not in line
    assert "\x1b[2J" not in line
    assert "\x07" not in line
    if coloured:
        assert line == "[" + tmp_path.name + "] c | \x1b[31mred\x1b[0m plain\x1b[0m"
        assert "\x1b[32mok\x1b[0m" in result.stderr
    else:
        assert line == f"[{tmp_path.name}] c | red plain"
        assert "\x1b" not in result.stderr


def test_kind_project_defaults_and_env_file_in_a_run(tmp_path: Path) -> None:
    (tmp_path / "ci.env").write_text("export GREETING='hello from the env file'\n")
    path = tmp_path / "ci.toml"
    path.write_text(
        '[defaults]\nenv_file = "ci.env"\n'
        '[[job]]\nargv = ["sh", "-c", "echo $GREETING in $(pwd)"]\n'
    )
    result = supervisor("run", str(path), "--json", cwd="/")
    assert result.returncode == 0, result.stderr
    events = events_of(result.stdout)
    started = next(e for e in events if e["event"] == "job.started")
    assert (started["name"], started["kind"]) == ("command#1", "command")
    output = "".join(e["text"] for e in events if e["event"] == "job.output")
    assert output == f"hello from the env file in {os.path.realpath(tmp_path)}\n"


def test_a_shell_line_in_argv_gets_a_hint(tmp_path: Path) -> None:
    path = tmp_path / "ci.toml"
    path.write_text('[[job]]\nname = "lint"\nargv = ["ruff check --fix ."]\n')
    result = supervisor("run", str(path))
    assert result.returncode == 1
    assert (
        "executable not found on PATH: ruff check --fix . (argv[0] holds spaces, and argv is"
        ' not split by a shell: did you mean argv = ["ruff", "check", "--fix", "."]?)'
    ) in result.stderr


# --- completion ----------------------------------------------------------------------------


def completion_script(shell: str) -> str:
    result = supervisor("completion", shell)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_bash_completes_lanes_files_job_names_and_scenarios(tmp_path: Path) -> None:
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    repository_ci(tmp_path)
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / "sub").mkdir()
    script = tmp_path / "completion.bash"
    script.write_text(completion_script("bash"))
    driver = textwrap.dedent(
        """
        source completion.bash
        complete_words() {
          COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
          COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}; COMPREPLY=()
          _shtab_supervisor supervisor "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
          printf '%s\\n' "${COMPREPLY[@]}" | sort | tr '\\n' ' '; echo
        }
        complete_words supervisor run ""
        complete_words supervisor run ci.toml ""
        complete_words supervisor run ci.toml b
        complete_words supervisor run -j 2 --color never ci.toml lint ""
        complete_words supervisor testbed run grand
        complete_words supervisor completion f
        """
    )
    bindir = os.path.dirname(sys.executable)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", "-c", driver], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "ci.toml markers sub ",
        "build lint package test ",
        "build ",
        "build lint package test ",
        "grandchild-setsid ",
        "fish ",
    ]


def test_completion_job_names_are_quick_and_quiet_for_a_bad_file(tmp_path: Path) -> None:
    path = repository_ci(tmp_path)
    names = supervisor("run", path, "--complete-jobs")
    assert names.stdout.split() == ["lint", "build", "test", "package"]
    missing = supervisor("run", str(tmp_path / "missing.toml"), "--complete-jobs")
    assert (missing.returncode, missing.stdout, missing.stderr) == (0, "", "")


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_scripts_hold_the_completers_and_parse(shell: str, tmp_path: Path) -> None:
    script = completion_script(shell)
    if shell == "fish":
        assert "function __supervisor_run_words" in script
        assert "(__supervisor_run_words)" in script
        assert "__fish_complete_suffix .toml" in script
    else:
        assert "_supervisor_run_jobs() {" in script
        assert "_files -g '*.toml'" in script
    assert "--complete-jobs" in script  # the function asks the file for its jobs
    assert "grandchild-setsid" in script
    if shutil.which(shell) is None:
        return  # the syntax check needs the shell
    (tmp_path / "script").write_text(script)
    check = subprocess.run(
        [shell, "-n", str(tmp_path / "script")], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stderr


def test_fish_completes_job_names_after_the_file(tmp_path: Path) -> None:
    if shutil.which("fish") is None:
        pytest.skip("fish is not installed")
    repository_ci(tmp_path)
    (tmp_path / "completion.fish").write_text(completion_script("fish"))
    bindir = os.path.dirname(sys.executable)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "HOME": str(tmp_path)}
    done = subprocess.run(
        [
            "fish",
            "--no-config",
            "-c",
            "source completion.fish; complete -C 'supervisor run ci.toml '; echo ---;"
            " complete -C 'supervisor run '; echo ---; complete -C 'supervisor testbed run grand'",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    jobs, files, scenarios = (
        [line.split("\t")[0] for line in part.strip().splitlines()]
        for part in done.stdout.split("---")
    )
    assert sorted(jobs) == ["build", "lint", "package", "test"]
    assert "ci.toml" in files
    assert scenarios == ["grandchild-setsid"]


def test_j_and_a_lane_over_two_projects_are_refused_with_ray(tmp_path: Path) -> None:
    """Ray places lanes per project: a bound over every lane, or a named lane holding two
    projects, would span nodes. Refused before anything starts (and before Ray is needed)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    path = tmp_path / "ci.toml"
    path.write_text('[[job]]\nargv = ["true"]\n')
    bound = supervisor("run", str(path), "--ray", "auto", "-j", "2")
    assert bound.returncode == 2
    assert "-j bounds the jobs of one machine; it does not apply with --ray" in bound.stderr
    path.write_text(
        '[[job]]\nproject = "a"\nlane = "x"\nargv = ["true"]\n'
        '[[job]]\nproject = "b"\nlane = "x"\nargv = ["true"]\n'
    )
    spanning = supervisor("run", str(path), "--ray", "auto")
    assert spanning.returncode == 2
    assert "lane 'x' holds jobs of two projects" in spanning.stderr
