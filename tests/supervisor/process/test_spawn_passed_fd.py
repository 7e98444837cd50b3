"""``spawn(pass_fd=...)``: one descriptor passed on purpose (a job's report pipe), and no other.

Each way a child can be started is checked: ``posix_spawn`` with ``closefrom``, without it (an
older C library: one close action per inheritable descriptor), and the fork fallback.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import pytest

import supervisor._process._spawn as spawn_module
from supervisor._process._tree import DEVNULL, _open_tree

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs procfs")

PY = sys.executable
PROBE = """
import json, os
fds = []
for fd in range(1024):
    try:
        os.fstat(fd)
    except OSError:
        continue
    fds.append(fd)
passed = int(os.environ["PASSED_FD"])
os.write(passed, b"through the passed descriptor")
print(json.dumps({"fds": fds, "passed": passed}))
"""


@pytest.mark.parametrize("mode", ["closefrom", "close-actions", "fork"])
async def test_only_the_passed_descriptor_reaches_the_child(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    libc_spawn = spawn_module._libc_spawn()
    if libc_spawn is None:
        pytest.skip("posix_spawn through ctypes is not available here")
    if mode == "closefrom" and not libc_spawn.closes_from:
        pytest.skip("the C library has no posix_spawn_file_actions_addclosefrom_np")
    if mode == "close-actions":
        monkeypatch.setattr(libc_spawn, "closes_from", False)
        monkeypatch.setattr(libc_spawn, "_addclosefrom", None)
    if mode == "fork":
        monkeypatch.setattr(spawn_module, "_forks", lambda cwd, no_tty_path: True)
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    leaked_r, leaked_w = os.pipe()
    # Inheritable, as a careless library leaves one: it must not reach the child.
    high = os.dup2(leaked_w, 900, inheritable=True)
    try:
        tree = await _open_tree(
            [PY, "-S", "-c", PROBE],
            stdin=DEVNULL,
            pass_fd=(write_end, "PASSED_FD"),
            yield_after_spawn=True,
        )
        os.close(write_end)
        write_end = -1
        async with tree:
            assert tree.stdout is not None
            out = b""
            while chunk := await tree.stdout.receive_some(65536):
                out += chunk
            assert await tree.wait() == 0
        info: dict[str, Any] = json.loads(out)
        # The child wrote before it exited: the bytes wait in the pipe.
        passed = os.read(read_end, 1024)
    finally:
        for fd in (read_end, write_end, leaked_r, leaked_w, high):
            if fd >= 0:
                os.close(fd)
    assert passed == b"through the passed descriptor"
    if mode == "fork":
        assert info["fds"] == [0, 1, 2, info["passed"]]
    else:
        assert info == {"fds": [0, 1, 2, 3], "passed": 3}
