"""plugin-contract.md "Plugin-owned sessions", "State and retention": one state directory per
workspace for each server, its modification time refreshed on a start, and a sweep after the
start that deletes only what ``state.retention`` lets go (never an open workspace's)."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import pytest
import trio

from protocol import CoreError
from supervisor import open_core
from supervisor._api import validate_payload
from supervisor._lsp._service import parse_start
from supervisor._lsp._workspace_state import Retention, expired_names
from tests.supervisor.lsp._support import fake, start

DAY = 86_400.0
NOW = 1_000 * DAY


def test_older_than_max_age_goes() -> None:
    entries = [("old", NOW - 31 * DAY), ("fresh", NOW - 29 * DAY)]
    assert expired_names(Retention(64, 30), NOW, entries, []) == ["old"]


def test_of_the_rest_only_the_newest_that_fit_stay() -> None:
    entries = [(f"w{index}", NOW - index * 60) for index in range(6)]
    # Two open workspaces take two of the six places: the four others stay.
    assert expired_names(Retention(6, 365), NOW, entries, ["w4", "w5"]) == []
    # Of five places they leave three: the oldest of the others goes.
    assert expired_names(Retention(5, 365), NOW, entries, ["w4", "w5"]) == ["w3"]
    assert expired_names(Retention(4, 365), NOW, entries, ["w4", "w5"]) == ["w2", "w3"]
    assert expired_names(Retention(1, 365), NOW, entries, []) == ["w1", "w2", "w3", "w4", "w5"]


def test_an_open_workspace_is_never_pruned_and_odd_names_are_ignored() -> None:
    entries = [("open", NOW - 400 * DAY), ("..", NOW - 400 * DAY), ("a/b", NOW - 400 * DAY)]
    assert expired_names(Retention(1, 1), NOW, entries, ["open"]) == []


def test_the_payload_is_checked() -> None:
    base = {
        "serverId": "x",
        "executable": sys.executable,
        "workingDirectory": "/",
        "rootUri": "file:///x",
    }
    for bad in (
        {"root": "relative", "name": "w"},
        {"root": "/", "name": "w"},
        {"root": "/tmp/s", "name": "a/b"},
        {"root": "/tmp/s", "name": ".."},
        {"root": "/tmp/s", "name": "w", "retention": {"maxEntries": 65, "maxAgeDays": 1}},
        {"root": "/tmp/s", "name": "w", "retention": {"maxEntries": 1, "maxAgeDays": 366}},
        {"root": "/tmp/s", "name": "w", "retention": {"maxEntries": 1}},
        {"root": "/tmp/s", "name": "w", "bogus": 1},
    ):
        payload = {**base, "workspaceState": bad}

        def check(payload: dict[str, Any] = payload) -> None:
            # The declaration (checked by the Core before the handler), then the command.
            validate_payload("lsp.startServer", payload)
            parse_start(payload)

        with pytest.raises(CoreError) as refused:
            check()
        assert refused.value.code == "invalid_request"
    spec = parse_start(
        {
            **base,
            "workspaceState": {
                "root": "/tmp/s/",
                "name": "w",
                "retention": {"maxEntries": 64, "maxAgeDays": 365},
                "activeNames": ["v"],
            },
        }
    )
    assert spec.workspace_state is not None
    assert spec.workspace_state.directory == "/tmp/s/w"


async def test_a_start_makes_its_directory_and_the_sweep_deletes_only_expired_ones(
    tmp_path: str,
) -> None:
    root = os.path.join(tmp_path, "state")
    old = time.time() - 40 * DAY
    for name in ("expired", "open-elsewhere"):
        os.makedirs(os.path.join(root, name, "cache"))
        os.utime(os.path.join(root, name), (old, old))
    # A symlink to a directory outside, and a file: never deleted, never followed.
    outside = os.path.join(tmp_path, "outside")
    os.makedirs(outside)
    os.symlink(outside, os.path.join(root, "link"))
    await trio.Path(root, "file").write_text("x")
    async with open_core() as core:
        session = await start(
            core,
            fake(),
            str(tmp_path),
            workspaceState={
                "root": root,
                "name": "this",
                "retention": {"maxEntries": 8, "maxAgeDays": 30},
                "activeNames": ["open-elsewhere"],
            },
        )
        pruned = await session.wait_for(lambda e: e["event"] == "workspaceStatePruned")
        assert pruned["names"] == ["expired"]
        await session.stop()
    assert sorted(os.listdir(root)) == ["file", "link", "open-elsewhere", "this"]
    assert await trio.Path(outside).is_dir()
    # This start's directory was made and its modification time is now.
    assert time.time() - os.stat(os.path.join(root, "this")).st_mtime < 3600


async def test_without_a_retention_nothing_is_deleted(tmp_path: str) -> None:
    root = os.path.join(tmp_path, "state")
    os.makedirs(os.path.join(root, "ancient"))
    ancient = time.time() - 4000 * DAY
    os.utime(os.path.join(root, "ancient"), (ancient, ancient))
    async with open_core() as core:
        session = await start(
            core, fake(), str(tmp_path), workspaceState={"root": root, "name": "this"}
        )
        await session.wait_state("ready")
        await session.stop()
    assert sorted(os.listdir(root)) == ["ancient", "this"]
    assert not [e for e in session.seen if e["event"] == "workspaceStatePruned"]
