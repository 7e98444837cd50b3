"""The lanes file of ``supervisor run``: valid files, and bad ones refused with their line."""

from __future__ import annotations

import os
import textwrap
from typing import TYPE_CHECKING

import pytest

from supervisor._cli._runfile import (
    DEFAULT_EXPECT,
    RunFileError,
    RunFileJob,
    load_run_file,
    parse_run_file,
)

if TYPE_CHECKING:
    from pathlib import Path

EXAMPLES = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, os.pardir, "examples")


def parse(text: str, directory: Path) -> list[RunFileJob]:
    return list(
        parse_run_file(textwrap.dedent(text), path="lanes.toml", directory=str(directory)).jobs
    )


def test_minimal_job_gets_defaults(tmp_path: Path) -> None:
    (tmp_path / "proj").mkdir()
    run_file = parse_run_file(
        '[[job]]\nproject = "proj"\nkind = "build"\nargv = ["make"]\n',
        path="f.toml",
        directory=str(tmp_path),
    )
    (job,) = run_file.jobs
    assert job.name == "build#1"
    assert job.line == 1
    assert job.project == str(tmp_path / "proj")
    assert job.cwd == str(tmp_path / "proj")
    assert job.argv == ("make",)
    assert job.env is None
    assert job.timeout_ms is None
    assert job.supersede is False
    assert job.start_after_ms == 0
    assert job.cancel_after_ms is None
    assert job.trusted is True
    assert job.expect == DEFAULT_EXPECT
    assert job.is_expected("ok", False)
    # A job that did not run is not what a file means unless it says so.
    assert not job.is_expected("superseded", False)
    assert not job.is_expected("failed", False)


def test_a_project_reached_through_a_symlink_is_its_real_lane(tmp_path: Path) -> None:
    (tmp_path / "proj").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "proj")
    jobs = parse(
        """
        [[job]]
        project = "link"
        kind = "build"
        argv = ["make"]
        [[job]]
        project = "proj/"
        kind = "build"
        argv = ["make"]
        """,
        tmp_path,
    )
    real = os.path.realpath(tmp_path / "proj")
    assert [job.project for job in jobs] == [real, real]


def test_every_key_and_placeholders(tmp_path: Path) -> None:
    (tmp_path / "proj" / "sub").mkdir(parents=True)
    text = """\
        # a comment
        [[job]]
        name = "first"
        project = "proj"
        kind = "test"
        argv = ["{python}", "-c",
                "print({1: 2})", "{tmpdir}/x"]  # braces that are no placeholder stay
        cwd = "sub"
        timeout_ms = 1500
        supersede = true
        start_after_ms = 20
        cancel_after_ms = 30
        trusted = false
        expect = ["failed", "cancelled"]
        expect_timed_out = true
        [job.env]
        A = "{here}/a"

        [[job]]
        project = "proj"
        kind = "build"
        argv = ["b"]

        [[job]]
        project = "proj"
        kind = "build"
        argv = ["c"]
        """
    first, second, third = parse(text, tmp_path)
    assert first.name == "first"
    assert first.line == 2
    assert first.cwd == str(tmp_path / "proj" / "sub")
    assert first.expect == frozenset({"failed", "cancelled"})
    assert first.is_expected("failed", True)
    assert not first.is_expected("failed", False)
    assert first.describe_expectation() == "failed or cancelled (timedOut)"
    payload = first.payload({"{python}": "/py", "{tmpdir}": "/t", "{here}": "/h"})
    assert payload == {
        "kind": "test",
        "root": str(tmp_path / "proj"),
        "argv": ["/py", "-c", "print({1: 2})", "/t/x"],
        "cwd": str(tmp_path / "proj" / "sub"),
        "env": {"A": "/h/a"},
        "timeoutMilliseconds": 1500,
        "supersede": True,
    }
    # Unnamed jobs are numbered per kind, in file order.
    assert (second.name, second.line) == ("build#1", 19)
    assert (third.name, third.line) == ("build#2", 24)


def test_demo_file_is_valid() -> None:
    run_file = load_run_file(os.path.join(EXAMPLES, "demo.toml"))
    statuses = set().union(*(job.expect for job in run_file.jobs))
    assert statuses == {"ok", "failed", "cancelled", "denied", "superseded"}
    assert any(job.expect_timed_out for job in run_file.jobs)


HEAD = '[[job]]\nproject = "proj"\nkind = "build"\n'

BAD_FILES = [
    # (text, line, message fragment)
    ('[[job]\nproject = "p"\n', 1, "invalid TOML"),
    (HEAD + 'argv = ["a"\n', 4, "invalid TOML: Unclosed array (at the end of the file)"),
    # Our words, not a TOML library's (tomlkit 0.15.3 changed its own, issue 29).
    (
        HEAD + 'argv = ["a"]\nname = "x"\nname = "y"\n',
        6,
        "invalid TOML: key 'name' in [[job]] is defined twice (first on line 5)",
    ),
    (
        "[defaults]\ntimeout_ms = 1\n[defaults]\n" + HEAD + 'argv = ["a"]\n',
        3,
        "invalid TOML: table [defaults] is defined twice (first on line 1)",
    ),
    ("a = 1\na = 2\n", 2, "invalid TOML: key 'a' is defined twice (first on line 1)"),
    (HEAD + 'argv = ["a"]\n[job.env]\nA = "1"\n[job.env]\nB = "1"\n', 7, "invalid TOML"),
    ("", 1, "no jobs"),
    ('title = "x"\n', 1, "unknown top-level key 'title'"),
    ('jobs = 1\n[[job]]\nproject = "proj"\n', 1, "did you mean 'job'"),
    ("job = 3\n", 1, "array of tables"),
    ("job = []\n", 1, "'job' is empty"),
    (
        HEAD + 'argv = ["a"]\ntimeout = 5\n',
        5,
        "unknown key 'timeout' in [[job]] (did you mean 'timeout_ms'?)",
    ),
    ('\n\n[[job]]\nproject = "proj"\nkind = "build"\n', 3, "missing required key 'argv'"),
    # Habits of other tools get the key they mean (issue 29).
    (HEAD + 'cmd = ["a"]\n', 4, "unknown key 'cmd' in [[job]] (did you mean 'argv'?)"),
    (HEAD + 'argv = ["a"]\ndepends_on = ["x"]\n', 5, "(did you mean 'needs'?)"),
    (
        HEAD + 'argv = "ruff check ."\n',
        4,
        "'argv' must be an array of strings, not a string (no shell splits it: write"
        ' argv = ["ruff", "check", "."])',
    ),
    (
        '[[job]]\nkind = "lint"\nargv = ["ruff"]\n',
        2,
        "for any other job leave 'kind' out, it defaults to \"command\"",
    ),
    # [defaults]: its errors name its own lines.
    ("[defaults]\ntimeout = 5\n" + HEAD + 'argv = ["a"]\n', 2, "(did you mean 'timeout_ms'?)"),
    ('[defaults]\nargv = ["a"]\n' + HEAD, 2, "'argv' can not be a default"),
    ("defaults = 3\n" + HEAD + 'argv = ["a"]\n', 1, "'defaults' must be a table"),
    ('[defaults]\ntimeout_ms = "5"\n' + HEAD + 'argv = ["a"]\n', 2, "'timeout_ms' must be"),
    ('[defaults]\nproject = "nope"\n[[job]]\nargv = ["a"]\n', 2, "does not exist"),
    (
        '[defaults]\n[defaults.env]\nA = "1"\nB = 2\n'
        + HEAD
        + 'argv = ["a"]\n[job.env]\nA = "x"\n',
        4,
        "env.B must be a string",
    ),
    (HEAD + 'argv = ["a"]\nlane = ""\n', 5, "'lane' must be a name"),
    (HEAD + 'argv = ["a"]\nenv_file = "missing.env"\n', 5, "env_file 'missing.env': cannot read"),
    (HEAD + 'argv = ["a"]\nenv_file = ["bad.env"]\n', 5, "env_file 'bad.env', line 2: expected"),
    (HEAD + 'argv = "make all"\n', 4, "'argv' must be an array of strings, not a string"),
    (HEAD + "argv = []\n", 4, "'argv' must not be empty"),
    (HEAD + 'argv = [\n  "a",\n  2,\n]\n', 6, "argv[1] must be a string, not an integer"),
    (HEAD + 'argv = [""]\n', 4, "argv[0] (the program) must not be empty"),
    (HEAD + 'argv = ["a\\u0000b"]\n', 4, "NUL"),
    ('[[job]]\nproject = "proj"\nkind = "compile"\nargv = ["a"]\n', 3, "unknown kind 'compile'"),
    (
        '[[job]]\nproject = "proj"\nkind = 1\nargv = ["a"]\n',
        3,
        "'kind' must be a string, not an integer",
    ),
    ('[[job]]\nproject = "nowhere"\nkind = "build"\nargv = ["a"]\n', 2, "does not exist"),
    (
        '[[job]]\nproject = ["proj"]\nkind = "build"\nargv = ["a"]\n',
        2,
        "'project' must be a string",
    ),
    (HEAD + 'argv = ["a"]\ncwd = "nowhere"\n', 5, "working directory"),
    (HEAD + 'argv = ["a"]\ncwd = 1\n', 5, "'cwd' must be a string"),
    (HEAD + 'argv = ["a"]\nenv = "A=1"\n', 5, "'env' must be a table of strings"),
    (
        HEAD + 'argv = ["a"]\nenv = { A = "1", B = 2 }\n',
        5,
        "env.B must be a string, not an integer",
    ),
    (
        HEAD + 'argv = ["a"]\n[job.env]\nA = "1"\nB = true\n',
        7,
        "env.B must be a string, not a boolean",
    ),
    (
        HEAD + 'argv = ["a"]\ntimeout_ms = "5s"\n',
        5,
        "'timeout_ms' must be an integer (milliseconds), not a string",
    ),
    (HEAD + 'argv = ["a"]\ntimeout_ms = true\n', 5, "not a boolean"),
    (HEAD + 'argv = ["a"]\ntimeout_ms = 1.5\n', 5, "not a float"),
    (HEAD + 'argv = ["a"]\ntimeout_ms = -1\n', 5, "'timeout_ms' must be >= 0"),
    (
        HEAD + 'argv = ["a"]\ntimeout_ms = 9223372036854775807\n',
        5,
        "'timeout_ms' must be at most 2147483647 (milliseconds)",
    ),
    (HEAD + 'argv = ["a"]\nstart_after_ms = -1\n', 5, "'start_after_ms' must be >= 0"),
    (HEAD + 'argv = ["a"]\ncancel_after_ms = -5\n', 5, "'cancel_after_ms' must be >= 0"),
    (HEAD + 'argv = ["a"]\nsupersede = "yes"\n', 5, "'supersede' must be a boolean, not a string"),
    (HEAD + 'argv = ["a"]\ntrusted = 1\n', 5, "'trusted' must be a boolean, not an integer"),
    (HEAD + 'argv = ["a"]\nexpect = "passed"\n', 5, "unknown status 'passed'"),
    (HEAD + 'argv = ["a"]\nexpect = []\n', 5, "at least one status"),
    (HEAD + 'argv = ["a"]\nexpect = ["ok", 1]\n', 5, "values must be strings"),
    (HEAD + 'argv = ["a"]\nexpect = 1\n', 5, "a status or an array of statuses"),
    (HEAD + 'argv = ["a"]\nexpect_timed_out = "yes"\n', 5, "'expect_timed_out' must be a boolean"),
    # Newcomer report: accepted, but a timed-out job ends "failed": never met.
    (
        HEAD + 'argv = ["a"]\nexpect = "ok"\nexpect_timed_out = true\n',
        6,
        "'expect_timed_out = true' can never be met with expect = \"ok\": a job that times out"
        " ends 'failed' (add \"failed\" to 'expect')",
    ),
    (
        HEAD + 'argv = ["a"]\nexpect_timed_out = true\nexpect = ["ok", "cancelled"]\n',
        5,
        'can never be met with expect = ["ok", "cancelled"]:',
    ),
    (
        HEAD + 'argv = ["a"]\nexpect_timed_out = true\n',
        5,
        'can never be met with expect = "ok" (the default):',
    ),
    (HEAD + 'argv = ["a"]\nname = ""\n', 5, "'name' must not be empty"),
    (
        HEAD + 'argv = ["a"]\nname = "x"\n\n' + HEAD + 'argv = ["b"]\nname = "x"\n',
        11,
        "duplicate job name 'x' (first used on line 1)",
    ),
    # A multi-line string that looks like keys does not fool the line finder.
    (
        HEAD + 'argv = ["a", """\nexpect = 1\n[[job]]\n"""]\nexpect = "nope"\n',
        8,
        "unknown status 'nope'",
    ),
    # Placeholder typos are refused at their line, with a did-you-mean (issue 15).
    (
        HEAD + 'argv = [\n  "{pyhton}",\n]\n',
        5,
        "unknown placeholder {pyhton} in 'argv' (did you mean {python}?",
    ),
    (
        HEAD + 'argv = ["a"]\ncwd = "{hree}/x"\n',
        5,
        "unknown placeholder {hree} in 'cwd' (did you mean {here}?",
    ),
    (HEAD + 'argv = ["a"]\n[job.env]\nA = "1"\nB = "{TMPDIR}/b"\n', 7, "did you mean {tmpdir}?"),
    # Every duration has a documented maximum.
    (
        HEAD + 'argv = ["a"]\nstart_after_ms = 3600001\n',
        5,
        "'start_after_ms' must be at most 3600000",
    ),
    (
        HEAD + 'argv = ["a"]\ncancel_after_ms = 99999999999\n',
        5,
        "'cancel_after_ms' must be at most 3600000",
    ),
    # needs: names of other jobs, no cycle.
    (
        HEAD + 'argv = ["a"]\nneeds = "build"\n',
        5,
        "'needs' must be an array of job names, not a string",
    ),
    (
        HEAD + 'argv = ["a"]\nneeds = [1]\n',
        5,
        "needs[0] must be a job name (a string), not an integer",
    ),
    (HEAD + 'argv = ["a"]\nname = "t"\nneeds = [\n  "t",\n]\n', 7, "job 't' needs itself"),
    (
        HEAD
        + 'argv = ["a"]\nname = "test"\n\n'
        + HEAD
        + 'argv = ["b"]\nname = "lint"\nneeds = ["tset"]\n',
        12,
        "needs[0]: no job is named 'tset' (did you mean 'test'?)",
    ),
    (
        HEAD
        + 'argv = ["a"]\nname = "a"\nneeds = ["b"]\n\n'
        + HEAD
        + 'argv = ["b"]\nname = "b"\nneeds = ["a"]\n',
        13,
        "the needs form a cycle: 'a' -> 'b' -> 'a'",
    ),
    (HEAD + 'argv = ["a"]\nreplace_waiting = "yes"\n', 5, "'replace_waiting' must be a boolean"),
    # The second job's error names the second job's line.
    (HEAD + 'argv = ["a"]\n\n' + HEAD + 'argv = ["b"]\nsupersede = 1\n', 10, "'supersede' must be"),
]


@pytest.mark.parametrize(("text", "line", "fragment"), BAD_FILES)
def test_bad_file_names_its_line(tmp_path: Path, text: str, line: int, fragment: str) -> None:
    (tmp_path / "proj").mkdir()
    (tmp_path / "bad.env").write_text("A=1\nnot a line\n")
    with pytest.raises(RunFileError) as info:
        parse_run_file(text, path="lanes.toml", directory=str(tmp_path))
    error = info.value
    assert fragment in error.message
    assert error.line == line, str(error)
    assert str(error) == f"lanes.toml:{line}: {error.message}"


def test_timeout_0_means_no_deadline_and_new_keys_are_read(tmp_path: Path) -> None:
    (tmp_path / "proj").mkdir()
    text = HEAD + 'argv = ["a"]\ntimeout_ms = 0\nname = "b"\n\n'
    text += HEAD + 'argv = ["{python}", "{x}"]\nneeds = ["b"]\nreplace_waiting = true\n'
    first, second = parse_run_file(text, path="f.toml", directory=str(tmp_path)).jobs
    assert first.timeout_ms is None
    assert second.needs == ("b",)
    assert second.replace_waiting is True
    assert second.argv == ("{python}", "{x}")  # far from any placeholder: passed as is


def test_unreadable_file(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.toml")
    with pytest.raises(RunFileError) as info:
        load_run_file(missing)
    assert info.value.line == 0
    assert str(info.value).startswith(f"{missing}: cannot read the file")


@pytest.mark.parametrize("key", ["project", "cwd"])
def test_a_file_where_a_directory_belongs_is_not_a_directory(tmp_path: Path, key: str) -> None:
    """Newcomer report: `project = "file.toml"` said the directory "does not exist"."""
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "file.toml").write_text("")
    text = (
        '[[job]]\nproject = "proj/file.toml"\nkind = "build"\nargv = ["a"]\n'
        if key == "project"
        else HEAD + 'argv = ["a"]\ncwd = "file.toml"\n'
    )
    with pytest.raises(RunFileError) as info:
        parse_run_file(text, path="lanes.toml", directory=str(tmp_path))
    assert info.value.message.endswith(
        f"{str(tmp_path / 'proj' / 'file.toml')!r} is not a directory"
    )
    assert info.value.line == (2 if key == "project" else 5)


def test_expect_timed_out_with_failed_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "proj").mkdir()
    (job,) = parse(HEAD + 'argv = ["a"]\nexpect = ["failed"]\nexpect_timed_out = true\n', tmp_path)
    assert job.is_expected("failed", True)
    assert not job.is_expected("failed", False)


def test_relative_project_resolves_against_the_file(tmp_path: Path) -> None:
    (tmp_path / "a" / "proj").mkdir(parents=True)
    lanes_file = tmp_path / "a" / "lanes.toml"
    lanes_file.write_text(HEAD + 'argv = ["x"]\n')
    (job,) = load_run_file(str(lanes_file)).jobs
    assert job.project == str(tmp_path / "a" / "proj")


def test_toml_only_tomlkit_accepts_is_refused_at_its_line(tmp_path: Path) -> None:
    """Issue 2 fix: a multi-line inline table (accepted by tomlkit, not by TOML 1.0) used to
    throw the line locator off, so later errors named wrong lines; strict TOML 1.0 (tomllib)
    now refuses it first, at the line tomllib names."""
    (tmp_path / "proj").mkdir()
    text = HEAD + 'argv = ["a"]\nenv = {\n  A = "1"\n}\ntimeout = 5\n'
    with pytest.raises(RunFileError) as info:
        parse_run_file(text, path="lanes.toml", directory=str(tmp_path))
    assert info.value.message.startswith("invalid TOML: ")
    assert "(at line" not in info.value.message  # the position is in .line, said once
    assert info.value.line == 5  # `env = {` ends there: a newline inside an inline table


def test_inline_array_of_job_tables_is_refused_at_its_line(tmp_path: Path) -> None:
    """Issue 2 fix: `job = [{...}, {..., bogus = 1}]` reported its error at line 1; that form
    is now refused at the `job` line with a message asking for [[job]] tables."""
    (tmp_path / "proj").mkdir()
    text = (
        "# jobs\n\njob = [\n"
        '  { project = "proj", kind = "build", argv = ["a"] },\n'
        '  { project = "proj", kind = "build", argv = ["a"], bogus = 1 },\n'
        "]\n"
    )
    with pytest.raises(RunFileError) as info:
        parse_run_file(text, path="lanes.toml", directory=str(tmp_path))
    assert info.value.line == 3
    assert "write each job as a [[job]] table" in info.value.message


def test_bad_array_element_is_reported_at_its_own_line(tmp_path: Path) -> None:
    """Issue 2 fix: a bad element on line 7 of a multi-line `argv = [...]` was reported at the
    `argv` key's line; the locator now records each element's line."""
    (tmp_path / "proj").mkdir()
    argv = 'argv = [\n  "prog",\n  "--a",  # a comment\n  """x\ny""",\n  7,\n]\n'
    with pytest.raises(RunFileError) as info:
        parse_run_file(HEAD + argv, path="lanes.toml", directory=str(tmp_path))
    assert (info.value.line, info.value.message) == (
        9,
        "argv[3] must be a string, not an integer",
    )
    expect = 'argv = ["a"]\nexpect = [\n  "ok",\n  "nope",\n]\n'
    with pytest.raises(RunFileError) as info:
        parse_run_file(HEAD + expect, path="lanes.toml", directory=str(tmp_path))
    assert info.value.line == 7
    assert "unknown status 'nope'" in info.value.message


def test_the_readme_lists_every_declared_key_and_marks_the_required_ones() -> None:
    """The job table is declared once (JobTable); the README's key table follows it."""
    import msgspec

    from supervisor._cli._runfile import JobTable

    with open(os.path.join(EXAMPLES, os.pardir, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    section = readme[readme.index("### `supervisor run FILE.toml") :]
    table = section[section.index("| key | default | what |") :]
    table = table[: table.index("\n\n")]
    keys = {
        row.split("|")[1].strip().strip("`"): row.split("|")[2].strip() == "**required**"
        for row in table.splitlines()[2:]
    }
    declared = {f.name: f.required for f in msgspec.structs.fields(JobTable)}
    assert keys == declared
    assert [f.name for f in msgspec.structs.fields(JobTable) if f.required] == ["argv"]


# --- what CI users write (issue 29) ---------------------------------------------------------


def test_a_job_needs_only_argv_and_defaults_apply_to_every_job(tmp_path: Path) -> None:
    """`kind` defaults to command, `project` to the file's directory; `[defaults]` fills the
    keys a job leaves out, and env tables merge (the job's value wins)."""
    (tmp_path / "proj").mkdir()
    (tmp_path / "ci.env").write_text("FROM_FILE=1\nSHARED=file\n")
    jobs = parse(
        """
        [[job]]
        argv = ["true"]

        [defaults]
        project = "proj"
        timeout_ms = 5000
        env_file = "ci.env"
        [defaults.env]
        CI = "1"
        SHARED = "defaults"

        [[job]]
        name = "lint"
        argv = ["ruff", "check", "."]
        lane = "lint"
        env = { SHARED = "job", CI = "{here}" }

        [[job]]
        name = "quick"
        argv = ["true"]
        timeout_ms = 0
        """,
        tmp_path,
    )
    first, lint, quick = jobs
    # [defaults] applies to every job, wherever it stands in the file.
    assert (first.kind, first.name, first.project) == (
        "command",
        "command#1",
        str(tmp_path / "proj"),
    )
    assert first.timeout_ms == 5000
    assert first.lane is None
    assert first.lane_key == str(tmp_path / "proj")
    assert (lint.lane, lint.lane_key) == ("lint", "lane:lint")
    assert quick.timeout_ms is None  # the job's own 0: no deadline
    payload = lint.payload({"{here}": "/h"})
    # env_file first, then [defaults.env], then the job's env; placeholders only in env.
    assert payload["env"] == {"FROM_FILE": "1", "SHARED": "job", "CI": "/h"}
    assert first.payload({})["env"] == {"FROM_FILE": "1", "SHARED": "defaults", "CI": "1"}


def test_without_defaults_a_job_runs_in_the_files_directory(tmp_path: Path) -> None:
    (job,) = parse('[[job]]\nargv = ["make"]\n', tmp_path)
    assert job.project == os.path.realpath(tmp_path)
    assert job.kind == "command"
    assert job.env is None
    assert "env" not in job.payload({})


def test_env_files_read_as_dotenv_files_are(tmp_path: Path) -> None:
    from supervisor._cli._runfile import EnvFileError, read_env_file

    env = tmp_path / "x.env"
    env.write_text(
        "# a comment\n"
        "\n"
        "PLAIN=value  # trailing comment\n"
        "export EXPORTED = spaced out \n"
        "SINGLE='$HOME # kept \\n'\n"
        'DOUBLE="a\\tb \\"q\\" $HOME"\n'
        'MULTI="line one\n'
        'line two"\n'
        "EMPTY=\n"
        "HASH=a#b\n"
        "PLAIN=again\n"
    )
    assert read_env_file(str(env)) == {
        "PLAIN": "again",
        "EXPORTED": "spaced out",
        "SINGLE": "$HOME # kept \\n",
        "DOUBLE": 'a\tb "q" $HOME',
        "MULTI": "line one\nline two",
        "EMPTY": "",
        "HASH": "a#b",
    }
    for text, line, fragment in [
        ("A=1\nB\n", 2, "expected NAME=VALUE"),
        ("=1\n", 1, "expected NAME=VALUE"),
        ('A="open\nB=2\n', 1, "quote of A is not closed"),
        ("A='x' y\n", 1, "text after the closing quote"),
        ("A=\x00\n", 1, "can not be set in an environment"),
    ]:
        env.write_text(text)
        with pytest.raises(EnvFileError) as info:
            read_env_file(str(env))
        assert (info.value.line, fragment in info.value.message) == (line, True), info.value


def test_each_job_knows_the_line_of_its_node(tmp_path: Path) -> None:
    """A pin no node satisfies is refused at the line of its ``node`` (run --ray): the job's
    own, or ``[defaults]``'s when it comes from there; 0 without one."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    jobs = parse(
        """\
        [defaults]
        node = "zone=eu"

        [[job]]
        project = "a"
        argv = ["true"]

        [[job]]
        project = "b"
        argv = ["true"]
        node = "bigbox"
        """,
        tmp_path,
    )
    assert [(job.node, job.node_line) for job in jobs] == [("zone=eu", 2), ("bigbox", 11)]
    (unpinned,) = parse('[[job]]\nargv = ["true"]\n', tmp_path)
    assert (unpinned.node, unpinned.node_line) == (None, 0)


def test_a_lane_takes_its_projects_pin_from_any_of_its_jobs(tmp_path: Path) -> None:
    """``run --ray`` places a lane at its first job: an unpinned job of the project before
    the pinned one carries the project's pin (it was placed anywhere, the pin ignored)."""
    from supervisor._cli._run import _pinned_lanes

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    run_file = parse_run_file(
        textwrap.dedent(
            """\
            [[job]]
            project = "a"
            argv = ["true"]

            [[job]]
            project = "b"
            argv = ["true"]

            [[job]]
            project = "a"
            argv = ["true"]
            node = "zone=b"
            """
        ),
        path="lanes.toml",
        directory=str(tmp_path),
    )
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    assert _pinned_lanes(run_file) == [(a, "zone=b"), (b, None), (a, "zone=b")]
