"""A README-style embedding program: it must type-check under ``mypy --strict``.

Checked by ``test_readme_embedding.py`` (and by ``.ci/run``'s mypy step, which covers
``tests/typing``). Running it is not the point, but it runs: ``python -m
tests.typing.readme_embedding``.
"""

from __future__ import annotations

import sys

import trio

from protocol import CoreError
from supervisor import open_core
from supervisor.commands import JobFinished, ProcessResult


async def main() -> int:
    async with open_core() as core:
        ping = await core.core_ping()
        print(f"protocol {ping.protocol_version}, version {ping.version}")

        result: ProcessResult = await core.process_run(argv=[sys.executable, "-c", "print('hi')"])
        exit_code: int | None = result.exit_code
        print(result.stdout.strip(), exit_code, result.duration_ms)

        job = await core.job_start(kind="command", root="/", argv=["true"])
        jobs = await core.job_list()
        print(job.job_id, [entry.state for entry in jobs])
        while True:
            drained = await core.job_wait_events(timeout_milliseconds=5_000)
            finished = [e for e in drained.events if isinstance(e, JobFinished)]
            if finished:
                print(finished[0].status, finished[0].exit_code)
                break

        try:
            await core.process_run(argv=[""])
        except CoreError as error:
            field = error.details.get("field") if error.details else None
            print(error.code, field)

        # The untyped call keeps working.
        data = await core.call("core.ping", {})
        print(data)
    return 0


if __name__ == "__main__":
    raise SystemExit(trio.run(main))
