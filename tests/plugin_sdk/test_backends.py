"""The SDK driven through real example backends (examples/backends) by a test-side host."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import pytest
import trio

from supervisor import JSONRPCError

from ._host import CONTEXT, Host, scoped_pids, wait_gone

if TYPE_CHECKING:
    from pathlib import Path

    from protocol import JSONValue

    from ._host import Peer


async def test_negotiation_offers_sorted_functions_and_logging() -> None:
    host = Host()
    async with host.open_backend("tool_runner.py", "dev.example.tools") as peer:
        result = peer.initialize_result
        experimental = result["capabilities"]["experimental"]
        ids = [f["id"] for f in experimental["litheFunctions"]["functions"]]
        assert ids == sorted(ids)
        assert "tool.compile" in ids
        assert "tool.extra" not in ids
        assert experimental["litheFunctions"]["version"] == 0
        assert experimental["litheLogging"] == {"version": 0}
        assert result["serverInfo"] == {"name": "example-tools", "version": "1.0.0"}


async def test_without_function_offer_nothing_is_negotiated() -> None:
    host = Host()
    async with host.open_backend("tool_runner.py", "p", offer_functions=False) as peer:
        assert "litheFunctions" not in peer.initialize_result["capabilities"]["experimental"]
        with pytest.raises(JSONRPCError) as info:
            await peer.invoke("tool.compile", {"root": "."})
        assert info.value.code == -32601


async def test_lifecycle_refusals() -> None:
    host = Host()
    async with host.open_backend("tool_runner.py", "p", initialize=False) as peer:
        with pytest.raises(JSONRPCError) as info:
            await peer.invoke("tool.compile")
        assert info.value.code == -32002
        assert "wait for its response" in info.value.message
        with pytest.raises(JSONRPCError) as info:
            await peer.endpoint.request("initialize", {"capabilities": {}})
        assert info.value.data == {"code": "sdk.logging.required"}


async def test_invoke_with_real_tool_progress_and_facts(tmp_path: Path) -> None:
    (tmp_path / "good.py").write_text("x = 1\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "bad.py").write_text("def (:\n")
    host = Host()
    async with host.open_backend("tool_runner.py", "p") as peer:
        result = await peer.invoke("tool.compile", {"root": str(tmp_path)}, context=CONTEXT)
        assert result == {"compiled": 1, "failed": ["sub/bad.py"]}
        await peer.wait_for(lambda: len(peer.progress()) == 2 and peer.facts())
        reports = peer.progress()
        assert [r["percentage"] for r in reports] == [50, 100]
        assert all(r["operationID"].startswith("op-") for r in reports)
        fact = peer.facts()[0]
        assert fact["kind"] == "operationFinished"
        assert fact["operation"] == "tool.compile"
        assert set(fact) == {"kind", "operation", "durationMs", "operationId"}


async def test_failures_plugin_error_and_generic(tmp_path: Path) -> None:
    host = Host()
    async with host.open_backend("tool_runner.py", "p") as peer:
        with pytest.raises(JSONRPCError) as info:
            await peer.invoke("tool.compile", {"root": str(tmp_path / "missing")})
        assert info.value.message == "The folder to compile does not exist."
        assert info.value.data == {"code": "tool.rootMissing"}
        with pytest.raises(JSONRPCError) as info:
            await peer.invoke("tool.compile", {"root": 5})
        assert info.value.message == "The function failed."
        assert info.value.data is None
        await peer.wait_for(lambda: len(peer.facts()) == 2)
        assert [f["code"] for f in peer.facts()] == ["plugin.error", "handler.exception"]
        assert all(f["kind"] == "operationFailed" for f in peer.facts())
        # The session keeps serving.
        assert await peer.invoke("tool.noisy") == "quiet"


async def test_console_output_goes_to_stderr() -> None:
    host = Host()
    stderr: list[bytes] = []
    async with host.open_backend("tool_runner.py", "p", stderr_sink=stderr) as peer:
        assert await peer.invoke("tool.noisy") == "quiet"
        with trio.fail_after(10):
            while b"corrupt the protocol" not in b"".join(stderr):  # noqa: ASYNC110 - polling /proc or a list
                await trio.sleep(0.05)
        assert peer.endpoint.statistics().ignored_replies == 0


async def _wait_running(peer: Any, backend_pid: int, count: int = 2) -> set[int]:
    await peer.wait_for(lambda: len(peer.progress()) >= 1)
    with trio.fail_after(20):
        while len(pids := scoped_pids(backend_pid)) < count:  # noqa: ASYNC110 - polling /proc or a list
            await trio.sleep(0.05)
    return pids


async def test_cancel_ends_the_call_and_its_tree() -> None:
    host = Host()
    async with host.open_backend("tool_runner.py", "p") as peer, trio.open_nursery() as nursery:
        outcome: list[object] = []

        async def call() -> None:
            with trio.CancelScope() as scope:
                host_scope.append(scope)
                outcome.append(await peer.invoke("tool.run", {"steps": 1000, "delayMs": 50}))

        host_scope: list[trio.CancelScope] = []
        nursery.start_soon(call)
        pids = await _wait_running(peer, peer.pid)
        host_scope[0].cancel()  # the endpoint sends $/cancelRequest
        await wait_gone(pids)
        assert outcome == []
        # Cancellation is an expected result: no failure fact.
        assert not [f for f in peer.facts() if f["kind"] == "operationFailed"]
        assert await peer.invoke("tool.noisy") == "quiet"


async def test_deadline_ends_the_call_and_its_tree() -> None:
    host = Host()
    async with host.open_backend("tool_runner.py", "p") as peer:
        pids_seen: set[int] = set()

        async def watch() -> None:
            while True:
                pids_seen.update(scoped_pids(peer.pid))
                await trio.sleep(0.05)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            with pytest.raises(trio.TooSlowError):
                await peer.endpoint.request(
                    "lithe/function/invoke",
                    {"functionID": "tool.run", "operationID": "d1", "params": {"steps": 1000}},
                    timeout_ms=3000,
                )
            nursery.cancel_scope.cancel()
        assert len(pids_seen) >= 2
        await wait_gone(pids_seen)


async def test_register_and_unregister_at_runtime() -> None:
    host = Host()
    async with host.open_backend("tool_runner.py", "p") as peer:
        with pytest.raises(JSONRPCError):
            await peer.invoke("tool.extra")
        result = await peer.invoke("tool.enableExtra")
        assert "tool.extra" in result["registered"]
        assert ("lithe/function/register", {"functions": [{"id": "tool.extra"}]}) in peer.requests
        assert await peer.invoke("tool.extra") == "extra"
        await peer.invoke("tool.disableExtra")
        assert ("lithe/function/unregister", {"ids": ["tool.extra"]}) in peer.requests
        with pytest.raises(JSONRPCError) as info:
            await peer.invoke("tool.extra")
        assert info.value.data == {"code": "plugin.function.unknown"}


async def test_at_most_16_host_requests_outstanding() -> None:
    host = Host()
    host.credential_delay_s = 0.2
    async with host.open_backend("tool_runner.py", "p") as peer:
        assert await peer.invoke("tool.hostFlood", {"n": 40}) == {"answered": 40}
        assert peer.host_max_outstanding == 16


class _RefusingHost(Host):
    """Refuses one credentials request, as a host whose user denied that secret would."""

    async def _handle(self, peer: Peer, method: str, params: JSONValue | None) -> JSONValue:
        if method == "lithe/host/credentials/get" and params == {"key": "key.3"}:
            raise JSONRPCError(
                -32010, "Access to key.3 was denied.", {"code": "plugin.host.permissionDenied"}
            )
        return await super()._handle(peer, method, params)


async def test_a_host_refusal_among_concurrent_requests_fails_the_call_clearly() -> None:
    """tool.hostFlood: a HostError from one of its concurrent requests is reported as such,
    not as an ExceptionGroup behind the generic "The function failed."."""
    host = _RefusingHost()
    stderr: list[bytes] = []
    async with host.open_backend("tool_runner.py", "p", stderr_sink=stderr) as peer:
        with pytest.raises(JSONRPCError) as info:
            await peer.invoke("tool.hostFlood", {"n": 8})
        assert info.value.data == {"code": "tool.hostRefused"}
        assert info.value.message == (
            "The host refused a credentials request (plugin.host.permissionDenied):"
            " Access to key.3 was denied."
        )
        # The backend is fine afterwards.
        assert await peer.invoke("tool.hostFlood", {"n": 2}) == {"answered": 2}
    assert b"ExceptionGroup" not in b"".join(stderr)


async def test_shutdown_ends_running_calls_then_exit_zero() -> None:
    host = Host()
    async with host.open_backend("tool_runner.py", "p") as peer, trio.open_nursery() as nursery:
        errors: list[JSONRPCError] = []

        async def call() -> None:
            try:
                await peer.invoke("tool.run", {"steps": 1000, "delayMs": 50})
            except JSONRPCError as exc:
                errors.append(exc)

        nursery.start_soon(call)
        pids = await _wait_running(peer, peer.pid)
        assert await peer.endpoint.request("shutdown") is None
        await wait_gone(pids)
        with trio.fail_after(10):
            while not errors:  # noqa: ASYNC110 - polling /proc or a list
                await trio.sleep(0.02)
        assert errors[0].code == -32800
        await peer.endpoint.notify("exit")
        with trio.fail_after(20):
            assert await peer.tree.wait() == 0


@pytest.mark.parametrize("how", ["exit", "eof"])
async def test_exit_or_end_of_input_ends_everything(how: str) -> None:
    host = Host()
    async with host.open_backend("tool_runner.py", "p") as peer, trio.open_nursery() as nursery:

        async def call() -> None:
            with contextlib.suppress(Exception):  # the session ends under it
                await peer.invoke("tool.run", {"steps": 1000, "delayMs": 50})

        nursery.start_soon(call)
        pids = await _wait_running(peer, peer.pid)
        if how == "exit":
            await peer.endpoint.notify("exit")
        else:
            await peer.tree.stdin.aclose()
        with trio.fail_after(20):
            assert await peer.tree.wait() == 1
        await wait_gone(pids)
        nursery.cancel_scope.cancel()


async def test_relayed_chain_result_and_caller_field() -> None:
    host = Host()
    async with (
        host.open_backend("tool_runner.py", "dev.example.tools") as tools,
        host.open_backend("exporter.py", "dev.example.exporter"),
        host.open_backend("caller.py", "dev.example.caller") as caller,
    ):
        result = await caller.invoke(
            "report.build", {"project": "app", "nested": True}, context=CONTEXT
        )
        report = result["report"]
        assert report["project"] == "app"
        assert report["caller"] == {"pluginID": "dev.example.caller"}
        assert report["nested"]["caller"] == {"pluginID": "dev.example.exporter"}
        assert report["nested"]["version"].startswith("Python")
        # Each nested call names the call it belongs to.
        assert caller.relayed[0]["parentOperationID"].startswith("op-")
        exporter = host.peers["dev.example.exporter"]
        assert exporter.relayed[0]["parentOperationID"].startswith("relay-")
        assert "caller" not in caller.relayed[0]
        assert tools.facts()


async def test_relayed_chain_cancelled_from_the_top() -> None:
    host = Host()
    async with (
        host.open_backend("tool_runner.py", "dev.example.tools") as tools,
        host.open_backend("exporter.py", "dev.example.exporter") as exporter,
        host.open_backend("caller.py", "dev.example.caller") as caller,
        trio.open_nursery() as nursery,
    ):
        top: list[trio.CancelScope] = []

        async def call() -> None:
            with trio.CancelScope() as scope:
                top.append(scope)
                await caller.invoke(
                    "report.build",
                    {"project": "app", "nested": True, "nestedSleepMs": 600_000},
                    context=CONTEXT,
                )

        nursery.start_soon(call)
        with trio.fail_after(30):
            while not (pids := scoped_pids(tools.pid)):  # noqa: ASYNC110 - polling /proc or a list
                await trio.sleep(0.05)
        top[0].cancel()
        await wait_gone(pids)
        # Every provider down the chain was cancelled ($/cancelRequest from the relay).
        await caller.wait_for(lambda: len(caller.relay_cancelled) == 1)
        await exporter.wait_for(lambda: len(exporter.relay_cancelled) == 1)
        assert not scoped_pids(exporter.pid)
        assert not scoped_pids(caller.pid)
