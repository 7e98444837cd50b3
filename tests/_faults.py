"""Arming fault plans for one block of a test."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from supervisor._boundary import arm_faults

if TYPE_CHECKING:
    from collections.abc import Iterator

    from supervisor._boundary import FaultPlan


@contextlib.contextmanager
def armed(plan: FaultPlan) -> Iterator[FaultPlan]:
    """Arm ``plan`` inside the block; the plan armed before is armed again on the way out."""
    previous = arm_faults(plan)
    try:
        yield plan
    finally:
        arm_faults(previous)
