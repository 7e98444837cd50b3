"""Serve's memory under its full in-flight budget (issue 25; README "Memory bounds").

One ``supervisor serve`` is sent 16 ``process.run`` requests of 12 MiB of stdin each at once,
each holding its payload for 20 s: the 96 MiB in-flight budget holds 7 or 8 of them and the
rest are refused ``busy``. The figure is serve's peak resident size (``VmHWM``), against its
documented total with every budget full (528 MiB). Goal: at most 1.0x. Measured in a fresh
process by ``benchmarks.bounds_memory`` (``python -m benchmarks.bench_bounds``); its
``serve-full`` case fills every budget at once and is run by hand (README).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from benchmarks._common import row

__all__ = ("measure",)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: README "Memory bounds": serve's peak with every budget full.
DOCUMENTED_TOTAL_MIB = 528.0


def _mib(text: object) -> float:
    return float(str(text).split()[0])


def measure(*, rounds: int = 1) -> list[dict[str, object]]:
    """One run of the in-flight case (``rounds`` is ignored: a minute of wall time).

    Returns:
        One row in the ``benchmarks._common.row`` format.
    """
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.bounds_memory", "--one", "inflight"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    figures = json.loads(out.strip().splitlines()[-1])
    peak = _mib(figures["servePeak"])
    ratio = peak / DOCUMENTED_TOTAL_MIB
    return [
        row(
            "serve peak RSS with the 96 MiB in-flight budget full (MiB)",
            ours=peak,
            peer=DOCUMENTED_TOTAL_MIB,
            unit="MiB",
            peer_name="documented total (every budget full)",
            ratio=ratio,
            goal="<= 1.0x",
            met=ratio <= 1.0,
            note=(
                f"16 requests of 12 MiB: {figures['refusedBusy']} refused busy;"
                f" idle {figures['serveIdle']}"
            ),
        )
    ]


if __name__ == "__main__":
    for result in measure():
        print(json.dumps(result))
