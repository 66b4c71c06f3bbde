"""`lahar up`: the whole system on one machine, in one command (DESIGN.md, "Embedded mode").

One process supervises everything:
- the embedded API server (apiserver), on an asyncio loop in a thread of this process;
- the scheduler, the controller and this machine's agent as child processes running their own
  `lahar scheduler|controller|agent` commands against a kubeconfig written to the data directory:
  the code paths of a cluster, a core each where there is one, each with /metrics and /healthz on
  a free loopback port, the scheduler's report endpoint (gRPC) on loopback with per-run tokens;
- N simulated nodes (`lahar sim-nodes`), a child process too: in this process their status
  writes and report streams held the interpreter lock the API server needs for every request;
- this machine as a node (LocalNode: pods run as local processes in kubelet-like cgroups under
  `--cgroup-parent`), as threads of this process.

Start: the API, then the children at once (they boot while this node registers), this node,
then each child's /healthz (the simulated nodes' says they registered and listed their pods). A
child that exits on its own, or whose /livez keeps failing, is started again after a back-off
(1 s doubling to 60 s), said on the terminal, while the rest keeps running. Stop (Ctrl-C,
SIGTERM) goes the other way: the children (SIGTERM, SIGKILL after a timeout; the agent first, so
it lifts its QoS caps, then the simulated nodes), this node (its pods' processes killed, its
cgroups removed), the API. The data stays. The children run
in sessions of their own, so a Ctrl-C in the terminal reaches only `lahar up`, which stops them in
that order."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import logging
import os
import secrets
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from lahar import examples, log_format
from lahar.client.kubeconfig import embedded_kubeconfig
from lahar.endpoints import free_loopback_port
from lahar.node.cgroups import DEFAULT_PARENT
from lahar.node.logs import find_pod_logs
from lahar.node.pod_run import ExecTarget
from lahar.node.simulated import DEFAULT_PREFIX as SIM_PREFIX
from lahar.node.simulated import SimNodeSize
from lahar.up import DEFAULT_DATA_DIR

if TYPE_CHECKING:  # the heavy modules load when the system starts, not when the CLI parses flags
    from lahar.apiserver.server import ServerConfig
    from lahar.client.api import KubeApi
    from lahar.node.runtime import LocalNode

log = logging.getLogger("lahar.up")

LOOPBACK = "127.0.0.1"
EXAMPLES = examples.DIRECTORY  # the demo's scenarios, for `lahar apply -f` (in the package: wheels too)
COMPONENTS_DIR = "components"  # <data-dir>/components/: the programs' logs, tokens, pids
READY_TIMEOUT_SECONDS = 90.0  # a loaded 2-core machine imports three programs at once
STOP_TIMEOUT_SECONDS = 10.0  # then SIGKILL
API_START_TIMEOUT_SECONDS = 30.0
API_STOP_TIMEOUT_SECONDS = 15.0
LOG_TAIL_LINES = 20
# Restarts, as kubelet's CrashLoopBackOff but quicker (these are local programs, not images to
# pull): the first after 1 s, doubling to at most 60 s; a program that ran 2 min is forgiven.
RESTART_INITIAL_SECONDS = 1.0
RESTART_MAX_SECONDS = 60.0
RESTART_RESET_SECONDS = 120.0
# Liveness, as a kubelet probe: /livez every 10 s, restarted after 3 failures in a row.
LIVENESS_PERIOD_SECONDS = 10.0
LIVENESS_FAILURES = 3


def restart_delay(restarts: int) -> float:
    """Seconds to wait before the next start of a program that has been restarted `restarts`
    times in a row (0 for its first crash): doubling from RESTART_INITIAL_SECONDS, capped."""
    return min(RESTART_INITIAL_SECONDS * 2 ** min(restarts, 32), RESTART_MAX_SECONDS)


class StartupError(RuntimeError):
    """A part of the system did not start; the message says which, why, and where its log is."""


class Cancelled(Exception):
    """A stop was asked for while the system was starting."""


def say(text: str = "", end: str = "\n") -> None:
    print(text, end=end, flush=True)


@dataclass(frozen=True)
class SimNodeSet:
    """The simulated nodes the `sim-nodes` program runs (what the demo and the summary show)."""

    count: int
    size: SimNodeSize
    prefix: str = SIM_PREFIX

    @property
    def node_names(self) -> list[str]:
        return [f"{self.prefix}{index}" for index in range(self.count)]


@dataclass(frozen=True)
class UpOptions:
    server: ServerConfig
    sim_nodes: int = 0
    sim_node_size: SimNodeSize = field(default_factory=SimNodeSize)
    local_node: bool = True
    cgroup_parent: str = DEFAULT_PARENT
    qos_config: Path | None = None
    verbose: bool = False  # -v: debug lines, here and in the programs it starts
    log_format: str = "text"  # --log-format, here and in the programs it starts
    scheduler_conf: Path | None = None  # the scheduler's --conf (its built-in configuration if None)
    # A federation hub (`lahar up --clusters N`, up/fleet.py): the API server and `lahar federation`
    # only; no scheduler, controller or nodes, so the hub's Jobs run in the members alone.
    hub: bool = False
    federation_policy: Path | None = None
    # A member of such a federation: also `lahar federation member`, the fence that stops the hub's
    # Jobs here once the hub's lease has run out (docs/federation.md, "Faults").
    federation_member: bool = False


# --- the API server, in a thread of this process ----------------------------------------------------


class ApiServerThread:
    """`lahar.apiserver.server.serve` on an event loop of its own thread, so the main thread stays
    free to supervise (serve leaves signals to its caller off the main thread)."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.url = ""
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="lahar-apiserver", daemon=True)

    def start(self, timeout: float = API_START_TIMEOUT_SECONDS) -> str:
        """Serve; the URL once the port listens. Raises the server's refusal (a ConfigError)."""
        self._thread.start()
        if not self._ready.wait(timeout):
            raise StartupError(f"the API server did not listen within {timeout:.0f} s")
        if self._error is not None:
            raise self._error
        return self.url

    def stop(self, timeout: float = API_STOP_TIMEOUT_SECONDS) -> None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:
            self._error = exc
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        from lahar.apiserver import server

        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()

        async def ready(url: str) -> None:
            self.url = url
            self._ready.set()

        await server.serve(self.config, on_ready=ready, stop=self._stop)


def write_kubeconfig(config: ServerConfig, url: str) -> Path:
    """<data-dir>/kubeconfig for kubectl, lahar and the child programs (0600: it may hold the token)."""
    kubeconfig = config.data_dir / "kubeconfig"
    kubeconfig.touch(mode=0o600)
    ca = config.data_dir / "tls" / "ca.crt"
    kubeconfig.write_text(
        embedded_kubeconfig(
            url.replace("://0.0.0.0:", f"://{LOOPBACK}:"),
            config.token(),
            ca.read_bytes() if url.startswith("https") and ca.exists() else None,
        )
    )
    return kubeconfig


# --- the child programs -----------------------------------------------------------------------------


@dataclass
class Program:
    """One program as a child process: `lahar <command> <args>`, its output appended to its log,
    its state on /healthz."""

    name: str  # scheduler, controller, agent: the `lahar` command
    args: list[str]
    metrics_port: int
    log_path: Path
    global_args: tuple[str, ...] = ()  # `lahar`'s own flags (-v, --log-format), before the command
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restarts: int = 0  # restarts so far (what `lahar up` reports)
    crash_loop: int = 0  # restarts in a row, without a long enough run between: the back-off's
    restart_at: float | None = None  # when a program that exited is started again
    probed_at: float = 0.0
    probe_failures: int = 0
    command: tuple[str, ...] = ()  # the `lahar` command when it is not the name (`federation member`)

    @property
    def argv(self) -> list[str]:
        return [
            sys.executable,
            "-P",  # not the working directory first: a lahar/ folder there (a checkout) is not this lahar
            "-m",
            "lahar",
            *self.global_args,
            *(self.command or (self.name,)),
            *self.args,
            "--metrics-address",
            LOOPBACK,
            "--metrics-port",
            str(self.metrics_port),
        ]

    @property
    def metrics_url(self) -> str:
        return f"http://{LOOPBACK}:{self.metrics_port}/metrics"

    def start(self) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # its lines reach the log as they are written
        with open(self.log_path, "ab") as log_file:
            log_file.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} lahar up: {shlex.join(self.argv)}\n".encode())
            log_file.flush()
            # A session of its own: the terminal's Ctrl-C reaches lahar up alone, which stops the
            # programs in order.
            self.process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        self.started_at = time.monotonic()

    def poll(self) -> int | None:
        return self.process.poll() if self.process is not None else None

    def health(self, path: str = "/healthz") -> tuple[bool, str]:
        """(`path` says 200, its body or why it did not answer)."""
        try:
            with urllib.request.urlopen(f"http://{LOOPBACK}:{self.metrics_port}{path}", timeout=2) as answer:
                return True, answer.read().decode(errors="replace").strip()
        except urllib.error.HTTPError as exc:
            return False, exc.read().decode(errors="replace").strip()
        except OSError as exc:
            return False, f"not answering yet ({getattr(exc, 'reason', exc)})"

    def signal(self, sig: signal.Signals) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join("    " + line for line in text.splitlines()[-lines:])


# --- the system -------------------------------------------------------------------------------------


class System:
    def __init__(self, options: UpOptions) -> None:
        self.options = options
        self.data_dir = options.server.data_dir
        self.components_dir = self.data_dir / COMPONENTS_DIR
        # `kubectl logs` reads what this machine's runtime wrote (node/logs.py's layout).
        data_dir = self.data_dir
        server_config = dataclasses.replace(
            options.server,
            pod_logs=lambda namespace, name: find_pod_logs(data_dir, namespace, name),
            pod_exec=self._exec_target,  # `kubectl exec` and `attach` run in the local node's containers
        )
        self.apiserver = ApiServerThread(server_config)
        self.url = ""
        self.kubeconfig = self.data_dir / "kubeconfig"
        self.report_address = f"{LOOPBACK}:{free_loopback_port()}"
        self.programs: list[Program] = []
        self.api: KubeApi | None = None
        self.local_node: LocalNode | None = None
        self.sim_nodes: SimNodeSet | None = None  # what the `sim-nodes` program runs
        self.agent_qos = ""  # what the agent's /healthz said about QoS when it became ready
        self._lock_file: int | None = None
        self._log_handler: logging.Handler | None = None
        self._handler_levels: dict[logging.Handler, int] = {}
        self._started = False

    def _exec_target(self, namespace: str, name: str, container: str) -> ExecTarget | None:
        node = self.local_node
        return node.exec_target(namespace, name, container) if node is not None else None

    @property
    def pids_file(self) -> Path:
        return self.components_dir / "pids"

    # --- start -----------------------------------------------------------------------------------

    def start(self, cancelled: threading.Event) -> None:
        """Start everything, saying so as it goes. StartupError names what failed; Cancelled
        when `cancelled` is set meanwhile. Call stop() afterwards either way."""
        began = time.monotonic()
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # it holds the database: Secrets
        self.components_dir.mkdir(mode=0o700, exist_ok=True)
        self._lock()
        self._started = True  # from here on, stop() has something to undo
        self._route_logs()
        self._stop_leftovers()
        say("starting the API server… ", end="")  # serve() completes the line with its address
        try:
            self.url = self.apiserver.start()
        except BaseException:
            say("failed")
            raise
        self.kubeconfig = write_kubeconfig(self.options.server, self.url)
        self.api = self._api()
        self._check(cancelled)
        self._start_programs()
        if self.options.local_node:
            self._start_local_node()
        self._check(cancelled)
        self._remove_stale_sim_nodes()
        for program in self.programs:
            self._wait_ready(program, cancelled)
        say(f"\nLahar is up ({time.monotonic() - began:.1f} s).")
        say(self.summary())

    def _api(self) -> KubeApi:
        from lahar.client.api import KubeApi
        from lahar.client.connect import new_api_client

        # This node's and the simulated nodes' informers and status writers, and the demo, share it.
        return KubeApi(new_api_client(str(self.kubeconfig), pool_size=32))

    @staticmethod
    def _check(cancelled: threading.Event) -> None:
        if cancelled.is_set():
            raise Cancelled()

    def _lock(self) -> None:
        """One `lahar up` per data directory: two would share one SQLite file and one node."""
        fd = os.open(self.components_dir / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StartupError(f"another lahar up is running with the data directory {self.data_dir}") from None
        self._lock_file = fd

    def _route_logs(self) -> None:
        """This process's log lines (API server, nodes) go to components/lahar-up.log; the terminal
        keeps warnings and errors (all of it with -v), so the progress and the demo stay readable."""
        root = logging.getLogger()
        for handler in root.handlers:
            self._handler_levels[handler] = handler.level
            if not self.options.verbose:
                handler.setLevel(logging.WARNING)
        self._log_handler = logging.FileHandler(self.components_dir / "lahar-up.log")
        self._log_handler.setFormatter(log_format.formatter(self.options.log_format))
        root.addHandler(self._log_handler)

    def _unroute_logs(self) -> None:
        root = logging.getLogger()
        for handler, level in self._handler_levels.items():
            handler.setLevel(level)
        if self._log_handler is not None:
            root.removeHandler(self._log_handler)
            self._log_handler.close()
            self._log_handler = None

    def _stop_leftovers(self) -> None:
        """Programs a `lahar up` killed with SIGKILL left running (they retry the API forever)."""
        try:
            lines = self.pids_file.read_text().splitlines()
        except OSError:
            return
        marker = str(self.kubeconfig).encode()
        for line in lines:
            pid_text, _, name = line.partition(" ")
            try:
                pid = int(pid_text)
                command = Path(f"/proc/{pid}/cmdline").read_bytes()
            except (ValueError, OSError):
                continue
            if b"lahar" in command and marker in command:  # ours, not a pid reused since
                log.warning("stopping the %s (pid %d) a previous lahar up left running", name, pid)
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
        self.pids_file.unlink(missing_ok=True)

    def _write_secret(self, name: str, text: str) -> Path:
        path = self.components_dir / name
        path.touch(mode=0o600)
        path.chmod(0o600)
        path.write_text(text)
        return path

    def _start_programs(self) -> None:
        """The scheduler, the controller, the simulated nodes and the agent, at once: they boot
        while this node registers. The report tokens are new each start: one for this node's
        agent, one (`*`) for the simulated nodes."""
        node = self._local_node_name()
        agent_token, sim_token = secrets.token_hex(16), secrets.token_hex(16)
        tokens = self._write_secret("report-tokens", f"{agent_token} {node}\n{sim_token} *\n")
        kubeconfig = ["--kubeconfig", str(self.kubeconfig)]
        if self.options.hub:
            policy = [] if self.options.federation_policy is None else ["--policy", str(self.options.federation_policy)]
            self.programs = [self._program("federation", [*kubeconfig, *policy])]
            say(f"launching the federation as a child process (its log: {self.components_dir}/federation.log)")
            self.programs[0].start()
            self._write_pids()
            return
        scheduler_conf = [] if self.options.scheduler_conf is None else ["--conf", str(self.options.scheduler_conf)]
        self.programs = [
            self._program(
                "scheduler",
                [
                    *kubeconfig,
                    "--report-address",
                    self.report_address,
                    "--token-file",
                    str(tokens),
                    *scheduler_conf,
                    # The only scheduler here: Deployments' and kubectl's pods name the default one.
                    *("--scheduler-name", "lahar", "--scheduler-name", "volcano"),
                    *("--scheduler-name", "default-scheduler"),
                ],
            ),
            self._program("controller", [*kubeconfig, "--workloads"]),
        ]
        if self.options.federation_member:
            self.programs.append(self._program("member-fence", kubeconfig, ("federation", "member")))
        if self.options.sim_nodes > 0:
            size = self.options.sim_node_size
            self.programs.append(
                self._program(
                    "sim-nodes",
                    [
                        *kubeconfig,
                        *("--count", str(self.options.sim_nodes), "--size", size.spec()),
                        *("--report-address", self.report_address),
                        *("--token-file", str(self._write_secret("sim-token", sim_token + "\n"))),
                    ],
                )
            )
            self.sim_nodes = SimNodeSet(self.options.sim_nodes, size)
        if self.options.local_node:
            agent_token_file = self._write_secret("agent-token", agent_token + "\n")
            qos = ["--qos-config", str(self.options.qos_config)] if self.options.qos_config else []
            self.programs.append(
                self._program(
                    "agent",
                    [
                        *kubeconfig,
                        "--node",
                        node,
                        "--kubepods",
                        self.options.cgroup_parent,
                        "--scheduler-address",
                        self.report_address,
                        "--token-file",
                        str(agent_token_file),
                        *qos,
                    ],
                )
            )
        say(
            f"launching the {', the '.join(p.name for p in self.programs[:-1])} and the {self.programs[-1].name} "
            f"as child processes (their logs: {self.components_dir}/<name>.log)"
        )
        for program in self.programs:
            program.start()
        self._write_pids()

    def _program(self, name: str, args: list[str], command: tuple[str, ...] = ()) -> Program:
        verbose: tuple[str, ...] = ("-v",) if self.options.verbose else ()
        fmt: tuple[str, ...] = () if self.options.log_format == "text" else ("--log-format", self.options.log_format)
        flags = (*verbose, *fmt)  # none by default: `lahar agent ...`, as a user would type it
        log_path = self.components_dir / f"{name}.log"
        return Program(name, args, free_loopback_port(), log_path, flags, command=command)

    def _local_node_name(self) -> str:
        from lahar.node.node_object import local_node_name

        return local_node_name()

    def _start_local_node(self) -> None:
        from lahar.node.node_object import local_cpus
        from lahar.node.runtime import LocalNode

        assert self.api is not None
        _put_lahar_on_path()
        node = LocalNode(self.api, self.data_dir, cgroup_parent=self.options.cgroup_parent)
        say(f"starting this machine as node {node.node_name}… ", end="")
        node.start()
        self.local_node = node
        node.wait_for_sync(10.0)
        where = (
            f"pods run in cgroups under {node.context.cgroups.top}"
            if node.context.cgroups is not None
            else f"pods run WITHOUT cgroups, so no QoS for them ({node.cgroups_problem})"
        )
        say(f"ready: {local_cpus()} CPUs; {where}")

    def _remove_stale_sim_nodes(self) -> None:
        """Without --sim-nodes, the simulated nodes of an earlier start go (with it, the
        `sim-nodes` program removes those beyond its count)."""
        from lahar.node.simulated import remove_simulated_nodes

        assert self.api is not None
        if self.options.sim_nodes == 0:
            removed = remove_simulated_nodes(self.api)
            if removed:
                say(f"removed the {removed} simulated nodes of an earlier start")

    def _wait_ready(self, program: Program, cancelled: threading.Event, timeout: float = READY_TIMEOUT_SECONDS) -> None:
        say(f"starting the {program.name}… ", end="")
        deadline = program.started_at + timeout
        while True:
            code = program.poll()
            if code is not None:
                say("failed")
                raise StartupError(
                    f"the {program.name} exited while starting (exit code {code}); the end of "
                    f"{program.log_path}:\n{program.log_tail()}"
                )
            ok, answer = program.health()
            if ok:
                break
            if cancelled.is_set():
                say("interrupted")
                raise Cancelled()
            if time.monotonic() > deadline:
                say("not ready")
                raise StartupError(
                    f"the {program.name} was not ready {timeout:.0f} s after it started "
                    f"(/healthz: {answer}); the end of {program.log_path}:\n{program.log_tail()}"
                )
            cancelled.wait(0.2)
        if program.name == "agent":  # "ok; qos active" or "ok; qos unavailable: <why>"
            self.agent_qos = answer.partition("qos ")[2] or "unknown"
            if self.local_node is not None and self.local_node.context.cgroups is None:
                # The agent waits for a pod cgroup tree that this node cannot make: say so.
                self.agent_qos = f"unavailable: this node's pods run without cgroups (the agent: {self.agent_qos})"
            answer = f"QoS {self.agent_qos}"
        else:
            answer = ""
        say(f"ready ({time.monotonic() - program.started_at:.1f} s)" + (f": {answer}" if answer else ""))

    # --- what runs where ---------------------------------------------------------------------------

    def summary(self) -> str:

        rows = [("API server", self.url)]
        for program in self.programs:
            extra = ""
            if program.name == "scheduler":
                extra = f"   agent reports on {self.report_address} (gRPC)"
            elif program.name == "agent" and self.local_node is not None:
                extra = f"   node {self.local_node.node_name}, QoS {self.agent_qos}"
            rows.append((program.name, program.metrics_url + extra))
        nodes = []
        if self.local_node is not None:
            nodes.append(f"{self.local_node.node_name} (this machine)")
        if self.sim_nodes is not None:
            names = self.sim_nodes.node_names
            nodes.append(f"{len(names)} simulated ({names[0]}" + (f" … {names[-1]})" if len(names) > 1 else ")"))
        rows.append(("nodes", ", ".join(nodes) or "none"))
        logs_flag = "" if self.data_dir.resolve() == DEFAULT_DATA_DIR.resolve() else f" --data-dir {self.data_dir}"
        rows.append(("logs", f"{self.components_dir}/*.log; a pod's: lahar logs POD{logs_flag}"))
        width = max(len(name) for name, _ in rows)
        lines = [f"  {name:<{width}}  {value}" for name, value in rows]
        lines += [
            "Point kubectl or lahar at it:",
            f"  export KUBECONFIG={self.kubeconfig}",
            f"  lahar get nodes   |   lahar apply -f {_shortest(EXAMPLES / 'gang-job.yaml')}   |   lahar get podgroups",
            f"Ctrl-C stops it; the data stays in {self.data_dir}.",
        ]
        return "\n".join(lines)

    # --- running and stopping ----------------------------------------------------------------------

    def supervise(self, until: threading.Event, poll_seconds: float = 0.5) -> None:
        """Keep the programs running until `until` is set: one that exits is started again after
        a back-off, one whose /livez fails LIVENESS_FAILURES times in a row is killed and
        started again, each said as it happens; the others keep running meanwhile."""
        while not until.wait(poll_seconds):
            self.tend(time.monotonic())

    def tend(self, now: float) -> None:
        """One round of supervision over every program (`lahar up --clusters` tends several systems)."""
        for program in self.programs:
            self._tend(program, now)

    def _tend(self, program: Program, now: float) -> None:
        if program.restart_at is not None:
            if now >= program.restart_at:
                program.restart_at = None
                program.probe_failures = 0
                program.start()
                self._write_pids()
                program.restarts += 1  # last: a reader seeing the count sees the new process and pid file
                say(f"restarted the {program.name} (restart {program.restarts})")
            return
        code = program.poll()
        if code is not None:
            if now - program.started_at >= RESTART_RESET_SECONDS:
                program.crash_loop = 0  # it ran long enough: this crash starts a new count
            delay = restart_delay(program.crash_loop)
            program.crash_loop += 1
            program.restart_at = now + delay
            say(
                f"the {program.name} exited unexpectedly (exit code {code}); restarting it in {delay:.0f} s "
                f"(the rest keeps running); the end of {program.log_path}:\n{program.log_tail()}"
            )
            log.warning("the %s exited with %s; restarting in %.0f s", program.name, code, delay)
            return
        if now - program.started_at < READY_TIMEOUT_SECONDS or now - program.probed_at < LIVENESS_PERIOD_SECONDS:
            return
        program.probed_at = now
        alive, why = program.health("/livez")
        program.probe_failures = 0 if alive else program.probe_failures + 1
        if program.probe_failures >= LIVENESS_FAILURES:
            say(f"the {program.name} is not live ({why}): killing it to restart it")
            log.warning("the %s failed its liveness probe %d times: %s", program.name, program.probe_failures, why)
            program.signal(signal.SIGKILL)

    def _write_pids(self) -> None:
        self.pids_file.write_text("".join(f"{p.process.pid} {p.name}\n" for p in self.programs if p.process))

    def stop(self) -> bool:
        """Stop everything that started, in reverse; True when all of it stopped cleanly."""
        if not self._started:
            return True
        self._started = False
        say("stopping…")
        # The agent first (it lifts its QoS caps), the simulated nodes' report streams before the
        # scheduler that receives them, the nodes' informers before the API.
        first = [p for name in ("agent", "sim-nodes") for p in self.programs if p.name == name]
        clean = self._stop_programs(first)
        clean = self._stop_programs([p for p in reversed(self.programs) if p not in first]) and clean
        clean = self._stop_step("this node", self.local_node.stop if self.local_node else None) and clean
        clean = self._stop_step("the API server", self.apiserver.stop) and clean
        self.pids_file.unlink(missing_ok=True)
        self._unroute_logs()
        if self._lock_file is not None:
            os.close(self._lock_file)
            self._lock_file = None
        say(f"stopped; the data stays in {self.data_dir}")
        return clean

    @staticmethod
    def _stop_step(what: str, step: Callable[[], None] | None) -> bool:
        if step is None:
            return True
        try:
            step()
        except Exception:  # the rest must still stop
            log.exception("stopping %s failed", what)
            return False
        return True

    @staticmethod
    def _stop_programs(programs: list[Program]) -> bool:
        """Stop programs one at a time: SIGTERM, then SIGKILL after a timeout."""
        clean = True
        for program in programs:
            if program.process is None:
                continue
            program.signal(signal.SIGTERM)
            try:
                program.process.wait(STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                say(f"the {program.name} did not stop within {STOP_TIMEOUT_SECONDS:.0f} s: killed")
                program.signal(signal.SIGKILL)
                program.process.wait()
                clean = False
        return clean


def _shortest(path: Path) -> str:
    """The path relative to the working directory when that is shorter (`examples/...` in a checkout)."""
    relative = os.path.relpath(path)
    return relative if len(relative) < len(str(path)) else str(path)


def _put_lahar_on_path() -> None:
    """Pods see this process's PATH (node/process.py): put the directory of this Python, which
    holds the `lahar` command in a virtual environment, first, so the examples' `lahar workload`
    and `python3` are this installation's even when it is not on the user's PATH."""
    directory = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    if (Path(directory) / "lahar").exists() and path.split(os.pathsep)[:1] != [directory]:
        os.environ["PATH"] = os.pathsep.join([directory, path]) if path else directory


def run(
    options: UpOptions,
    stop: threading.Event,
    demo: Callable[[System, threading.Event], bool] | None = None,
    demo_exit: bool = False,
) -> int:
    """Start the system, run the demo (in a thread) if asked, supervise until `stop` is set (by a
    signal, or by the demo when `demo_exit`), then stop everything. The exit status: 0 after a
    clean stop, 1 when something failed to start or stop, or (with `demo_exit`) the demo failed. A
    program that dies meanwhile is restarted (System.supervise), not a reason to stop."""
    system = System(options)
    status = 0
    demo_thread: threading.Thread | None = None
    outcome: list[bool] = []
    try:
        try:
            system.start(stop)
        except Cancelled:
            return 0
        except StartupError as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            return 1
        if demo is not None:

            def narrate() -> None:
                try:
                    outcome.append(demo(system, stop))
                except Exception:  # a bug in the narration must not take the system down
                    log.exception("the demo failed")
                    say("demo: failed unexpectedly; see the log above")
                    outcome.append(False)
                if demo_exit:
                    stop.set()
                elif not stop.is_set():
                    say(f"Lahar stays up; Ctrl-C stops it (export KUBECONFIG={system.kubeconfig} to look around).")

            demo_thread = threading.Thread(target=narrate, name="lahar-demo", daemon=True)
            demo_thread.start()
        system.supervise(stop)
        if demo_exit and outcome != [True]:
            status = 1
    finally:
        stop.set()  # the demo, if it still runs, gives up and ends its load generator
        if demo_thread is not None:
            demo_thread.join(30)
        if not system.stop():
            status = status or 1
    return status
