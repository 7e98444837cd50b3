"""CoreError keeps what it reports bounded: the message and every ``details`` value."""

from __future__ import annotations

from protocol import CoreError


def test_details_are_cut_like_the_message() -> None:
    huge = "é" * 300_000
    error = CoreError(
        "launch_failed",
        f"cannot start {huge}",
        {"field": "root", "root": huge, "argv": [huge] * 500},
    )
    assert len(error.message.encode()) <= 1024
    assert error.details is not None
    root = error.details["root"]
    assert isinstance(root, str)
    assert len(root.encode()) <= 1024
    assert root == "é" * 512
    argv = error.details["argv"]
    assert isinstance(argv, list)
    assert len(argv) == 64
    assert error.details["field"] == "root"
