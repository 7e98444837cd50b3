"""``CoreThread.events()``: a source's events as a blocking iterator, with real processes."""

from __future__ import annotations

import json
import sys
import threading
from typing import TYPE_CHECKING

import pytest

from supervisor import CoreThread

if TYPE_CHECKING:
    import os

    from protocol import JSONObject, JSONValue

PY = sys.executable


def _call(core: CoreThread, command: str, payload: JSONObject) -> JSONValue:
    response = json.loads(
        core.execute_json(json.dumps({"id": 1, "command": command, "payload": payload}))
    )
    assert response["ok"] is True, response
    data: JSONValue = response["data"]
    return data


def test_job_events_arrive_in_order_until_the_job_finished(tmp_path: os.PathLike[str]) -> None:
    with CoreThread() as core, core.events() as events:
        started = _call(
            core,
            "job.start",
            {
                "kind": "build",
                "root": str(tmp_path),
                "argv": [PY, "-c", "print('one'); print('two')"],
            },
        )
        assert isinstance(started, dict)
        job_id = started["jobId"]
        seen: list[JSONObject] = []
        for event in events:
            seen.append(event)
            if event["event"] == "job.finished":
                break
    names = [e["event"] for e in seen]
    assert names[0] == "job.started"
    assert names[-1] == "job.finished"
    assert all(e["jobId"] == job_id for e in seen)
    assert "".join(str(e["text"]) for e in seen if e["event"] == "job.output") == "one\ntwo\n"
    assert seen[-1]["status"] == "ok"
    seqs = [e["seq"] for e in seen]
    assert all(isinstance(seq, int) for seq in seqs)
    assert seqs == sorted(seqs)  # type: ignore[type-var]
    assert events.gaps == 0


def test_close_from_another_thread_ends_a_waiting_iteration() -> None:
    with CoreThread() as core:
        events = core.events()
        got: list[object] = []
        waiter = threading.Thread(target=lambda: got.extend(events))
        waiter.start()
        waiter.join(0.2)
        assert waiter.is_alive()  # blocked in the iteration: there are no events
        events.close()
        waiter.join(10)
        assert not waiter.is_alive()
        assert got == []
        # Closing ended only that wait: the Core goes on.
        ping = _call(core, "core.ping", {})
        assert isinstance(ping, dict)
        assert ping["protocolVersion"] == 1
        assert list(events) == []  # stays ended


def test_leaving_the_core_thread_ends_the_iteration() -> None:
    ended = threading.Event()
    with CoreThread() as core:
        events = core.events()

        def consume() -> None:
            for _ in events:
                pass
            ended.set()

        waiter = threading.Thread(target=consume)
        waiter.start()
        waiter.join(0.1)
    waiter.join(10)
    assert ended.is_set()


def test_terminal_events_end_when_the_terminal_is_disposed() -> None:
    with CoreThread() as core:
        created = _call(
            core,
            "terminal.create",
            {"executable": PY, "arguments": ["-c", "print('hello from a pty'); input()"]},
        )
        assert isinstance(created, dict)
        terminal_id = created["terminalID"]
        assert isinstance(terminal_id, str)
        output = ""
        with core.events("terminal", terminal_id) as events:
            for event in events:
                if event["event"] == "output":
                    output += str(event["data"])
                if "hello from a pty" in output:
                    break
            _call(core, "terminal.dispose", {"terminalID": terminal_id})
            rest = list(events)  # what was queued, then the end (the terminal is gone)
        assert all(e["terminalID"] == terminal_id for e in rest)


def test_a_terminal_s_events_include_its_exit() -> None:
    # Its exit used to reach the queue only after a terminal.onExit: the iterator waited on.
    with CoreThread() as core:
        created = _call(
            core,
            "terminal.create",
            {"executable": PY, "arguments": ["-c", "print('bye'); raise SystemExit(5)"]},
        )
        assert isinstance(created, dict)
        terminal_id = created["terminalID"]
        assert isinstance(terminal_id, str)
        with core.events("terminal", terminal_id) as events:
            exit_event = next(e for e in events if e["event"] == "exit")
        assert exit_event["exitCode"] == 5
        _call(core, "terminal.dispose", {"terminalID": terminal_id})


def test_a_source_is_named_as_its_kind_takes_it() -> None:
    with CoreThread() as core:
        with pytest.raises(ValueError, match="one of"):
            core.events("nope")
        with pytest.raises(ValueError, match="need a source_id"):
            core.events("lsp")
        with pytest.raises(ValueError, match="take no source_id"):
            core.events("job", "x")
        # An id that names nothing ends at once (not_found), it does not wait.
        assert list(core.events("lsp", "no-such-session")) == []
