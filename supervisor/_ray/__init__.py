"""Job lanes on a Ray cluster (the ``[ray]`` extra): ``supervisor run FILE --ray ADDRESS``.

Ray places each lane on a node and carries the calls; a node agent (a Ray actor running the
lanes a local run has, :mod:`._agent`) starts and ends the trees there. Ray is imported only
when these lanes are opened: the base install never imports it.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Mapping

    from protocol import JSONObject

    from ._executor import RayLanes

__all__ = ("open_ray_lanes",)


@asynccontextmanager
async def open_ray_lanes(
    address: str = "auto",
    *,
    on_event: Callable[[str, JSONObject], None],
    trusted: bool = True,
    pins: Mapping[str, str] | None = None,
) -> AsyncIterator[RayLanes]:
    """Job lanes whose jobs run on the nodes of a Ray cluster (README "Job lanes on a Ray
    cluster"); the Python form of ``supervisor run --ray``.

    The lanes behave as :func:`lanes.open_lanes` with a
    :class:`~supervisor.ProcessJobRunner`: ``start_job(JobRequest) -> job id``,
    ``cancel_job(job_id) -> bool``, ``await wait_idle()``, and ``on_event(method, params)``
    with ``job.started`` / ``job.output`` / ``job.finished`` (and ``job.progress`` /
    ``job.record`` of a job with ``report``), in order, each job's
    ``job.finished`` exactly once. A lane is placed on a node at its first job and stays
    there (``node_of(root)`` names it); the job's root, cwd and argv must exist on that node.
    The lanes placed on the node this process is a driver on (when it joined a running
    cluster, not through ``ray://``) run in this process, on a thread of their own, with no
    Ray worker started for them.

    Args:
        address: ``"auto"`` (the running cluster, else a local one started for the block)
            or a Ray address (``host:port``, ``ray://...``). If this process is already
            connected to Ray, that connection is used and left open.
        on_event: Called synchronously, in order, in this Trio task's thread.
        trusted: False declares the workspace untrusted (``build`` and ``test`` end
            ``denied``).
        pins: Project root -> ``"key=value"`` (a node with that Ray node label) or
            ``"name"`` (a node with that custom resource); other lanes spread over the
            nodes (the node with the fewest lanes).

    Raises:
        ImportError: Ray is not installed (``pip install 'trio-process-supervisor[ray]'``).
        supervisor._ray._executor.ClusterError: Ray could not connect (its subclass
            ``ClusterAuthenticationError``: the cluster requires Ray's token authentication
            and refused this process's token); or, from ``start_job``, no node satisfies a
            new lane's pin.

    Joining the cluster blocks this thread (Ray's own start-up, seconds for a new local
    cluster). **Cancellation:** leaving the block, also by cancellation, cancels every job
    on its node and waits (shielded, bounded) for its ``job.finished``, then stops the
    node agents; a job whose node does not answer ends ``failed``.
    """
    import ray

    from ._executor import connect_cluster, open_ray_executor

    connected_before = ray.is_initialized()
    if connected_before:
        from ._executor import RayCluster, _driver_node_id, _live_nodes

        cluster = RayCluster(
            address=address, nodes=_live_nodes(), local_node_id=_driver_node_id(address)
        )
    else:
        cluster = connect_cluster(address, [])
    try:
        async with (
            open_ray_executor(cluster, pins=pins) as executor,
            executor.open_lanes(on_event=on_event, trusted=trusted) as lanes,
        ):
            yield lanes
    finally:
        if not connected_before:
            cluster.disconnect()
