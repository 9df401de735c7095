"""A real PostgreSQL server for the tests: Debian's (``.ci/run`` installs the ``postgresql`` package), a cluster of
its own in a temporary directory, reached over a Unix socket there, with trust authentication. Its roles: the
daemons' (``sanitizerd``, which owns each test's database) and two readers named as this host's users ``root`` and
``nobody``, which is how peer authentication names a user's role on a real host."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

READERS = ("root", "nobody")


def _binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class PostgresServer:
    directory: Path
    port: int
    bin: Path
    databases: int = field(default=0)

    def url(self, database: str, role: str = "sanitizerd") -> str:
        return f"postgresql://{role}@/{database}?host={self.directory}&port={self.port}"

    def sql(self, statement: str, database: str = "postgres") -> str:
        return subprocess.run(
            [str(self.bin / "psql"), "-h", str(self.directory), "-p", str(self.port), "-U", "postgres", "-d",
             database, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", statement],
            capture_output=True, text=True, check=True, timeout=60,
        ).stdout  # fmt: skip

    def new_database(self) -> str:
        """A fresh database owned by the daemons' role, its readers granted what `findings --store` selects once the
        daemons have made the tables (``grant_readers``)."""
        self.databases += 1
        name = f"findings_{os.getpid()}_{self.databases}"
        self.sql(f"CREATE DATABASE {name} OWNER sanitizerd")
        return name

    def grant_readers(self, database: str) -> None:
        self.sql(f"GRANT SELECT ON sessions, findings, readers TO {', '.join(READERS)}", database)


def _as_postgres(command: list[str]) -> list[str]:
    """initdb and the server refuse to run as root: as root, they run as Debian's postgres user."""
    if os.geteuid() != 0:
        return command
    return ["runuser", "-u", "postgres", "--", *command]


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    binaries = _binaries()
    if binaries is None:
        if os.environ.get("SANITIZERD_REQUIRE_POSTGRES") == "1":
            pytest.fail("SANITIZERD_REQUIRE_POSTGRES=1 but no PostgreSQL server is installed (Debian: postgresql)")
        pytest.skip("no PostgreSQL server installed (Debian: postgresql; .ci/run installs it)")
    directory = Path(tempfile.mkdtemp(prefix="pg-", dir="/tmp"))
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        os.chown(directory, owner.pw_uid, owner.pw_gid)
    server = PostgresServer(directory, _free_port(), binaries)
    data = directory / "data"
    subprocess.run(_as_postgres([str(binaries / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"]),
                   capture_output=True, check=True, timeout=120)  # fmt: skip
    options = f"-k {directory} -p {server.port} -c listen_addresses='' -c fsync=off"
    subprocess.run(_as_postgres([str(binaries / "pg_ctl"), "-D", str(data), "-o", options, "-l",
                                 str(directory / "log"), "-w", "start"]),
                   capture_output=True, check=True, timeout=120)  # fmt: skip
    try:
        server.sql("CREATE ROLE sanitizerd LOGIN")
        for role in READERS:
            server.sql(f"CREATE ROLE {role} LOGIN")
        yield server
    finally:
        subprocess.run(_as_postgres([str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
                       capture_output=True, timeout=120)  # fmt: skip
        shutil.rmtree(directory, ignore_errors=True)
