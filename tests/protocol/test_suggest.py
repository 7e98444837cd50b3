"""The one did-you-mean rule (protocol._suggest)."""

from __future__ import annotations

from protocol import did_you_mean, suggest


def test_close_spelling_is_suggested() -> None:
    assert suggest("workingDir", ["workingDirectory", "environment", "argv"]) == "workingDirectory"
    assert suggest("pyhton", ["python", "here", "tmpdir"]) == "python"


def test_case_only_difference_is_suggested() -> None:
    assert suggest("ARGV", ["argv", "env"]) == "argv"


def test_nothing_close_gives_none() -> None:
    assert suggest("zzzz", ["argv", "env"]) is None
    assert did_you_mean("zzzz", ["argv", "env"]) == ""


def test_alias_wins_only_when_its_target_is_known() -> None:
    assert suggest("cmd", ["argv", "cwd"], aliases={"cmd": "argv"}) == "argv"
    assert suggest("cmd", ["cwd"], aliases={"cmd": "argv"}) == "cwd"


def test_phrase() -> None:
    assert did_you_mean("nmae", ["name", "kind"]) == " (did you mean 'name'?)"
