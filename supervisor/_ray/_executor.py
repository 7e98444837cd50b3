"""The runner's side of job lanes on a Ray cluster: placement, links to node agents, lanes.

Contract (README "Job lanes on a Ray cluster"): :func:`connect_cluster` joins (or, for
``auto`` without a running cluster, starts) a Ray cluster and places every lane on a node;
:func:`open_ray_executor` starts one :class:`~supervisor._ray._agent.NodeAgent` per node
used (while the first jobs are submitted: a job waits only for its own node's agent) and
gives ``supervisor run`` lanes with the local lanes' interface (``start_job``,
``cancel_job``, ``wait_idle``) whose jobs run on their lane's node.

Failure semantics:

- Cancelling a job or the run sends ``cancel`` / ``close`` to the node, whose lanes end the
  tree there with the local bounds (TERM grace, then SIGKILL); closing waits at most
  :data:`CLOSE_BOUND_S` for the last ``job.finished``.
- An agent that dies (its process killed, its node lost) or answers nothing for
  :data:`LOST_AFTER_S` is taken for lost: each of its unfinished jobs ends ``failed``
  (``errorCode: "internal"``, ``error`` naming the node), later jobs of its lanes fail at
  once, and it is killed, so the watchdog of its process ends its trees on the node. The
  run goes on with the other nodes: no wait is unbounded.
- The agents belong to the runner's Ray job (not detached): when the runner dies, Ray ends
  them, and each node's watchdog ends their trees.

Only this module and the agent import Ray, and only when ``--ray`` is given.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
import threading
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import ray
import ray.exceptions
import trio
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from lanes import normalize_root
from lanes._driver import DEFAULT_MAX_OUTPUT_BYTES

from ._agent import NodeAgent

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence

    from lanes import JobRequest
    from protocol import JSONObject

    from ._agent import Command, Event

__all__ = (
    "CLOSE_BOUND_S",
    "LOST_AFTER_S",
    "RAY_AUTO",
    "ClusterAuthenticationError",
    "ClusterError",
    "ClusterPinError",
    "RayCluster",
    "RayExecutor",
    "RayLanes",
    "connect_cluster",
    "open_ray_executor",
)

logger = logging.getLogger("supervisor.ray")

#: ``--ray auto``: the cluster ``RAY_ADDRESS`` or ``ray start`` names, else a local one.
RAY_AUTO: Final = "auto"
#: How long one pull waits on an agent for an event, in seconds.
PULL_WAIT_S: Final = 1.0
#: An agent that answers nothing for this long (beyond a pull's own wait) is lost, seconds.
LOST_AFTER_S: Final = 20.0
#: The longest closing the lanes waits for their last ``job.finished``, in seconds: the
#: node's TERM grace and kill wait (about 5 s together) plus round trips, with room.
CLOSE_BOUND_S: Final = 15.0
#: How long reaching a cluster's address may take before it is refused, in seconds.
CONNECT_BOUND_S: Final = 5.0
#: A pin no node satisfies: the nodes whose labels (or resources) the refusal shows, and
#: how many of each node's.
NODES_SHOWN: Final = 8
PER_NODE_SHOWN: Final = 6
#: Resources Ray gives every node (not a pin's custom resource).
_RAY_RESOURCES: Final = frozenset({"CPU", "GPU", "TPU", "memory", "object_store_memory"})


def _ray_resource(name: str) -> bool:
    return name in _RAY_RESOURCES or name.startswith(("node:", "accelerator_type:"))


#: How long an agent may take to start (a Python worker on its node), in seconds.
START_BOUND_S: Final = 60.0


class ClusterError(Exception):
    """The cluster can not run this file: no connection, or no node for a pinned lane."""


class ClusterPinError(ClusterError):
    """No live node satisfies a lane's pin (the message names the pin, the lane and what
    the nodes have).

    Attributes:
        root: The lane's project root, normalized.
        pin: The pin no node satisfies.
    """

    def __init__(self, message: str, *, root: str, pin: str) -> None:
        super().__init__(message)
        self.root = root
        self.pin = pin


class ClusterAuthenticationError(ClusterError):
    """The cluster requires Ray's token authentication and refused this process's token
    (none, or not the cluster's)."""


@dataclass(frozen=True, slots=True)
class _Node:
    node_id: str
    name: str
    labels: Mapping[str, str]
    resources: Mapping[str, float]

    def matches(self, pin: str | None) -> bool:
        if pin is None:
            return True
        key, equals, value = pin.partition("=")
        if equals:
            return self.labels.get(key.strip()) == value.strip()
        return self.resources.get(pin, 0) > 0


@dataclass(slots=True)
class RayCluster:
    """A connected cluster and where each lane runs (made by :func:`connect_cluster`).

    Attributes:
        address: What ``--ray`` named.
        nodes: The live nodes when the run joined (the head first).
        placement: Lane root -> the node it runs on.
        local_node_id: The runner's own node, whose lanes run in the runner (see below).
    """

    address: str
    nodes: list[_Node] = field(default_factory=list)
    placement: dict[str, _Node] = field(default_factory=dict)
    #: The node this process is a driver on, when it joined a running cluster as one of its
    #: nodes (not through Ray Client, not a cluster it started): that node's lanes run in
    #: this process (:class:`_LocalAgent`), with no Ray worker to start. None: every lane's
    #: node gets an agent actor.
    local_node_id: str | None = None

    def place(self, root: str, pin: str | None) -> _Node:
        """The node of ``root``'s lane: where it already is, else the node with the fewest
        lanes among those that satisfy ``pin`` (first such node on a tie).

        Raises:
            ClusterError: No node satisfies ``pin``.
        """
        root = normalize_root(root)
        node = self.placement.get(root)
        if node is not None:
            return node
        candidates = [n for n in self.nodes if n.matches(pin)]
        if not candidates:
            assert pin is not None  # every node matches no pin
            what = f"the label {pin}" if "=" in pin else f"the resource {pin!r}"
            raise ClusterPinError(
                f"no live node of the cluster has {what} (lane {root});"
                f" {self._what_nodes_have(pin)}",
                root=root,
                pin=pin,
            )
        load = {n.node_id: 0 for n in candidates}
        for placed in self.placement.values():
            if placed.node_id in load:
                load[placed.node_id] += 1
        node = self.placement[root] = min(candidates, key=lambda n: load[n.node_id])
        return node

    def _what_nodes_have(self, pin: str) -> str:
        """The live nodes' labels (for a ``key=value`` pin) or custom resources (for a
        resource pin), at most :data:`NODES_SHOWN` nodes and :data:`PER_NODE_SHOWN` each:
        what the pin could have said. Ray's own labels (``ray.io/``) only under the key
        the pin names."""
        key, equals, _ = pin.partition("=")
        if equals:
            kind = "labels"
            listed = [
                [
                    f"{k}={v}"
                    for k, v in sorted(n.labels.items())
                    if not k.startswith("ray.io/") or k == key.strip()
                ]
                for n in self.nodes
            ]
        else:
            kind = "custom resources"
            listed = [[r for r in sorted(n.resources) if not _ray_resource(r)] for n in self.nodes]
        shown = [
            f"{node.name} {', '.join(have[:PER_NODE_SHOWN]) or 'none'}"
            + (f" (+{len(have) - PER_NODE_SHOWN})" if len(have) > PER_NODE_SHOWN else "")
            for node, have in zip(self.nodes[:NODES_SHOWN], listed, strict=False)
        ]
        more = len(self.nodes) - NODES_SHOWN
        return f"the nodes' {kind}: " + "; ".join(shown) + (f"; {more} more" if more > 0 else "")

    def node_name(self, root: str) -> str | None:
        node = self.placement.get(normalize_root(root))
        return None if node is None else node.name

    @property
    def may_leave_by_exit(self) -> bool:
        """Whether this process may leave the cluster by ending, without :meth:`disconnect`.

        True when it joined a running cluster as a driver on one of its nodes
        (:attr:`local_node_id`): :meth:`leave_before_exit` tells its node it leaves, which
        ends its Ray job as ``ray.shutdown`` does, and the process ends. False through Ray
        Client (its server holds a vanished client's session for a reconnect grace) and for
        a cluster this process started, which only ``ray.shutdown`` stops.
        """
        return self.local_node_id is not None

    def disconnect(self) -> None:
        """Leave the cluster; one this run started (``auto`` without a cluster) stops."""
        ray.shutdown()

    def leave_before_exit(self) -> bool:
        """Tell the cluster this driver leaves, as ``ray.shutdown`` does first, without its
        teardown: for a process that ends right after (:attr:`may_leave_by_exit`).

        The raylet then records a graceful driver exit (``graceful=true``, the exit type of
        ``ray.shutdown``; 3-6 ms), where a driver that merely ends is recorded as one that
        died unexpectedly (Ray's worker list shows it as a ``SYSTEM_ERROR`` crash). This is
        Ray's core worker call ``shutdown_driver``, which ``ray.shutdown`` makes before it
        destroys the core worker.

        Returns:
            True: told; the process must now end without ``ray.shutdown``. False: this Ray
            has no such call, or it failed, so the cluster was left with ``ray.shutdown``
            instead.
        """
        try:
            ray._private.worker.global_worker.core_worker.shutdown_driver()
        except Exception:  # a Ray without it, or one whose call failed: the public way
            logger.debug("leaving with ray.shutdown", exc_info=True)
            ray.shutdown()
            return False
        return True


def connect_cluster(address: str, lanes: Sequence[tuple[str, str | None]]) -> RayCluster:
    """Join the Ray cluster at ``address`` and place each lane on one of its live nodes.

    Blocking (Ray's own start-up); call it before ``trio.run``.

    Args:
        address: ``auto`` (the running cluster, else a new local one) or a Ray address
            (``host:port``, ``ray://...``).
        lanes: ``(root, pin)`` per lane in order of first use; ``pin`` is ``None`` (spread:
            the node with the fewest lanes so far), ``"key=value"`` (a node with that Ray
            node label) or ``"name"`` (a node with that custom resource).

    Raises:
        ClusterError: Ray could not connect, or no live node satisfies a lane's pin (the
            message names the lane and the pin). Nothing was started on the cluster.
        ClusterAuthenticationError: The cluster requires Ray's token authentication and
            refused this process's token, or that it sent none (the message says what to
            set).
    """
    reached = os.environ.get("RAY_ADDRESS", "") if address == RAY_AUTO else address
    _check_reachable(reached)
    if address != RAY_AUTO:
        # With ``auto`` Ray may turn token authentication on itself (a token in
        # ~/.ray/auth_token): only its join tells, below.
        _check_authenticated(reached)
    try:
        with _driver_config():
            ray.init(
                address=None if address == RAY_AUTO else address,
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.WARNING,
                configure_logging=False,
            )
    except Exception as exc:
        if isinstance(exc, ConnectionError):
            _check_authenticated(reached)
        raise ClusterError(f"cannot join the Ray cluster: {type(exc).__name__}: {exc}") from None
    cluster = RayCluster(address=address, local_node_id=_driver_node_id(address))
    try:
        cluster.nodes = _live_nodes()
        for root, pin in lanes:
            cluster.place(root, pin)
    except BaseException:
        ray.shutdown()
        raise
    return cluster


#: Ray settings of this driver process (read from the environment when ``ray.init`` starts
#: its core worker), unless the user set them. ``task_events_report_interval_ms=0``: the
#: driver reports no task events to the cluster (they feed the dashboard's and the state
#: API's task lists, which a run does not use); with them on, ``ray.shutdown`` flushes them
#: and took 0.28 s of every run's end (0.03 s without). The nodes' workers keep theirs.
_DRIVER_CONFIG: Final = {"RAY_task_events_report_interval_ms": "0"}


@contextlib.contextmanager
def _driver_config() -> Iterator[None]:
    """Set :data:`_DRIVER_CONFIG` for ``ray.init``, then put the environment back.

    Put back so that nothing this process starts later inherits them (a cluster that
    ``auto`` starts here inherits them: its own task events are then off too).
    """
    added = [name for name in _DRIVER_CONFIG if name not in os.environ]
    for name in added:
        os.environ[name] = _DRIVER_CONFIG[name]
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


def _driver_node_id(address: str) -> str | None:
    """The id of the node this driver joined as, when its lanes may run in this process.

    None through Ray Client (``ray://``: the driver is not on a node) and for a cluster this
    process started (``auto`` without one): Ray's own processes are then this process's
    children, which its tree ends must not have to tell apart from a job's orphans.
    """
    if address.startswith("ray://"):
        return None
    try:
        node = ray._private.worker._global_node
        if node is None or node.head:
            return None
        return str(ray.get_runtime_context().get_node_id())
    except Exception:  # a Ray without these internals: every node gets an actor
        logger.debug("the driver's node", exc_info=True)
        return None


def _check_reachable(address: str) -> None:
    """Refuse a ``host:port`` nothing answers at, or that stays silent when spoken to, within
    :data:`CONNECT_BOUND_S`.

    Ray itself retries an unreachable cluster for minutes; a mistyped address should fail
    at once. A port that accepts the connection and never answers (some other program's
    listener) would hang Ray's join as well, beyond Ctrl-C: Ray's services speak gRPC, whose
    server answers the HTTP/2 connection preface with its settings at once, so a peer that
    says nothing to it within the bound is refused. Any answer, or a close (a TLS server
    given plain text), passes: the rest is Ray's to judge. Anything that is not
    ``[ray://]host:port`` is left to Ray.

    Raises:
        ClusterError: The connection was refused or timed out, or the peer said nothing.
    """
    host, colon, port = address.removeprefix("ray://").rpartition(":")
    if not colon or not host or not port.isdigit():
        return
    try:
        conn = socket.create_connection((host, int(port)), timeout=CONNECT_BOUND_S)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ClusterError(f"nothing answers at {address} ({reason})") from None
    with conn:
        try:
            conn.sendall(_HTTP2_PREFACE)
            conn.recv(1)
        except TimeoutError:
            raise ClusterError(
                f"{address} accepts connections but does not answer as a Ray cluster"
                f" (no reply within {CONNECT_BOUND_S:g} s): is it Ray's address?"
            ) from None
        except OSError:
            return  # it answered by closing (a TLS server given plain text): Ray judges


def _check_authenticated(address: str) -> None:
    """Refuse a cluster that requires Ray's token authentication when it refuses this
    process's token, within :data:`CONNECT_BOUND_S`.

    Ray's join retries a refused token for 20 s, printing a warning a second, then says
    only "Failed to connect"; a GCS client of its own raises ``AuthenticationError`` at the
    first refusal (milliseconds). Any other outcome (joined, another error, no answer in
    the bound) passes: Ray's join judges. Only ``host:port`` (the GCS) is checked: Ray
    Client (``ray://``) says so itself.

    Raises:
        ClusterAuthenticationError: The cluster refused the token, or that none was sent.
    """
    host, colon, port = address.rpartition(":")
    if address.startswith("ray://") or not colon or not host or not port.isdigit():
        return
    # Ray's own client (it sends the token as the join would); a Ray without it: the join
    # judges.
    gcs_client: Any = getattr(ray._raylet, "GcsClient", None)
    if gcs_client is None:
        return
    refused: list[BaseException] = []

    def probe() -> None:
        try:
            gcs_client(address=address)
        except ray.exceptions.AuthenticationError as exc:
            refused.append(exc)
        except Exception:
            logger.debug("probing %s", address, exc_info=True)

    # On a thread: the client has no timeout of its own (a GCS that never answers keeps it
    # 30 s); past the bound it is left to end by itself and Ray's join goes on.
    thread = threading.Thread(target=probe, name="supervisor-ray-auth-probe", daemon=True)
    thread.start()
    thread.join(CONNECT_BOUND_S)
    if refused:
        sent = os.environ.get("RAY_AUTH_MODE", "").lower() == "token"
        raise ClusterAuthenticationError(
            f"the cluster at {address} requires Ray's token authentication and refused"
            + (" this process's token" if sent else " this process, which sent no token")
            + ": set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN to the cluster's token (or"
            " RAY_AUTH_TOKEN_PATH to a file holding it)"
        ) from None


#: What an HTTP/2 (gRPC) client sends first; the server answers with a SETTINGS frame.
_HTTP2_PREFACE: Final = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000")


def _live_nodes() -> list[_Node]:
    nodes: list[_Node] = []
    for info in ray.nodes():
        if not info.get("Alive"):
            continue
        node_id = str(info["NodeID"])
        host = str(info.get("NodeManagerHostname") or socket.gethostname())
        labels = {str(k): str(v) for k, v in (info.get("Labels") or {}).items()}
        resources = {str(k): float(v) for k, v in (info.get("Resources") or {}).items()}
        nodes.append(_Node(node_id, f"{host}/{node_id[:8]}", labels, resources))
    # The head first, then a stable order: spreading starts on the same node every run.
    nodes.sort(key=lambda n: ("node:__internal_head__" not in n.resources, n.node_id))
    return nodes


async def _ray_get(ref: Any, bound_s: float) -> Any:
    """``ray.get`` on a worker thread (Ray blocks), at most ``bound_s`` seconds (then Ray's
    ``GetTimeoutError``); cancelling abandons the wait. A call to the in-process agent
    (:class:`_LocalCall`) runs on a worker thread with the same bound (then ``TimeoutError``).
    """
    if isinstance(ref, _LocalCall):
        with trio.move_on_after(bound_s):
            return await trio.to_thread.run_sync(ref.call, abandon_on_cancel=True)
        raise TimeoutError(f"no answer for {bound_s:g} s")
    return await trio.to_thread.run_sync(
        functools.partial(ray.get, ref, timeout=bound_s), abandon_on_cancel=True
    )


@dataclass(frozen=True, slots=True)
class _LocalCall:
    """A call to the in-process agent, made when awaited (:func:`_ray_get`)."""

    call: Callable[[], Any]


class _LocalMethod:
    def __init__(self, agent: _LocalAgent, name: str) -> None:
        self._agent = agent
        self._name = name

    def remote(self, *args: Any) -> _LocalCall:
        return _LocalCall(functools.partial(self._agent.call, self._name, *args))


class _LocalAgent:
    """The agent of the runner's own node, in the runner's process: a :class:`NodeAgent`
    (its own Trio thread, the lanes a local run has) behind the calls a Ray actor handle
    takes (``handle.method.remote(...)``, awaited by :func:`_ray_get`).

    A lane placed on the node the runner joined as needs no Ray worker started for it (a
    new Python and ``import ray`` per run, most of a small run's fixed cost): its jobs start
    at once, as locally. Its trees are the runner's: the runner's watchdog ends them if the
    runner dies, as a node agent's watchdog ends its node's. The agent is built by the first
    call (``describe``), on a worker thread, as its start blocks.
    """

    def __init__(self, name: str, max_output_bytes: int) -> None:
        self._name = name
        self._max_output_bytes = max_output_bytes
        self._agent: NodeAgent | None = None
        self._stopped = False

    def __getattr__(self, name: str) -> _LocalMethod:
        return _LocalMethod(self, name)

    def call(self, name: str, *args: Any) -> Any:
        if self._agent is None:
            if name == "shutdown" or self._stopped:
                return None
            self._agent = NodeAgent(self._name, self._max_output_bytes)
        return getattr(self._agent, name)(*args)

    def kill(self) -> None:
        """What ``ray.kill`` is to an actor: close its lanes (every tree ends), not waited for."""
        self._stopped = True
        agent = self._agent
        if agent is not None:
            threading.Thread(
                target=agent.shutdown, name="supervisor-local-agent-stop", daemon=True
            ).start()


def _short(exc: BaseException) -> str:
    if isinstance(exc, ray.exceptions.GetTimeoutError | TimeoutError):
        return f"no answer for {LOST_AFTER_S:g} s"
    return type(exc).__name__


@dataclass(slots=True)
class _RemoteJob:
    job_id: str
    request: JobRequest
    link: _AgentLink
    trusted: bool = True
    started_at: float | None = None
    cancel_sent: bool = False


def _request_fields(request: JobRequest) -> dict[str, Any]:
    """``request`` as plain data Ray can carry (its ``env`` is a read-only mapping proxy)."""
    return {
        "kind": request.kind.value,
        "root": request.root,
        "argv": list(request.argv),
        "cwd": request.cwd,
        "env": None if request.env is None else dict(request.env),
        "timeout_ms": request.timeout_ms,
        "supersede": request.supersede,
        "report": request.report,
        "lane": request.lane,
    }


class _AgentLink:
    """The runner's end of one node agent: an ordered command pump and an event pump."""

    def __init__(self, executor: RayExecutor, node: _Node) -> None:
        self.executor = executor
        self.node = node
        self.dead: str | None = None
        self.jobs: dict[str, _RemoteJob] = {}
        self._pending: list[Command] = []
        self._wake = trio.Event()
        self._acked = 0
        self.handle: Any
        if node.node_id == executor.cluster.local_node_id:
            self.handle = _LocalAgent(node.name, executor.max_output_bytes)
        else:
            self.handle = (
                _remote_agent()
                .options(
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False),
                )
                .remote(node.name, executor.max_output_bytes, own_process=True)
            )
        self.ready = trio.Event()
        #: Set when no pull is in flight any more (the event pump ended or never began).
        self.pulls_done = trio.Event()

    def send(self, command: Command) -> None:
        self._pending.append(command)
        self._wake.set()

    async def run(self) -> None:
        try:
            await _ray_get(self.handle.describe.remote(), START_BOUND_S)
        except Exception as exc:
            self.lost(exc)
            self.pulls_done.set()
            return
        finally:
            self.ready.set()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._pump_commands)
            nursery.start_soon(self._pump_events)

    async def _pump_commands(self) -> None:
        # One batch in flight at a time: Ray does not order calls to a threaded actor.
        while self.dead is None:
            await self._wake.wait()
            self._wake = trio.Event()
            batch, self._pending = self._pending, []
            try:
                await _ray_get(self.handle.commands.remote(batch), LOST_AFTER_S)
            except Exception as exc:
                self.lost(exc)

    async def _pump_events(self) -> None:
        try:
            await self._pull_events()
        finally:
            self.pulls_done.set()

    async def _pull_events(self) -> None:
        while self.dead is None:
            try:
                events: list[Event] = await _ray_get(
                    self.handle.events.remote(self._acked, PULL_WAIT_S),
                    PULL_WAIT_S + LOST_AFTER_S,
                )
            except Exception as exc:
                self.lost(exc)
                return
            for seq, method, params in events:
                if seq <= self._acked:
                    continue  # a repeated pull: delivered already
                self._acked = seq
                self.executor.deliver(method, params)

    def lost(self, exc: BaseException) -> None:
        """Take the agent for lost: fail its jobs, kill it (its watchdog ends the trees)."""
        if self.dead is not None:
            return
        self.dead = (
            f"the node agent on node {self.node.name} was lost ({_short(exc)});"
            " the node's watchdog ends its processes there"
        )
        logger.warning("%s", self.dead)
        for job_id in list(self.jobs):
            self.executor.fail(job_id, self.dead)
        self._wake.set()
        self.kill()

    def kill(self) -> None:
        """End the agent: ``ray.kill`` for an actor (its watchdog ends its trees), its lanes
        closed for the in-process one."""
        if isinstance(self.handle, _LocalAgent):
            self.handle.kill()
            return
        try:
            ray.kill(self.handle, no_restart=True)
        except Exception:
            logger.debug("ray.kill of the agent on %s", self.node.name, exc_info=True)


@functools.cache
def _remote_agent() -> Any:
    # Threaded: a pull waits while commands arrive. No CPU reserved: the lane's jobs are
    # the node's work, and an agent must fit on a node that is busy with them.
    return ray.remote(
        num_cpus=0,
        max_concurrency=8,
        max_restarts=0,
    )(NodeAgent)


class RayLanes:
    """Lanes whose jobs run on their lane's node.

    The interface ``supervisor run`` uses of :class:`lanes.Lanes`: ``start_job`` and
    ``cancel_job`` return at once (the command reaches the node in order, shortly after),
    events come through ``on_event`` in order, each job's ``job.finished`` exactly once.
    """

    def __init__(
        self,
        executor: RayExecutor,
        *,
        on_event: Callable[[str, JSONObject], None],
        trusted: bool = True,
    ) -> None:
        self._executor = executor
        #: Whether the next jobs are submitted to a trusted workspace (settable; False:
        #: ``build`` and ``test`` end ``denied``), as :attr:`lanes.Lanes.trusted`.
        self.trusted = trusted
        self._on_event = on_event
        #: What ``on_event`` raised, once it did: its error ends the run, and no later event
        #: can be taken, so closing waits for none.
        self._broken: BaseException | None = None
        self._jobs: dict[str, _RemoteJob] = {}
        self._next_number = 1
        self._idle = trio.Event()
        self._idle.set()

    def start_job(self, request: JobRequest) -> str:
        """Queue ``request`` on its lane's node; return its id (``job-N``).

        Raises:
            ClusterError: The lane is new and no node satisfies its pin (nothing started).
        """
        link = self._executor.link_for(request.root)
        job_id = f"job-{self._next_number}"
        self._next_number += 1
        job = _RemoteJob(job_id, request, link, trusted=self.trusted)
        self._jobs[job_id] = job
        link.jobs[job_id] = job
        if self._idle.is_set():
            self._idle = trio.Event()
        if link.dead is not None:
            self.fail(job_id, link.dead)
        else:
            link.send(("start", job.trusted, job_id, _request_fields(request)))
        return job_id

    def cancel_job(self, job_id: str) -> bool:
        """Ask the node to cancel ``job_id``; False when it finished or a cancel was sent."""
        job = self._jobs.get(job_id)
        if job is None or job.cancel_sent or job.link.dead is not None:
            return False
        job.cancel_sent = True
        job.link.send(("cancel", job_id))
        return True

    def node_of(self, root: str) -> str | None:
        """The name (``host/node-id``) of the node ``root``'s lane runs on, or None before
        its first job."""
        return self._executor.node_of(root)

    async def wait_idle(self) -> None:
        """Wait until every job has sent its ``job.finished``."""
        await trio.lowlevel.checkpoint()
        while self._jobs:
            await self._idle.wait()

    async def aclose(self) -> None:
        """Cancel every job on its node and wait (bounded) for each ``job.finished``.

        Shielded: it also runs while the run is being cancelled. A node that does not
        answer within :data:`CLOSE_BOUND_S` is taken for lost.
        """
        with trio.CancelScope(shield=True):
            links = {job.link for job in self._jobs.values() if job.link.dead is None}
            for link in links:
                link.send(("close",))
            if self._broken is not None:
                # The taker of events failed (its error is the run's): the agents end every
                # tree as they stop; waiting for events nobody can take was a 15 s hang.
                return
            with trio.move_on_after(CLOSE_BOUND_S):
                await self.wait_idle()
            for job in list(self._jobs.values()):
                job.link.lost(TimeoutError())

    def _emit(self, method: str, params: JSONObject) -> None:
        if self._broken is not None:
            return
        try:
            self._on_event(method, params)
        except BaseException as exc:
            self._broken = exc
            raise

    def deliver(self, method: str, params: JSONObject) -> None:
        job = self._jobs.get(str(params.get("jobId")))
        if job is None:
            return  # the job was already failed as lost: its one job.finished was sent
        if method == "job.started":
            job.started_at = trio.current_time()
        self._emit(method, params)
        if method == "job.finished":
            self._forget(job)

    def fail(self, job_id: str, reason: str) -> None:
        job = self._jobs.get(job_id)
        if job is None:
            return
        duration = 0
        if job.started_at is not None:
            duration = round((trio.current_time() - job.started_at) * 1000)
        self._emit(
            "job.finished",
            {
                "jobId": job_id,
                "kind": job.request.kind.value,
                "root": job.request.root,
                "status": "failed",
                "exitCode": None,
                "signal": None,
                "timedOut": False,
                "durationMs": duration,
                "errorCode": "internal",
                "error": reason,
            },
        )
        self._forget(job)

    def _forget(self, job: _RemoteJob) -> None:
        del self._jobs[job.job_id]
        job.link.jobs.pop(job.job_id, None)
        if not self._jobs:
            self._idle.set()


class RayExecutor:
    """Runs ``supervisor run``'s lanes on a cluster; made by :func:`open_ray_executor`."""

    def __init__(
        self,
        cluster: RayCluster,
        nursery: trio.Nursery,
        *,
        max_output_bytes: int,
        pins: Mapping[str, str] | None = None,
    ) -> None:
        self.cluster = cluster
        self.max_output_bytes = max_output_bytes
        self._pins = {normalize_root(root): pin for root, pin in (pins or {}).items()}
        self._nursery = nursery
        self._links: dict[str, _AgentLink] = {}
        self._lanes: RayLanes | None = None

    def node_of(self, root: str) -> str | None:
        """The name of the node ``root``'s lane runs on."""
        return self.cluster.node_name(root)

    def link_for(self, root: str) -> _AgentLink:
        """The link to the agent of ``root``'s node (placed now if it was not).

        Raises:
            ClusterError: No node satisfies the lane's pin.
        """
        node = self.cluster.place(root, self._pins.get(normalize_root(root)))
        link = self._links.get(node.node_id)
        if link is None:
            link = self._links[node.node_id] = _AgentLink(self, node)
            self._nursery.start_soon(link.run, name=f"ray agent {node.name}")
        return link

    def start_agents(self) -> None:
        """Begin starting the agent of every node a lane is placed on; return at once.

        Each agent starts while the run submits its first jobs: a job's commands wait only
        for its own node's agent (they queue in its link until the agent answers), so the
        nodes' start-ups overlap each other and the first jobs.
        """
        for root in self.cluster.placement:
            self.link_for(root)

    async def wait_agents(self) -> None:
        """Wait until every agent started so far answered (or was taken for lost)."""
        for link in list(self._links.values()):
            await link.ready.wait()

    @asynccontextmanager
    async def open_lanes(
        self, *, on_event: Callable[[str, JSONObject], None], trusted: bool = True
    ) -> AsyncIterator[RayLanes]:
        """The lanes (one set per executor); leaving the block cancels and waits, as locally.

        Raises:
            RuntimeError: The lanes were opened already.
        """
        if self._lanes is not None:
            raise RuntimeError("a Ray executor opens one set of lanes")
        lanes = self._lanes = RayLanes(self, on_event=on_event, trusted=trusted)
        try:
            yield lanes
        finally:
            await lanes.aclose()

    def deliver(self, method: str, params: JSONObject) -> None:
        if self._lanes is not None:
            self._lanes.deliver(method, params)

    def fail(self, job_id: str, reason: str) -> None:
        if self._lanes is not None:
            self._lanes.fail(job_id, reason)

    async def leftover_processes(self, settle_ms: int) -> list[tuple[int, str]]:
        """Processes the agents' lanes started that are still alive, swept on every node at
        once (the sweep costs one node's settle time, not one per node)."""
        found: dict[str, list[tuple[int, str]]] = {}

        async def sweep(link: _AgentLink) -> None:
            try:
                left = await _ray_get(
                    link.handle.leftovers.remote(settle_ms / 1000), LOST_AFTER_S + settle_ms / 1000
                )
            except Exception as exc:
                link.lost(exc)
                return
            name = link.node.name
            found[link.node.node_id] = [(pid, f"{cmd} [node {name}]") for pid, cmd in left]

        links = [link for link in self._links.values() if link.dead is None]
        async with trio.open_nursery() as nursery:
            for link in links:
                nursery.start_soon(sweep, link)
        # In the order of the links (the head first), whatever order the answers came in.
        return [item for link in links for item in found.get(link.node.node_id, [])]

    async def _shutdown(self) -> None:
        async with trio.open_nursery() as nursery:
            for link in self._links.values():
                nursery.start_soon(self._stop_agent, link)

    async def _stop_agent(self, link: _AgentLink) -> None:
        if link.dead is None:
            # Marked first: the pumps stop, and the calls the stop breaks are not a loss.
            link.dead = "stopped"
            try:
                await _ray_get(link.handle.shutdown.remote(), CLOSE_BOUND_S)
            except Exception:
                logger.debug("stopping the agent on %s", link.node.name, exc_info=True)
            # The stopped agent answers the pull in flight at once; killing it before that
            # answer arrived made ``ray.shutdown`` wait 0.25 s for the broken call.
            with trio.move_on_after(PULL_WAIT_S):
                await link.pulls_done.wait()
        if not isinstance(link.handle, _LocalAgent):  # stopped above: its lanes are closed
            link.kill()


@asynccontextmanager
async def open_ray_executor(
    cluster: RayCluster,
    *,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    pins: Mapping[str, str] | None = None,
) -> AsyncIterator[RayExecutor]:
    """Start the node agents of ``cluster``'s placement; stop them when the block ends.

    The block begins at once: the agents start alongside the first jobs, each job waiting
    only for its own node's agent (:meth:`RayExecutor.start_agents`).

    ``max_output_bytes`` is the lanes' output cap per job and stream on every node, in bytes.
    The block ends (also when cancelled) only after each agent closed its lanes, so every
    tree on every node has ended, or after the agent was killed (its watchdog ends them).
    """
    async with trio.open_nursery() as nursery:
        executor = RayExecutor(cluster, nursery, max_output_bytes=max_output_bytes, pins=pins)
        try:
            executor.start_agents()
            yield executor
        finally:
            with trio.CancelScope(shield=True):
                await executor._shutdown()
            nursery.cancel_scope.cancel()
