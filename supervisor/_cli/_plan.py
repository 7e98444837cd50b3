"""``supervisor run FILE --list`` and ``--dry-run``: what a lanes file would do, run nothing.

Contract: both read and validate the file as a run does (a bad file is refused the same way,
exit 2) and start nothing. ``--list`` prints each job with its lane, kind, needs and the
statuses it is expected to end with; ``--dry-run`` prints the plan: the lanes and the bound
on jobs at once, then each job resolved as it would be submitted (placeholders replaced but
``{tmpdir}``, which a run creates; the working directory; the names its environment adds,
never their values, which may be secrets from an ``env_file``; its deadline and delays; its
``node`` pin, which only ``--ray`` uses), with
a note for a program that is not found now (a job may build it first, so it is not an
error). With ``json_output`` both print one JSON object on stdout instead.
"""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING, Any, TextIO

from ._runfile import JOB_STATUSES, argv_hint
from ._screen import visible

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ._runfile import RunFile, RunFileJob

__all__ = ("describe_plan", "list_jobs")


def _expected(job: RunFileJob) -> list[str]:
    return [s for s in JOB_STATUSES if s in job.expect]


def _job_entry(job: RunFileJob, lane: str) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": job.name,
        "lane": lane,
        "kind": job.kind,
        "project": job.project,
        "needs": list(job.needs),
        "expected": _expected(job),
        "line": job.line,
    }
    if job.expect_timed_out is not None:
        entry["expectTimedOut"] = job.expect_timed_out
    return entry


def list_jobs(
    run_file: RunFile, lane_of: Callable[[RunFileJob], str], *, json_output: bool, out: TextIO
) -> None:
    """Print every job of ``run_file``: name, lane, kind, needs and expected statuses.

    Args:
        run_file: The validated (and selected) file.
        lane_of: How a job's lane is shown.
        json_output: One JSON object ``{file, jobs: [{name, lane, kind, project, needs,
            expected, line, expectTimedOut?}]}`` instead of a table.
        out: Where to print.
    """
    entries = [_job_entry(job, lane_of(job)) for job in run_file.jobs]
    if json_output:
        print(json.dumps({"file": run_file.path, "jobs": entries}, ensure_ascii=False), file=out)
        return
    rows: list[tuple[str, ...]] = [("JOB", "LANE", "KIND", "NEEDS", "EXPECT", "LINE")]
    for job, entry in zip(run_file.jobs, entries, strict=True):
        rows.append(
            (
                visible(job.name),
                visible(entry["lane"]),
                job.kind,
                ", ".join(visible(n) for n in job.needs) or "-",
                job.describe_expectation(),
                str(job.line),
            )
        )
    _print_table(rows, out)


def _print_table(rows: list[tuple[str, ...]], out: TextIO) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
        print("  ".join(cells).rstrip(), file=out)


def describe_plan(
    run_file: RunFile,
    payloads: Mapping[str, Mapping[str, Any]],
    lane_of: Callable[[RunFileJob], str],
    *,
    max_running: int | None,
    launch_problem: Callable[[RunFileJob], str | None],
    json_output: bool,
    out: TextIO,
) -> None:
    """Print the plan of a run: its lanes, then each job as it would be submitted.

    Args:
        run_file: The validated (and selected) file.
        payloads: Each job's ``job.start`` payload by name, placeholders replaced.
        lane_of: How a job's lane is shown.
        max_running: ``-j``: the most jobs at once, or None (one per lane).
        launch_problem: Why a job could not start now (its program or directory missing),
            or None.
        json_output: One JSON object ``{file, maxRunning, lanes: {lane: [job names]},
            jobs: [{..., argv, cwd, envNames, timeoutMs, startAfterMs, cancelAfterMs,
            node?, notNow?}]}`` instead of text.
        out: Where to print.
    """
    lanes: dict[str, list[str]] = {}
    for job in run_file.jobs:
        lanes.setdefault(lane_of(job), []).append(job.name)
    jobs: list[dict[str, Any]] = []
    for job in run_file.jobs:
        payload = payloads[job.name]
        env = payload.get("env")
        entry = _job_entry(job, lane_of(job))
        entry.update(
            argv=list(payload["argv"]),
            cwd=payload["cwd"],
            envNames=sorted(env) if isinstance(env, dict) else [],
            timeoutMs=job.timeout_ms,
            startAfterMs=job.start_after_ms,
            cancelAfterMs=job.cancel_after_ms,
        )
        if job.node is not None:
            entry["node"] = job.node
        problem = launch_problem(job)
        if problem is not None:
            entry["notNow"] = problem + argv_hint(job.argv)
        jobs.append(entry)
    if json_output:
        plan = {"file": run_file.path, "maxRunning": max_running, "lanes": lanes, "jobs": jobs}
        print(json.dumps(plan, ensure_ascii=False), file=out)
        return
    bound = "one job per lane" if max_running is None else f"at most {max_running} at once"
    print(
        f"{visible(run_file.path)}: {len(jobs)} job{'s' if len(jobs) != 1 else ''} on"
        f" {len(lanes)} lane{'s' if len(lanes) != 1 else ''} ({bound}); nothing is run",
        file=out,
    )
    for lane, names in lanes.items():
        print(f"  lane {visible(lane)}: {', '.join(visible(n) for n in names)}", file=out)
    for entry in jobs:
        print(f"{visible(entry['name'])} ({entry['kind']}, line {entry['line']}):", file=out)
        print(f"  argv: {visible(shlex.join(entry['argv']))}", file=out)
        print(f"  cwd:  {visible(entry['cwd'])}", file=out)
        details = []
        if entry["envNames"]:
            details.append("env sets " + ", ".join(visible(n) for n in entry["envNames"]))
        if entry["needs"]:
            details.append("after " + ", ".join(visible(n) for n in entry["needs"]) + " end ok")
        if entry["timeoutMs"] is not None:
            details.append(f"deadline {entry['timeoutMs']} ms")
        if entry["startAfterMs"]:
            details.append(f"submitted at {entry['startAfterMs']} ms")
        if entry["cancelAfterMs"] is not None:
            details.append(f"cancelled {entry['cancelAfterMs']} ms after submission")
        if "node" in entry:
            details.append(f"node {visible(entry['node'])} (with --ray)")
        details.append(f"expected {run_file.jobs[jobs.index(entry)].describe_expectation()}")
        print(f"  {'; '.join(details)}", file=out)
        if "notNow" in entry:
            print(f"  note: it could not start now: {visible(entry['notNow'])}", file=out)
