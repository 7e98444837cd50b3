"""Job lanes: one job at a time per lane (a project root, or a named lane), as a pure
policy plus a thin Trio driver.

The lane policy (:class:`LanePolicy`) decides; the driver (:class:`Lanes`) runs each job through
the :class:`JobRunner` it is given, so this package never imports ``supervisor``.
"""

from __future__ import annotations

import logging

#: The distribution this package belongs to (``_trio_process_supervisor`` checks it).
__distribution__ = "trio-process-supervisor"

from _trio_process_supervisor import _guard

# Before importing it: another distribution's ``protocol`` (or a ``protocol.py`` in the
# working directory) would fail below on a name it lacks, far from the cause.
_guard.check("protocol")

from ._driver import (
    Job as Job,
    JobRunner as JobRunner,
    Lanes as Lanes,
    LanesStatistics as LanesStatistics,
    open_lanes as open_lanes,
)
from ._policy import (
    CancelRunning as CancelRunning,
    FinishQueued as FinishQueued,
    JobKind as JobKind,
    JobState as JobState,
    JobStatus as JobStatus,
    LaneAction as LaneAction,
    LanePolicy as LanePolicy,
    StartJob as StartJob,
    normalize_root as normalize_root,
)
from ._request import (
    MAX_LANE_NAME_CHARS as MAX_LANE_NAME_CHARS,
    JobRequest as JobRequest,
    parse_job_start as parse_job_start,
)

# A library logs, it does not print (see supervisor/__init__.py).
logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = (
    "MAX_LANE_NAME_CHARS",
    "CancelRunning",
    "FinishQueued",
    "Job",
    "JobKind",
    "JobRequest",
    "JobRunner",
    "JobState",
    "JobStatus",
    "LaneAction",
    "LanePolicy",
    "Lanes",
    "LanesStatistics",
    "StartJob",
    "normalize_root",
    "open_lanes",
    "parse_job_start",
)
