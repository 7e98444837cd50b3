"""``supervisor run --ray``: lanes on a real local Ray cluster of three nodes.

One cluster per module (starting one costs seconds on 2 cores): a head and two workers,
one with the node label ``zone=b``, one with the custom resource ``bigbox``. Each test runs
the real CLI as a subprocess (its own Ray driver) against it. Skipped when Ray is not
installed (the ``[ray]`` extra).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest

from tests._procfs import runs_no_more, stat_fields

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from protocol import JSONObject

pytestmark = pytest.mark.linux

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, os.pardir))
DEMO = os.path.join(REPO, "examples", "demo.toml")
#: Generous bounds for a loaded 2-core machine: they only keep a broken run from hanging.
RUN_BOUND_S = 180.0
GONE_BOUND_S = 20.0
#: Prints its pid, then sleeps: a job whose process the tests can find on its node.
SLEEPER = "import os, time; print('pid', os.getpid(), flush=True); time.sleep(120)"


def _ray_processes() -> dict[int, str]:
    """Live processes of Ray's on this machine (its daemons and workers), by command."""
    found: dict[int, str] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if not runs_no_more(int(name)) and (
            "ray/core/src" in cmdline
            or "ray/_private" in cmdline
            or "ray/dashboard" in cmdline
            or "default_worker.py" in cmdline
            or cmdline.startswith("ray::")
        ):
            found[int(name)] = cmdline
    return found


def _reap_children() -> None:
    # Ray's daemons are children of this process: collect the ones that have exited.
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A three-node local cluster; afterwards every Ray process must be gone."""
    before = set(_ray_processes())
    head_args = {"num_cpus": 1, "include_dashboard": False}
    c = cluster_utils.Cluster(initialize_head=True, head_node_args=head_args)
    try:
        c.zone_b = c.add_node(num_cpus=1, labels={"zone": "b"})
        c.bigbox = c.add_node(num_cpus=1, resources={"bigbox": 1})
        c.wait_for_nodes()
        _warm(c.address)
        yield c
    finally:
        with contextlib.suppress(Exception):
            ray.shutdown()
        c.shutdown()
        deadline = time.monotonic() + GONE_BOUND_S
        while True:
            _reap_children()
            left = {p: cmd for p, cmd in _ray_processes().items() if p not in before}
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert not left, f"Ray processes outlived the cluster: {left}"


def _warm(address: str) -> None:
    """Connect a first driver, as a cluster in use has had, and wait for the worker Ray starts
    for it (``prestart_worker_first_driver``): Ray keeps that worker in its pool, idle, for
    as long as the cluster runs. It is the cluster's, not a test's; a runner whose lanes all
    run in agents used to take it for the head's agent, one whose head lane runs in its own
    process leaves it idle."""
    subprocess.run(
        [sys.executable, "-c", f"import ray; ray.init(address={address!r}, log_to_driver=False)"],
        check=True,
        capture_output=True,
        timeout=RUN_BOUND_S,
    )
    deadline = time.monotonic() + GONE_BOUND_S
    while time.monotonic() < deadline:
        if any(cmd.startswith("ray::IDLE") for cmd in _ray_processes().values()):
            return
        time.sleep(0.1)


def _node_name(node: Any) -> str:
    return str(node.node_id)[:8]


def write(path: Path, text: str) -> str:
    path.write_text(textwrap.dedent(text))
    return str(path)


#: Python, started with SIGINT at its default disposition whatever ours is: a suite started as
#: a shell's background job ignores SIGINT, and an ignored signal stays ignored across exec
#: (Python then installs no KeyboardInterrupt handler), so Ctrl-C tests would test nothing.
_SIGINT_DEFAULT = [
    sys.executable,
    "-c",
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL);"
    " os.execv(sys.executable, [sys.executable, *sys.argv[1:]])",
]


class Runner:
    """``supervisor run FILE --ray ADDRESS --json`` as a subprocess, its events read live."""

    def __init__(
        self, path: str, address: str, *extra: str, env: dict[str, str] | None = None
    ) -> None:
        self.proc = subprocess.Popen(
            [*_SIGINT_DEFAULT, "-m", "supervisor", "run", path, "--ray", address, "--json", *extra],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.events: list[dict[str, Any]] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stderr: list[str] = []
        self._threads = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        self._stderr.extend(self.proc.stderr)

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)

    def until(self, wanted: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """Read events until one satisfies ``wanted``; return it."""
        deadline = time.monotonic() + RUN_BOUND_S
        while True:
            try:
                line = self._lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                raise AssertionError(f"no such event; stderr:\n{self.stderr}") from None
            if line is None:
                raise AssertionError(f"the run ended first; stderr:\n{self.stderr}")
            event: dict[str, Any] = json.loads(line)
            self.events.append(event)
            if wanted(event):
                return event

    def finish(self) -> int:
        """Read every event; return the exit code."""
        with contextlib.suppress(AssertionError):
            self.until(lambda e: False)
        return self.proc.wait(timeout=RUN_BOUND_S)

    def job_pid(self, name: str) -> int:
        """The pid the job ``name`` printed (in an event read already, or a later one)."""

        def wanted(e: dict[str, Any]) -> bool:
            return e["event"] == "job.output" and e["name"] == name and "pid" in e["text"]

        event = next((e for e in self.events if wanted(e)), None) or self.until(wanted)
        return int(event["text"].split()[1])

    def finished(self) -> dict[str, dict[str, Any]]:
        return {e["name"]: e for e in self.events if e["event"] == "job.finished"}

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for thread in self._threads:
            thread.join(timeout=RUN_BOUND_S)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def runners() -> Iterator[list[Runner]]:
    made: list[Runner] = []
    yield made
    for runner in made:
        runner.kill()


def _wait_gone(pids: list[int]) -> list[int]:
    deadline = time.monotonic() + GONE_BOUND_S
    while True:
        alive = [p for p in pids if not runs_no_more(p)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def test_demo_on_three_nodes_ends_as_declared(cluster: Any, runners: list[Runner]) -> None:
    runner = Runner(DEMO, cluster.address)
    runners.append(runner)
    assert runner.finish() == 0, runner.stderr
    finished = runner.finished()
    assert {n: e["status"] for n, e in finished.items()} == {
        "build": "ok",
        "test": "ok",
        "build (replaced while waiting)": "superseded",
        "build (again)": "ok",
        "build (untrusted)": "denied",
        "deadline": "failed",
        "escape": "ok",
        "grandchild gone": "ok",
        "long test": "superseded",
        "test (supersede)": "ok",
        "cancelled": "cancelled",
    }
    assert finished["deadline"]["timedOut"] is True
    # Exactly one job.finished per job, after its other events; one lane, one node.
    assert len([e for e in runner.events if e["event"] == "job.finished"]) == 11
    nodes = {e["lane"]: e["node"] for e in runner.events if e["event"] != "run.finished"}
    assert all(
        {e["node"] for e in runner.events if e.get("lane") == lane} == {nodes[lane]}
        for lane in nodes
    )
    # Spread: three lanes, three nodes.
    assert len(set(nodes.values())) == 3
    summary = runner.events[-1]
    assert summary["event"] == "run.finished"
    assert summary["leftovers"] == []
    assert {j["node"] for j in summary["jobs"]} == set(nodes.values())


def test_pinned_lanes_run_on_their_nodes(
    cluster: Any, runners: list[Runner], tmp_path: Path
) -> None:
    path = write(
        tmp_path / "pinned.toml",
        """
        [[job]]
        name = "on zone b"
        project = "."
        kind = "command"
        argv = [
            "{python}", "-c", "import os; print([k for k in os.environ if 'kill_child' in k])",
        ]
        node = "zone=b"

        [[job]]
        name = "on bigbox"
        project = "sub"
        kind = "command"
        argv = ["{python}", "-c", "pass"]
        node = "bigbox"
        """,
    )
    (tmp_path / "sub").mkdir()
    runner = Runner(path, cluster.address)
    runners.append(runner)
    assert runner.finish() == 0, runner.stderr
    finished = runner.finished()
    assert finished["on zone b"]["node"].endswith(_node_name(cluster.zone_b))
    assert finished["on bigbox"]["node"].endswith(_node_name(cluster.bigbox))
    # Without a terminal, the line of each job's end names its node as the lane labels do.
    zone_b, bigbox = finished["on zone b"]["node"], finished["on bigbox"]["node"]
    assert f"[{tmp_path.name} @ {zone_b}] on zone b finished ok in " in runner.stderr
    assert f"[sub @ {bigbox}] on bigbox finished ok in " in runner.stderr
    # No Ray setting meant for an agent reaches its jobs' environment.
    printed = "".join(
        e["text"] for e in runner.events if e["event"] == "job.output" and e["name"] == "on zone b"
    )
    assert printed == "[]\n"


@pytest.mark.parametrize(
    ("pin", "said", "have"),
    [
        ("zone=mars", "the label zone=mars", "the nodes' labels: "),
        ("hugebox", "the resource 'hugebox'", "the nodes' custom resources: "),
    ],
)
def test_a_pin_no_node_satisfies_starts_nothing(
    cluster: Any, runners: list[Runner], tmp_path: Path, pin: str, said: str, have: str
) -> None:
    """Refused naming the pin's file and line, and what the nodes have that a pin could
    name (newcomer finding: neither was said)."""
    (tmp_path / "other").mkdir()
    path = write(
        tmp_path / "nowhere.toml",
        f"""
        [[job]]
        name = "free"
        project = "other"
        argv = ["/bin/true"]

        [[job]]
        project = "."
        kind = "command"
        argv = ["/bin/true"]
        node = "{pin}"
        """,
    )
    runner = Runner(path, cluster.address)
    runners.append(runner)
    assert runner.finish() == 2
    assert f"{path}:11: --ray {cluster.address}: no live node of the cluster has {said}" in (
        runner.stderr
    )
    # Nothing started: the one object on stdout is the refusal (README, run --json).
    assert [e["event"] for e in runner.events] == ["run.refused"]
    error = runner.events[0]["error"]
    assert error["code"] == "launch_failed"
    assert error["details"] == {"option": "--ray", "file": path, "line": 11}
    assert error["message"] in runner.stderr
    shown = error["message"].partition(have)[2]
    # Every node, by the name the reports give it; the worker's label or resource a pin
    # could have named; none of Ray's own resources.
    for node in (cluster.head_node, cluster.zone_b, cluster.bigbox):
        assert f"/{_node_name(node)} " in shown
    assert f"/{_node_name(cluster.zone_b)} zone=b" in shown or pin == "hugebox"
    assert f"/{_node_name(cluster.bigbox)} bigbox" in shown or pin == "zone=mars"
    assert "CPU" not in shown
    assert "memory" not in shown


def test_sigint_ends_every_remote_tree(cluster: Any, runners: list[Runner], tmp_path: Path) -> None:
    path = write(
        tmp_path / "long.toml",
        f"""
        [[job]]
        name = "a"
        project = "."
        kind = "command"
        argv = ["{{python}}", "-c", "{SLEEPER}"]
        node = "zone=b"

        [[job]]
        name = "b"
        project = "sub"
        kind = "command"
        argv = ["{{python}}", "-c", "{SLEEPER}"]
        node = "bigbox"
        """,
    )
    (tmp_path / "sub").mkdir()
    runner = Runner(path, cluster.address)
    runners.append(runner)
    pids = [runner.job_pid("a"), runner.job_pid("b")]
    runner.proc.send_signal(signal.SIGINT)
    assert runner.finish() == 130, runner.stderr
    assert {n: e["status"] for n, e in runner.finished().items()} == {
        "a": "cancelled",
        "b": "cancelled",
    }
    assert runner.events[-1]["leftovers"] == []
    assert _wait_gone(pids) == []


def test_the_runners_own_node_runs_its_lanes_in_the_runner(
    cluster: Any, runners: list[Runner], tmp_path: Path
) -> None:
    """The runner joins the running cluster as a driver on the head: the head's lane runs in
    the runner's own process (no Ray worker to start for it), another node's in that node's
    agent; SIGINT ends both trees, and the head's jobs report the head as their node."""
    path = write(
        tmp_path / "here.toml",
        f"""
        [[job]]
        name = "here"
        project = "."
        kind = "command"
        argv = ["{{python}}", "-c", "{SLEEPER}"]

        [[job]]
        name = "there"
        project = "sub"
        kind = "command"
        argv = ["{{python}}", "-c", "{SLEEPER}"]
        node = "zone=b"
        """,
    )
    (tmp_path / "sub").mkdir()
    runner = Runner(path, cluster.address)
    runners.append(runner)
    here, there = runner.job_pid("here"), runner.job_pid("there")
    parents = {}
    for name, pid in (("here", here), ("there", there)):
        fields = stat_fields(pid)
        assert fields is not None
        parents[name] = int(fields[1])
    assert parents["here"] == runner.proc.pid
    assert parents["there"] != runner.proc.pid
    runner.proc.send_signal(signal.SIGINT)
    assert runner.finish() == 130, runner.stderr
    finished = runner.finished()
    assert {n: e["status"] for n, e in finished.items()} == {
        "here": "cancelled",
        "there": "cancelled",
    }
    assert finished["here"]["node"].endswith(_node_name(cluster.head_node))
    assert finished["there"]["node"].endswith(_node_name(cluster.zone_b))
    assert runner.events[-1]["leftovers"] == []
    assert _wait_gone([here, there]) == []


def test_a_killed_node_agent_fails_its_jobs_and_its_trees_end(
    cluster: Any, runners: list[Runner], tmp_path: Path
) -> None:
    path = write(
        tmp_path / "agent.toml",
        f"""
        [[job]]
        name = "doomed"
        project = "."
        kind = "command"
        argv = ["{{python}}", "-c", "{SLEEPER}"]
        node = "zone=b"
        expect = "failed"

        [[job]]
        name = "queued behind it"
        project = "."
        kind = "command"
        argv = ["/bin/true"]
        expect = "failed"

        [[job]]
        # Submitted (as a rule) after the loss: its lane's node is gone, it fails at once.
        name = "submitted later"
        project = "."
        kind = "command"
        argv = ["/bin/true"]
        start_after_ms = 6000
        expect = "failed"

        [[job]]
        name = "elsewhere"
        project = "sub"
        kind = "command"
        argv = ["{{python}}", "-c", "import time; time.sleep(1)"]
        node = "bigbox"
        """,
    )
    (tmp_path / "sub").mkdir()
    runner = Runner(path, cluster.address)
    runners.append(runner)
    pid = runner.job_pid("doomed")
    fields = stat_fields(pid)
    assert fields is not None
    agent = int(fields[1])  # the tree's parent: the agent process that spawned it
    os.kill(agent, signal.SIGKILL)
    assert runner.finish() == 0, runner.stderr
    finished = runner.finished()
    zone_b = _node_name(cluster.zone_b)
    for name in ("doomed", "queued behind it", "submitted later"):
        assert finished[name]["status"] == "failed"
        assert finished[name]["errorCode"] == "internal"
        assert f"node agent on node {finished[name]['node']} was lost" in finished[name]["error"]
        assert zone_b in finished[name]["error"]
    # The other node's lane went on.
    assert finished["elsewhere"]["status"] == "ok"
    # Ray's notice of the dead worker, if it printed one, is plain text in a file.
    assert "\x1b[" not in runner.stderr
    # The agent's watchdog ended its tree on the node.
    assert _wait_gone([pid]) == []


def _watchdogs() -> set[int]:
    from supervisor._process._watchdog import find_watchdogs

    return set(find_watchdogs())


def _agent_workers() -> set[int]:
    return {p for p, cmd in _ray_processes().items() if cmd.startswith("ray::NodeAgent")}


def _here_and_there(tmp_path: Path) -> str:
    """A file of two ``/bin/true`` jobs: ``here`` (the runner's node) and ``there`` (zone b)."""
    (tmp_path / "sub").mkdir()
    return write(
        tmp_path / "two.toml",
        """
        [[job]]
        name = "here"
        project = "."
        kind = "command"
        argv = ["/bin/true"]

        [[job]]
        name = "there"
        project = "sub"
        kind = "command"
        argv = ["/bin/true"]
        node = "zone=b"
        """,
    )


def test_a_run_leaves_a_running_cluster_by_ending_and_leaves_nothing(
    cluster: Any, runners: list[Runner], tmp_path: Path
) -> None:
    """On a running cluster the command leaves by ending its process (no ``ray.shutdown``,
    no interpreter teardown: an ``atexit`` hook of the process's never runs), yet its output
    is whole, its watchdog and its agents' workers are gone, and the next run goes as well."""
    path = _here_and_there(tmp_path)
    hook = tmp_path / "hook"
    hook.mkdir()
    ran = tmp_path / "atexit-ran"
    (hook / "sitecustomize.py").write_text(
        f"import atexit\natexit.register(lambda: open({str(ran)!r}, 'w').close())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(hook)}
    watchdogs, agents = _watchdogs(), _agent_workers()
    ungraceful = _ungraceful_driver_exits(cluster)
    for attempt in range(2):
        runner = Runner(path, cluster.address, env=env)
        runners.append(runner)
        assert runner.finish() == 0, runner.stderr
        assert {n: e["status"] for n, e in runner.finished().items()} == {
            "here": "ok",
            "there": "ok",
        }
        assert runner.events[-1]["event"] == "run.finished", attempt  # flushed before the end
        assert not ran.exists(), "the process ran its exit hooks (a normal exit)"
        deadline = time.monotonic() + GONE_BOUND_S
        while (_watchdogs() - watchdogs or _agent_workers() - agents) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.05)
        assert _watchdogs() - watchdogs == set(), attempt
        assert _agent_workers() - agents == set(), attempt
    # Told the cluster it left, as ray.shutdown does: Ray records no driver that died.
    assert _ungraceful_driver_exits(cluster) == ungraceful
    # With stdout closed (nothing to flush there) the run still ends 0, without a traceback.
    command = [sys.executable, "-m", "supervisor", "run", path, "--ray", cluster.address]
    closed = subprocess.run(
        ["/bin/sh", "-c", 'exec "$@" >&-', "sh", *command],
        cwd=REPO,
        stderr=subprocess.PIPE,
        text=True,
        timeout=RUN_BOUND_S,
        check=False,
    )
    assert closed.returncode == 0, closed.stderr
    assert "Traceback" not in closed.stderr
    assert _ungraceful_driver_exits(cluster) == ungraceful


def test_leaving_before_exit_falls_back_to_ray_shutdown_without_a_core_worker() -> None:
    """Not connected (no core worker to tell): the public ``ray.shutdown`` is the way out,
    and the caller is told so (it then must not end the process unannounced)."""
    from supervisor._ray._executor import RayCluster

    assert not ray.is_initialized()
    assert RayCluster(address="127.0.0.1:1").leave_before_exit() is False
    assert not ray.is_initialized()


def test_a_report_that_can_not_be_written_ends_the_run_at_once_with_its_error(
    cluster: Any, tmp_path: Path
) -> None:
    """``--json`` into a full device: the write's error ends the run as locally, one
    ``OSError`` reported by Python, with no wait for the events nobody can take (it waited
    out the 15 s close bound, then took the runner's own node for lost)."""
    path = _here_and_there(tmp_path)
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [sys.executable, "-m", "supervisor", "run", path, "--ray", cluster.address, "--json"],
            cwd=REPO,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=RUN_BOUND_S,
            check=False,
        )
    assert result.returncode == 1, result.stderr
    assert result.stderr.count("Traceback") == 1, result.stderr
    assert "OSError: [Errno 28] No space left on device" in result.stderr
    assert "was lost" not in result.stderr


def _ungraceful_driver_exits(cluster: Any) -> int:
    """How many drivers the head's raylet saw end without telling it (a crash to Ray)."""
    log = os.path.join(cluster.head_node.get_session_dir_path(), "logs", "raylet.out")
    with open(log, errors="replace") as f:
        return sum("Disconnecting driver, graceful=false" in line for line in f)


def test_the_runners_death_ends_every_remote_tree(
    cluster: Any, runners: list[Runner], tmp_path: Path
) -> None:
    # The sleeper runs as a grandchild of the agent: Ray ends a dead driver's workers and
    # their direct children (the job's main process, and the agent's watchdog unless it is
    # spared), never their grandchildren.
    (tmp_path / "grand.py").write_text(
        f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {SLEEPER!r}])\n"
    )
    path = write(
        tmp_path / "orphans.toml",
        """
        [[job]]
        name = "a"
        project = "."
        kind = "command"
        argv = ["{python}", "grand.py"]
        node = "zone=b"
        """,
    )
    runner = Runner(path, cluster.address)
    runners.append(runner)
    pid = runner.job_pid("a")
    runner.proc.kill()
    runner.proc.wait()
    # Ray ends the dead driver's actors; each agent's watchdog ends its trees.
    assert _wait_gone([pid]) == []


def test_a_lost_node_fails_its_lanes_and_never_hangs_the_run(
    cluster: Any, runners: list[Runner], tmp_path: Path
) -> None:
    doomed = cluster.add_node(num_cpus=1, resources={"doomed": 1})
    cluster.wait_for_nodes()
    path = write(
        tmp_path / "lost.toml",
        f"""
        [[job]]
        name = "on the lost node"
        project = "."
        kind = "command"
        argv = ["{{python}}", "-c", "{SLEEPER}"]
        node = "doomed"
        expect = "failed"

        [[job]]
        name = "elsewhere"
        project = "sub"
        kind = "command"
        argv = ["{{python}}", "-c", "import time; time.sleep(1)"]
        node = "zone=b"
        """,
    )
    (tmp_path / "sub").mkdir()
    runner = Runner(path, cluster.address)
    runners.append(runner)
    pid = runner.job_pid("on the lost node")
    # Its raylet and workers are killed at once (no drain): the node is simply gone.
    cluster.remove_node(doomed, allow_graceful=False)
    assert runner.finish() == 0, runner.stderr
    finished = runner.finished()
    lost = finished["on the lost node"]
    assert lost["status"] == "failed"
    assert _node_name(doomed) in lost["error"]
    assert finished["elsewhere"]["status"] == "ok"
    # The agent's process went with its raylet; its watchdog ended the tree.
    assert _wait_gone([pid]) == []


async def test_open_ray_lanes_streams_each_jobs_events_in_order_exactly_once(
    cluster: Any, tmp_path: Path
) -> None:
    """The Python API: lanes placed at first use (one pinned), a job cancelled on its node."""
    import trio

    from lanes import JobKind, JobRequest
    from supervisor import open_ray_lanes

    pinned, spread = tmp_path / "pinned", tmp_path / "spread"
    pinned.mkdir()
    spread.mkdir()
    events: list[tuple[str, dict[str, Any]]] = []
    sleeper_printed = trio.Event()

    def on_event(method: str, params: JSONObject) -> None:
        events.append((method, dict(params)))
        if method == "job.output" and "pid" in str(params.get("text")):
            sleeper_printed.set()

    printer = "import sys\nfor i in range(200): print('line', i)\nsys.stdout.flush()"
    async with open_ray_lanes(
        cluster.address,
        on_event=on_event,
        pins={str(pinned): "zone=b"},
    ) as lanes:
        sleeper = lanes.start_job(
            JobRequest(kind=JobKind.COMMAND, root=str(pinned), argv=(sys.executable, "-c", SLEEPER))
        )
        # Three jobs on one lane, one at a time: commands queue (they replace nothing).
        printed = [
            lanes.start_job(
                JobRequest(
                    kind=JobKind.COMMAND, root=str(spread), argv=(sys.executable, "-c", printer)
                )
            )
            for _ in range(3)
        ]
        assert str(lanes.node_of(str(pinned))).endswith(_node_name(cluster.zone_b))
        with trio.fail_after(RUN_BOUND_S):
            await sleeper_printed.wait()
        pid = next(
            int(p["text"].split()[1])
            for m, p in events
            if m == "job.output" and p["jobId"] == sleeper
        )
        assert lanes.cancel_job(sleeper)
        with trio.fail_after(RUN_BOUND_S):
            await lanes.wait_idle()
    assert runs_no_more(pid)
    for job_id in [sleeper, *printed]:
        mine = [(m, p) for m, p in events if p["jobId"] == job_id]
        methods = [m for m, _ in mine]
        assert methods[0] == "job.started"
        assert methods[-1] == "job.finished"
        assert methods.count("job.finished") == 1
        assert set(methods[1:-1]) <= {"job.output"}
    finished = {p["jobId"]: p for m, p in events if m == "job.finished"}
    assert finished[sleeper]["status"] == "cancelled"
    for job_id in printed:
        assert finished[job_id]["status"] == "ok"
        text = "".join(p["text"] for m, p in events if m == "job.output" and p["jobId"] == job_id)
        assert text == "".join(f"line {i}\n" for i in range(200))


def test_the_driver_config_is_set_for_the_join_only_and_yields_to_the_users(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``ray.init`` sees the driver's settings; nothing started later inherits them; a value
    the user set wins."""
    from supervisor._ray._executor import _DRIVER_CONFIG, _driver_config

    name = "RAY_task_events_report_interval_ms"
    assert name in _DRIVER_CONFIG
    monkeypatch.delenv(name, raising=False)
    with _driver_config():
        assert os.environ[name] == "0"
    assert name not in os.environ
    monkeypatch.setenv(name, "500")
    with _driver_config():
        assert os.environ[name] == "500"
    assert os.environ[name] == "500"


def _one_job(tmp_path: Path) -> str:
    """A file of one ``/bin/true`` job."""
    return write(
        tmp_path / "one.toml",
        """
        [[job]]
        project = "."
        kind = "command"
        argv = ["/bin/true"]
        """,
    )


def test_an_address_that_accepts_but_never_answers_is_refused_in_bounded_time(
    runners: list[Runner], tmp_path: Path
) -> None:
    """A port some other program listens on, silent: Ray's join would hang there (beyond
    Ctrl-C); the run is refused with exit 2 and its run.refused object, nothing started."""
    import socket

    path = _one_job(tmp_path)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        runner = Runner(path, address)
        runners.append(runner)
        # The connection waits in the backlog, never accepted nor answered.
        assert runner.finish() == 2, runner.stderr
    assert "does not answer as a Ray cluster" in runner.stderr
    assert [e["event"] for e in runner.events] == ["run.refused"]
    assert runner.events[0]["error"]["details"] == {"option": "--ray"}


def test_sigint_while_joining_ends_the_run_with_130_and_starts_nothing(
    runners: list[Runner], tmp_path: Path
) -> None:
    """SIGINT while the runner joins (here: while it waits for a silent port to answer as
    Ray would, which it does only once Ray is imported) ends it with 130 and a line saying
    so, not a traceback; nothing was started."""
    import socket

    path = _one_job(tmp_path)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(RUN_BOUND_S)
        runner = Runner(path, f"127.0.0.1:{listener.getsockname()[1]}")
        runners.append(runner)
        probe, _ = listener.accept()  # the runner is in its join now
        with probe:
            runner.proc.send_signal(signal.SIGINT)
            assert runner.finish() == 130, runner.stderr
    assert "supervisor run: interrupted while joining the cluster" in runner.stderr
    assert "Traceback" not in runner.stderr
    assert runner.events == []


#: A one-node cluster that requires Ray's token authentication, run by its own driver
#: (token mode is a setting of the whole process): prints its GCS address, ends with stdin.
_TOKEN_HEAD = """
import sys, ray
context = ray.init(num_cpus=1, include_dashboard=False, _temp_dir=sys.argv[1])
print(context.address_info["gcs_address"], flush=True)
sys.stdin.read()
ray.shutdown()
"""


@pytest.mark.parametrize("token", [None, "wrong"])
def test_a_cluster_that_requires_a_token_is_refused_at_once_naming_what_to_set(
    runners: list[Runner], tmp_path: Path, token: str | None
) -> None:
    """Ray's join retries a refused token for 20 s, then says only "Failed to connect": the
    run is refused at once (exit 2, run.refused ``permission_denied``), saying it is the
    token and which variables to set. Token or none, the cluster's own token is elsewhere
    (its HOME), and so is the runner's (~/.ray/auth_token is not read for an address)."""
    import tempfile

    # Short: Ray's sockets live under it. Its own, so the machine's /tmp/ray is not touched.
    temp_dir = tempfile.mkdtemp(prefix="raytok", dir="/tmp")
    (tmp_path / "head").mkdir()
    (tmp_path / "runner").mkdir()
    secret = "0123456789abcdef0123456789abcdef"
    head = subprocess.Popen(
        [sys.executable, "-c", _TOKEN_HEAD, temp_dir],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={
            **os.environ,
            "HOME": str(tmp_path / "head"),
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": secret,
        },
    )
    try:
        assert head.stdout is not None
        address = head.stdout.readline().strip()
        assert address, "the token cluster did not start"
        path = write(
            tmp_path / "one.toml",
            """
            [[job]]
            project = "."
            kind = "command"
            argv = ["/bin/true"]
            """,
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
        env["HOME"] = str(tmp_path / "runner")
        if token is not None:
            env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secret[::-1])
        started = time.monotonic()
        runner = Runner(path, address, env=env)
        runners.append(runner)
        assert runner.finish() == 2, runner.stderr
        # Not Ray's 20 s of retries (a generous bound: a loaded machine).
        assert time.monotonic() - started < 15.0
        assert [e["event"] for e in runner.events] == ["run.refused"]
        error = runner.events[0]["error"]
        assert error["code"] == "permission_denied"
        assert error["details"] == {"option": "--ray"}
        assert "requires Ray's token authentication" in error["message"]
        assert "RAY_AUTH_MODE=token and RAY_AUTH_TOKEN" in error["message"]
        said = "refused this process's token" if token else "which sent no token"
        assert said in error["message"]
        assert error["message"] in runner.stderr
    finally:
        with contextlib.suppress(OSError):
            head.communicate(input="", timeout=RUN_BOUND_S)
        if head.poll() is None:
            head.kill()
            head.wait()
    deadline = time.monotonic() + GONE_BOUND_S
    while (left := [c for c in _ray_processes().values() if temp_dir in c]) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.1)
    assert not left, f"Ray processes outlived the token cluster: {left}"
    shutil.rmtree(temp_dir, ignore_errors=True)
