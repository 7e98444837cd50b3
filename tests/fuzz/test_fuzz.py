"""The structured fuzz test: every command, valid, near-valid and hostile values (issue 13).

Driven through the Core (``CoreThread``, envelope JSON text) and through ``supervisor serve``
(a real subprocess speaking JSON-RPC over stdio). Every request gets exactly one answer, no
answer is ``internal``, ``core.ping`` answers after each request, memory stays bounded and
no process outlives the test (the suite's leak guard, and a scan for serve's markers).
A short derandomized run here; the long run is ``python -m benchmarks.bench_fuzz``.
"""

from __future__ import annotations

import os

from supervisor import CoreThread, open_core
from tests.fuzz.drivers import CoreDriver, ServeDriver, run_fuzz, serve_leftovers, workdir
from tests.fuzz.strategies import table

#: Examples per driver in the suite (a few hundred requests in all, under a minute).
SUITE_EXAMPLES = int(os.environ.get("SUPERVISOR_FUZZ_EXAMPLES", "200"))


async def test_every_command_has_a_row() -> None:
    async with open_core() as core:
        assert set(core.commands) == set(table())


def test_fuzz_through_the_core(tmp_path: os.PathLike[str]) -> None:
    with CoreThread() as core, workdir(os.fspath(tmp_path)) as ctx:
        stats = run_fuzz(CoreDriver(core), ctx, max_examples=SUITE_EXAMPLES)
    assert stats.requests == stats.answers
    assert stats.requests >= SUITE_EXAMPLES
    assert stats.session_deaths == 0


def test_fuzz_through_serve(tmp_path: os.PathLike[str]) -> None:
    driver = ServeDriver()
    try:
        with workdir(os.fspath(tmp_path)) as ctx:
            stats = run_fuzz(driver, ctx, max_examples=SUITE_EXAMPLES)
    finally:
        status = driver.close()
    assert status == 0
    assert driver.duplicates() == []
    assert stats.requests == stats.answers
    assert stats.session_deaths == 0
    assert serve_leftovers(driver.process.pid) == []
