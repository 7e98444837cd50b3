"""Real language servers from other ecosystems (issue 16): clangd (C), typescript-language-server
(TypeScript), pyright and jedi-language-server (Python), bash-language-server (Bash).

``scripts/install-peers`` installs them (npm ones into ``.peers/node``); a server that is absent
is skipped with a message naming it and the script. Each flow: start, ready, open a real file,
its diagnostics (where the server reports some without extra tools), documentSymbol, a stop
with exit code 0, and nothing left running (the conftest leak guard). Every request a server
sends us must be one we serve: a ``log`` event from ``serverRequest`` means one was not.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest
import trio

from supervisor import open_core
from tests._procfs import runs_no_more
from tests.supervisor.lsp._support import BIN, WAIT_S, as_obj, start

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
NODE_BIN = os.path.join(ROOT, ".peers", "node", "node_modules", ".bin")
TSSERVER = os.path.join(ROOT, ".peers", "node", "node_modules", "typescript", "lib")


@dataclass(frozen=True)
class Peer:
    """One server: how to start it and what its file must produce."""

    argv: list[str]
    file: str
    language: str
    source: str
    symbols: frozenset[str]
    #: A text every expected diagnostic message contains, or None: the server reports
    #: nothing for this file without tools we don't install (shellcheck).
    diagnostic: str | None
    initialization_options: JSONValue = None


C_SOURCE = """\
struct point { int x; int y; };

int area(struct point p) {
    return p.x * missing;
}
"""
TS_SOURCE = """\
function greet(name: string): number {
    return "hello " + name;
}

class Greeter {
    run(): void {}
}
"""
PY_SOURCE = """\
def greet(name):
    return "hello " + nam


class Greeter:
    def run(self):
        return greet("x")
"""
JEDI_SOURCE = """\
def greet(name):
    return "hello " + name


class Greeter:
    def run(self:
        return greet("x")
"""
BASH_SOURCE = """\
#!/bin/bash
greet() {
    echo "hello $1"
}

cleanup() {
    rm -f /tmp/none
}
greet world
"""

PEERS: dict[str, Peer] = {
    "clangd": Peer(
        ["clangd", "--log=error"],
        "area.c",
        "c",
        C_SOURCE,
        frozenset({"point", "area"}),
        "missing",
    ),
    "typescript-language-server": Peer(
        [os.path.join(NODE_BIN, "typescript-language-server"), "--stdio"],
        "greet.ts",
        "typescript",
        TS_SOURCE,
        frozenset({"greet", "Greeter"}),
        "not assignable",
        {"tsserver": {"path": TSSERVER}},
    ),
    "pyright": Peer(
        [os.path.join(NODE_BIN, "pyright-langserver"), "--stdio"],
        "greet.py",
        "python",
        PY_SOURCE,
        frozenset({"greet", "Greeter"}),
        '"nam" is not defined',
    ),
    "jedi-language-server": Peer(
        [os.path.join(BIN, "jedi-language-server")],
        "greet.py",
        "python",
        JEDI_SOURCE,
        frozenset({"greet", "Greeter"}),
        "",  # jedi reports the syntax error; its wording varies by version
    ),
    "bash-language-server": Peer(
        [os.path.join(NODE_BIN, "bash-language-server"), "start"],
        "greet.sh",
        "shellscript",
        BASH_SOURCE,
        frozenset({"greet", "cleanup"}),
        None,
    ),
}


def _executable(argv0: str) -> str | None:
    return (
        shutil.which(argv0) if os.sep not in argv0 else argv0 if os.access(argv0, os.X_OK) else None
    )


def _names(symbols: JSONValue) -> set[str]:
    """Names of DocumentSymbol (with children) or SymbolInformation results."""
    names: set[str] = set()
    for item in symbols if isinstance(symbols, list) else []:
        entry = as_obj(item)
        names.add(str(entry["name"]))
        names |= _names(entry.get("children"))
    return names


@pytest.mark.parametrize("name", sorted(PEERS))
async def test_language_server_from_another_ecosystem(name: str, tmp_path: str) -> None:
    peer = PEERS[name]
    executable = _executable(peer.argv[0])
    if executable is None:
        pytest.skip(f"{name} is not installed (scripts/install-peers installs it)")
    path = os.path.join(tmp_path, peer.file)
    await trio.Path(path).write_text(peer.source)
    uri = "file://" + path
    extra: dict[str, JSONValue] = {"requestTimeoutMilliseconds": 120_000}
    if peer.initialization_options is not None:
        extra["initializationOptions"] = peer.initialization_options
    async with open_core() as core:
        session = await start(core, [executable, *peer.argv[1:]], str(tmp_path), **extra)
        await session.wait_state("ready")
        pid = (await session.snapshot())["pid"]
        assert isinstance(pid, int)
        await session.call("lsp.syncDocument", uri=uri, languageId=peer.language, text=peer.source)
        if peer.diagnostic is not None:
            expected = peer.diagnostic

            def reported(event: JSONObject) -> bool:
                if event["event"] != "diagnostics" or event["uri"] != uri:
                    return False
                found = event["diagnostics"]
                assert isinstance(found, list)
                return any(expected in str(as_obj(d)["message"]) for d in found)

            await session.wait_for(reported)
        # A server may answer before its analysis of the file is done (bash-language-server
        # parses in the background): ask again until the symbols are there.
        with trio.fail_after(WAIT_S):
            while True:
                symbols = await session.roundtrip(
                    "textDocument/documentSymbol", {"textDocument": {"uri": uri}}
                )
                assert "result" in symbols, symbols
                if peer.symbols <= _names(symbols["result"]):
                    break
                await trio.sleep(0.2)
        result = await session.stop()
        assert result["state"] == "stopped"
        assert runs_no_more(pid)
        unserved = [
            e["message"]
            for e in session.seen
            if e["event"] == "log" and e.get("source") == "serverRequest"
        ]
        assert unserved == [], unserved


#: One version of a document per language: the version's only symbol is ``version_<i>``.
VERSIONED: dict[str, str] = {
    "c": "int version_{i}(void) {{ return {i}; }}\n",
    "typescript": "function version_{i}(): number {{ return {i}; }}\n",
    "python": "def version_{i}():\n    return {i}\n",
    "shellscript": "version_{i}() {{\n    echo {i}\n}}\n",
}


@pytest.mark.parametrize("name", sorted(PEERS))
async def test_pipelined_changes_reach_a_server_of_another_ecosystem_in_order(
    name: str, tmp_path: str
) -> None:
    """Issue 24 (the order rule) against real servers beyond pylsp: 100 document versions
    submitted from one task without waiting for any answer; the server ends with the last
    one (had a change overtaken a later one, its symbols would name an older version)."""
    peer = PEERS[name]
    executable = _executable(peer.argv[0])
    if executable is None:
        pytest.skip(f"{name} is not installed (scripts/install-peers installs it)")
    path = os.path.join(tmp_path, peer.file)
    template = VERSIONED[peer.language]
    await trio.Path(path).write_text(template.format(i=0))
    uri = "file://" + path
    extra: dict[str, JSONValue] = {"requestTimeoutMilliseconds": 120_000}
    if peer.initialization_options is not None:
        extra["initializationOptions"] = peer.initialization_options
    async with open_core() as core:
        session = await start(core, [executable, *peer.argv[1:]], str(tmp_path), **extra)
        await session.wait_state("ready")
        submitted = [
            core.submit(
                "lsp.syncDocument",
                {
                    "sessionId": session.id,
                    "uri": uri,
                    "languageId": peer.language,
                    "text": template.format(i=i),
                },
            )
            for i in range(100)
        ]
        versions = [as_obj(await op.result())["documentVersion"] for op in submitted]
        assert versions == list(range(1, 101))
        names: set[str] = set()
        with trio.fail_after(WAIT_S):
            while names != {"version_99"}:
                symbols = await session.roundtrip(
                    "textDocument/documentSymbol", {"textDocument": {"uri": uri}}
                )
                assert "result" in symbols, symbols
                names = _names(symbols["result"])
                if names != {"version_99"}:
                    await trio.sleep(0.2)
        assert (await session.stop())["state"] == "stopped"
