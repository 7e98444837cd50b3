"""A tiny interactive terminal over ``supervisor serve`` .

Usage::

    python examples/terminal_client.py                 # bash --norc --noprofile -i
    python examples/terminal_client.py python3 -q      # any program, argv style
    printf 'echo hi\\nexit\\n' | python examples/terminal_client.py

It starts ``python -m supervisor serve``, creates a terminal with ``terminal.create`` sized
like your window, subscribes with ``terminal.onExit``, sends your keystrokes with
``terminal.write`` (your terminal in raw mode while it runs; piped input is sent line by
line), forwards window resizes with ``terminal.resize`` and prints the ``output`` events it
drains with ``terminal.waitEvents``. When the program exits it prints the exit outcome,
disposes the terminal and shuts the server down. Ctrl-] closes the terminal instead
(``terminal.close``: hang-up, TERM, KILL of everything the program started).

When piped input runs out (``printf 'sleep 100\\n' | ...``, ``< /dev/null``) it types
Ctrl-D once a second, on which a shell or a REPL ends as at a real terminal, for at most
:data:`END_OF_INPUT_GRACE_S` seconds, then closes the terminal: the client always ends with
its input.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import termios
import tty
from typing import TYPE_CHECKING

import trio

from supervisor import JSONRPCError, open_jsonrpc_endpoint

if TYPE_CHECKING:
    from collections.abc import Iterator

    from protocol import JSONObject, JSONValue
    from supervisor import JSONRPCEndpoint

#: Ctrl-]: close the terminal from the client side (as telnet does).
ESCAPE_KEY = b"\x1d"
#: Ctrl-D, typed when piped input ends: the end of input of a program reading the terminal.
EOF_KEY = "\x04"
#: How long a program may take to exit after piped input ended, before the terminal is
#: closed, in seconds: enough for the last lines typed (``exit 5``) to run.
END_OF_INPUT_GRACE_S = 5.0
#: Ctrl-D is typed again this often during that grace, in seconds: one typed before the
#: shell's line editor is up is lost when it switches the terminal to raw mode, and a
#: command that reads its input (``cat``) takes the first one itself.
EOF_REPEAT_S = 1.0


async def _refuse_requests(method: str, params: JSONValue | None) -> JSONValue:
    raise JSONRPCError(-32601, f"the terminal client answers no requests ({method})")


def _obj(value: JSONValue) -> JSONObject:
    if not isinstance(value, dict):
        raise RuntimeError(f"unexpected reply: {value!r}")
    return value


@contextlib.contextmanager
def _raw_mode(fd: int) -> Iterator[None]:
    """Raw keyboard input while the block runs, when ``fd`` is a terminal."""
    if not os.isatty(fd):
        yield
        return
    saved = termios.tcgetattr(fd)
    tty.setraw(fd)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


async def _send_keys(peer: JSONRPCEndpoint, terminal_id: str, done: trio.Event) -> None:
    stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    interactive = os.isatty(sys.stdin.fileno())
    terminal: JSONObject = {"terminalID": terminal_id}
    try:
        async with stdin:
            while not done.is_set():
                data = await stdin.receive_some(4096)
                if not data:
                    break
                if interactive and ESCAPE_KEY in data:
                    await peer.request("terminal.close", terminal)
                    return
                text = data.decode("utf-8", "replace")
                if interactive:
                    await peer.request("terminal.write", {**terminal, "data": text})
                    continue
                for line in text.splitlines(keepends=True):
                    await peer.request("terminal.write", {**terminal, "data": line})
                    # Piped lines are typed one at a time, as a person would.
                    await trio.sleep(0.05)
        # Piped input ended: Ctrl-D until the program exits, then the terminal is closed
        # (its exit outcome ends the client). Without this a program that does not read
        # its input (`sleep 100`) would keep the client running until it is killed.
        with trio.move_on_after(END_OF_INPUT_GRACE_S):
            while True:
                await peer.request("terminal.write", {**terminal, "data": EOF_KEY})
                await trio.sleep(EOF_REPEAT_S)
        await peer.request("terminal.close", terminal)
    except JSONRPCError:
        # The program ended meanwhile: nothing to type into or close; its exit outcome
        # is on the way to _show_output.
        return


async def _forward_resizes(peer: JSONRPCEndpoint, terminal_id: str) -> None:
    with trio.open_signal_receiver(signal.SIGWINCH) as signals:
        async for _ in signals:
            size = os.get_terminal_size(sys.stdout.fileno())
            await peer.request(
                "terminal.resize",
                {"terminalID": terminal_id, "rows": size.lines, "cols": size.columns},
            )


async def _show_output(peer: JSONRPCEndpoint, terminal_id: str) -> JSONObject:
    """Print output events until the exit outcome arrives; return it."""
    out = sys.stdout.buffer
    while True:
        batch = _obj(
            await peer.request(
                "terminal.waitEvents", {"terminalID": terminal_id, "timeoutMilliseconds": 10_000}
            )
        )
        events = batch["events"]
        assert isinstance(events, list)
        for event in events:
            event = _obj(event)
            if event["event"] == "output":
                out.write(str(event["data"]).encode("utf-8"))
                out.flush()
            elif event["event"] == "exit":
                return event


async def main(argv: list[str]) -> int:
    program = argv or ["bash", "--norc", "--noprofile", "-i"]
    interactive = os.isatty(sys.stdout.fileno())
    rows, cols = 24, 80
    if interactive:
        size = os.get_terminal_size(sys.stdout.fileno())
        rows, cols = size.lines, size.columns
    server = await trio.lowlevel.open_process(
        [sys.executable, "-m", "supervisor", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert server.stdin is not None
    assert server.stdout is not None
    exit_code: JSONValue = None
    arguments: list[JSONValue] = list(program[1:])
    async with (
        open_jsonrpc_endpoint(
            server.stdin, server.stdout, request_handler=_refuse_requests, name="supervisor"
        ) as peer,
        trio.open_nursery() as nursery,
    ):
        await peer.request("initialize", {"processId": os.getpid(), "capabilities": {}})
        await peer.notify("initialized", {})
        created = _obj(
            await peer.request(
                "terminal.create",
                {
                    "executable": program[0],
                    "arguments": arguments,
                    "rows": rows,
                    "cols": cols,
                    "title": "terminal_client",
                },
            )
        )
        terminal_id = str(created["terminalID"])
        await peer.request("terminal.onExit", {"terminalID": terminal_id})
        done = trio.Event()
        with _raw_mode(sys.stdin.fileno()):
            nursery.start_soon(_send_keys, peer, terminal_id, done)
            if interactive:
                nursery.start_soon(_forward_resizes, peer, terminal_id)
            outcome = await _show_output(peer, terminal_id)
            done.set()
            nursery.cancel_scope.cancel()
        exit_code = outcome["exitCode"]
        print(f"\r\n[terminal {terminal_id}: {outcome['reason']}, exit code {exit_code}]")
        await peer.request("terminal.dispose", {"terminalID": terminal_id})
        await peer.request("shutdown")
        await peer.notify("exit")
    await server.wait()
    return exit_code if isinstance(exit_code, int) else 1


if __name__ == "__main__":
    sys.exit(trio.run(main, sys.argv[1:]))
