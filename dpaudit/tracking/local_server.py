"""A throwaway team tracking server on loopback: PostgreSQL plus ``mlflow server --app-name basic-auth``.

For the live tests (``tests/dpaudit/tracking/test_team_server.py``) and the benchmark
(``benchmarks/bench_team_server.py``), and for trying the hardened set-up of docs/mlflow.md ("Team server") on one
machine. Everything lives in one temporary folder that :meth:`LocalTeamServer.close` removes, readable by its owner
only: every file of it is created mode 0600 (this process writes with explicit modes, the servers run under umask
077), so the auth database, the logs and the password files are not world-readable:

* a PostgreSQL cluster (``initdb``, ``pg_ctl start``, ``createdb``) listening on a free port of 127.0.0.1 only, its
  socket in the same folder; PostgreSQL refuses to run as root, so when this process is root the cluster's folder is
  given to the ``postgres`` OS user and its commands run through ``runuser -u postgres``. Every connection, over TCP
  or the socket, authenticates with SCRAM-SHA-256 (``initdb -A scram-sha-256``) as the superuser ``postgres``, whose
  random password is given to ``initdb`` in a 0600 password file (``--pwfile``) and to the clients (``createdb``,
  MLflow) in ``PGPASSWORD``, never on a command line: another local user cannot connect to the cluster;
* MLflow's tracking server against it (``postgresql+psycopg2://``), bound to 127.0.0.1 on another free port, with
  ``--allowed-hosts`` naming exactly that address, ``--no-serve-artifacts`` (artifacts go to a folder of the temporary
  folder) and the basic-auth app: ``default_permission = NO_PERMISSIONS``, its own SQLite user database, an admin
  password and a Flask secret key drawn here (``secrets``), never MLflow's default ``password1234``;
* one user (not an admin) created with the admin credentials through MLflow's auth REST API
  (``POST /api/2.0/mlflow/users/create``): the credentials a dpaudit session is given.

The MLflow server can be killed (``SIGKILL`` to its process group) and started again on the same port and database
(:meth:`LocalTeamServer.kill_mlflow`, :meth:`LocalTeamServer.start_mlflow`), to test outages.
"""

from __future__ import annotations

import base64
import contextlib
import glob
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from dpaudit.errors import DPAuditError
from dpaudit.files import create_once

POSTGRES_BIN_GLOB = "/usr/lib/postgresql/*/bin"
"""Where Debian's ``postgresql`` package puts ``initdb`` and ``pg_ctl`` (not on ``PATH``)."""
START_TIMEOUT_S = 180.0
"""How long :meth:`LocalTeamServer.start_mlflow` waits for ``/health`` (MLflow's first start migrates the database)."""
USER = "dpaudit-ci"
UMASK = 0o077
"""The servers' umask: what they create (the auth database, logs, the cluster's files) is their owner's only."""


class ServerUnavailable(DPAuditError):
    """The PostgreSQL binaries are missing, or a server did not start (the message says which, and what to run)."""


def postgres_bin() -> Path:
    """The folder holding ``initdb`` and ``pg_ctl``: on ``PATH``, else the newest Debian ``postgresql`` install.

    Raises:
        ServerUnavailable: no ``initdb`` (install PostgreSQL: ``apt-get install -y postgresql``).
    """
    found = shutil.which("initdb")
    if found:  # a link on PATH (e.g. /usr/local/bin/initdb) stands for the folder that holds the other tools
        return Path(found).resolve().parent
    installed = sorted(glob.glob(POSTGRES_BIN_GLOB), key=lambda p: int(Path(p).parent.name)
                       if Path(p).parent.name.isdigit() else -1)
    for folder in reversed(installed):
        if (Path(folder) / "initdb").is_file():
            return Path(folder)
    raise ServerUnavailable(f"PostgreSQL server binaries not found (no initdb on PATH or in {POSTGRES_BIN_GLOB}): "
                            "run `apt-get install -y postgresql`")


def free_port() -> int:
    """A TCP port of 127.0.0.1 free right now (the OS's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def basic_auth(username: str, password: str) -> str:
    """The ``Authorization`` header value of HTTP basic authentication (RFC 7617)."""
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode("ascii")


class LocalTeamServer:
    """PostgreSQL and an authenticated MLflow tracking server on loopback, in a temporary folder (module docstring).

    Use it as a context manager, or call :meth:`start` and :meth:`close`. After :meth:`start`: :attr:`uri` (the
    tracking URI, no credentials in it), :attr:`username` and :attr:`password` (the created user's), and
    :meth:`client_env` (the environment variables a client sets).
    """

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="dpaudit-team-server-"))
        self.pg_port = free_port()
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.username = USER
        self.password = secrets.token_urlsafe(18)
        self._admin_password = secrets.token_urlsafe(18)
        self._pg_password = secrets.token_urlsafe(18)
        self._bin: Path | None = None
        self._pg_started = False
        self._mlflow: subprocess.Popen | None = None

    # --- life cycle -------------------------------------------------------------------------------------------

    def __enter__(self) -> LocalTeamServer:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Start PostgreSQL, then MLflow, then create the user.

        Raises:
            ServerUnavailable: PostgreSQL is not installed, or a server did not start (with its log's tail).
        """
        self._start_postgres()
        self._write_auth_config()
        self.start_mlflow()
        self._create_user()

    def close(self) -> None:
        """Stop both servers and remove the temporary folder (safe to call twice, or after a failed start)."""
        self.kill_mlflow()
        if self._pg_started and self._bin is not None:
            self._postgres("pg_ctl", "-D", str(self._pg_dir / "data"), "-m", "immediate", "-w", "stop", check=False)
            self._pg_started = False
        shutil.rmtree(self.root, ignore_errors=True)

    def client_env(self) -> dict[str, str]:
        """The environment of a client of this server: its URI and the user's credentials."""
        return {"MLFLOW_TRACKING_URI": self.uri, "MLFLOW_TRACKING_USERNAME": self.username,
                "MLFLOW_TRACKING_PASSWORD": self.password}

    # --- PostgreSQL -------------------------------------------------------------------------------------------

    @property
    def _pg_dir(self) -> Path:
        return self.root / "postgres"

    def _postgres(self, tool: str, *args: str, check: bool = True,
                  password: bool = True) -> subprocess.CompletedProcess:
        """Run a PostgreSQL tool (as ``postgres`` when root), with the superuser's password in ``PGPASSWORD`` unless
        ``password`` is False."""
        assert self._bin is not None
        command = [str(self._bin / tool), *args]
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            command = ["runuser", "-u", "postgres", "--", *command]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        if password:
            env["PGPASSWORD"] = self._pg_password
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, umask=UMASK)
        if check and done.returncode != 0:
            raise ServerUnavailable(f"{tool} failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-800:]}")
        return done

    def _start_postgres(self) -> None:
        self._bin = postgres_bin()
        self._pg_dir.mkdir()
        if os.geteuid() == 0:
            self.root.chmod(0o711)  # the postgres user must reach its folder (mkdtemp makes 0700)
            shutil.chown(self._pg_dir, user="postgres")
        data = str(self._pg_dir / "data")
        pwfile = self._pg_dir / "pwfile"
        create_once(pwfile, self._pg_password.encode(), 0o600)
        if os.geteuid() == 0:
            shutil.chown(pwfile, user="postgres")
        self._postgres("initdb", "-D", data, "-U", "postgres", "-A", "scram-sha-256", f"--pwfile={pwfile}",
                       "-E", "UTF8", "--no-sync")
        # loopback only, the socket in our own folder; fsync off: a throwaway cluster, never the team's real one
        options = f"-p {self.pg_port} -h 127.0.0.1 -k {self._pg_dir} -c fsync=off"
        self._postgres("pg_ctl", "-D", data, "-l", str(self._pg_dir / "log"), "-o", options, "-w", "start")
        self._pg_started = True
        self._postgres("createdb", "-h", "127.0.0.1", "-p", str(self.pg_port), "-U", "postgres", "mlflow")

    # --- MLflow -----------------------------------------------------------------------------------------------

    def _write_auth_config(self) -> None:
        create_once(self.root / "auth.ini", (
            "[mlflow]\n"
            "default_permission = NO_PERMISSIONS\n"
            f"database_uri = sqlite:///{self.root / 'auth.db'}\n"
            "admin_username = admin\n"
            f"admin_password = {self._admin_password}\n"
            "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n").encode(), 0o600)

    def start_mlflow(self) -> None:
        """Start MLflow's server (again, after :meth:`kill_mlflow`) and wait until ``/health`` answers.

        Raises:
            ServerUnavailable: it exited or did not answer within :data:`START_TIMEOUT_S` (with its log's tail).
        """
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_TRACKING_", "PG"))}
        env.update(PGPASSWORD=self._pg_password, MLFLOW_AUTH_CONFIG_PATH=str(self.root / "auth.ini"),
                   MLFLOW_FLASK_SERVER_SECRET_KEY=secrets.token_hex(32), MLFLOW_DISABLE_TELEMETRY="true",
                   MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
        command = [sys.executable, "-m", "mlflow", "server",
                   "--backend-store-uri", f"postgresql+psycopg2://postgres@127.0.0.1:{self.pg_port}/mlflow",
                   "--app-name", "basic-auth", "--host", "127.0.0.1", "--port", str(self.port),
                   "--allowed-hosts", f"127.0.0.1:{self.port}", "--no-serve-artifacts",
                   "--default-artifact-root", str(self.root / "artifacts"), "--workers", "1"]
        log = os.open(self.root / "mlflow.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:  # the child keeps writing to it
            self._mlflow = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.root,
                                            umask=UMASK)
        finally:
            os.close(log)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._mlflow.poll() is not None:
                raise ServerUnavailable(f"mlflow server exited ({self._mlflow.returncode}): {self._log_tail()}")
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{self.uri}/health", timeout=2) as reply:
                if reply.status == 200:
                    return
            time.sleep(0.2)
        raise ServerUnavailable(f"mlflow server did not answer within {START_TIMEOUT_S:.0f} s: {self._log_tail()}")

    def kill_mlflow(self) -> None:
        """``SIGKILL`` the MLflow server and every process it started (its process group), and reap it."""
        if self._mlflow is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._mlflow.pid, signal.SIGKILL)
        self._mlflow.wait(timeout=60)
        self._mlflow = None

    def _log_tail(self) -> str:
        try:
            return (self.root / "mlflow.log").read_text(encoding="utf-8", errors="replace")[-1500:]
        except OSError:
            return "(no log)"

    def _create_user(self) -> None:
        request = urllib.request.Request(
            f"{self.uri}/api/2.0/mlflow/users/create", method="POST",
            data=json.dumps({"username": self.username, "password": self.password}).encode(),
            headers={"Content-Type": "application/json", "Authorization": basic_auth("admin", self._admin_password)})
        try:
            with urllib.request.urlopen(request, timeout=30) as reply:
                reply.read()
        except urllib.error.URLError as exc:
            raise ServerUnavailable(f"cannot create the MLflow user {self.username!r}: {exc}") from exc
