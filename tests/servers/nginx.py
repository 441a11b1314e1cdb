"""nginx, from Debian's package, for the http(s) store's tests: found on
PATH, or fetched once per machine as Azurite is, and started per test
session on a free loopback port with a generated configuration.

The tests install no system package: when ``nginx`` is not on PATH,
``apt-get download nginx`` (no root needed) fetches Debian's ``.deb`` into
the cache and ``dpkg-deb -x`` unpacks it there (its binary needs only
libc, PCRE2, OpenSSL and zlib, present on any Debian). The cache is
``$AIOFLUX_NGINX_DIR``, else ``~/.cache/aioflux/nginx``; a file lock makes
parallel sessions fetch it once. nginx then runs in the foreground
(``daemon off``) with every path it writes (pid, logs, temporary files)
in a temporary directory, and is stopped by its process id.

As with fake-gcs-server and Azurite, a machine where nginx cannot be had
fails the tests that need it (an error at their set-up that says what to
install), never skips them, so a run that passes has run them all.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Nginx", "install_nginx", "running_nginx"]

#: What a request to ``/private/`` must carry, else 401.
TOKEN = "nginx-test-token"


@dataclass(frozen=True)
class Nginx:
    """A running nginx.

    Attributes:
        endpoint: ``http://127.0.0.1:<port>`` (``https://`` with TLS).
        root: the directory it serves.
        pid: its master process id.
        error_log: its error log.
    """

    endpoint: str
    root: Path
    pid: int
    error_log: Path

    @property
    def bucket(self) -> str:
        """``127.0.0.1:<port>``: the bucket of its URLs."""
        return self.endpoint.split("://", 1)[1]


def _cache_dir() -> Path:
    configured = os.environ.get("AIOFLUX_NGINX_DIR")
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "aioflux" / "nginx"


def install_nginx() -> Path:
    """The ``nginx`` binary: on PATH, else unpacked from Debian's package.

    Returns:
        Its path.

    Raises:
        RuntimeError: not on PATH and the package could not be fetched
            (no apt, no network): the output is in the message.
    """
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx",
                                                                       os.X_OK) else None)
    if found:
        return Path(found)
    root = _cache_dir()
    binary = root / "usr" / "sbin" / "nginx"
    done = root / ".installed"
    if done.is_file() and binary.exists():
        return binary
    apt, dpkg = shutil.which("apt-get"), shutil.which("dpkg-deb")
    if apt is None or dpkg is None:
        raise RuntimeError("the http(s) store's tests run nginx: not on PATH, and no "
                           "apt-get/dpkg-deb to fetch Debian's package; install nginx "
                           "(apt-get install nginx-light)")
    root.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f"{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another session may be fetching it
        if done.is_file() and binary.exists():
            return binary
        with tempfile.TemporaryDirectory(dir=root.parent) as work:
            got = subprocess.run([apt, "download", "nginx"], cwd=work, stdin=subprocess.DEVNULL,
                                 capture_output=True, text=True, timeout=300, check=False)
            debs = sorted(Path(work).glob("nginx_*.deb"))
            if got.returncode != 0 or not debs:
                raise RuntimeError("the http(s) store's tests run nginx: not on PATH, and "
                                   f"apt-get download nginx failed ({got.returncode}); "
                                   "install nginx (apt-get install nginx-light):\n"
                                   f"{got.stdout[-2000:]}{got.stderr[-2000:]}")
            unpacked = subprocess.run([dpkg, "-x", os.fspath(debs[0]), os.fspath(root)],
                                      capture_output=True, text=True, timeout=120, check=False)
            if unpacked.returncode != 0 or not binary.exists():
                raise RuntimeError(f"dpkg-deb -x {debs[0].name} failed:\n{unpacked.stderr}")
        done.write_text(debs[0].name)
    return binary


def _config(workdir: Path, root: Path, port: int, tls: tuple[Path, Path] | None,
            workers: int | str) -> str:
    # As root, the workers would switch to "nobody", who cannot read a
    # test's temporary directory: they stay the user the tests run as.
    user = f"user {pwd.getpwuid(os.geteuid()).pw_name};" if os.geteuid() == 0 else ""
    temp = "\n".join(f"    {kind}_temp_path {workdir / kind};"
                     for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    listen = f"listen 127.0.0.1:{port}{' ssl' if tls else ''};"
    certs = (f"ssl_certificate {tls[0]};\n        ssl_certificate_key {tls[1]};"
             if tls else "")
    return f"""
{user}
worker_processes {workers};
daemon off;
pid {workdir / "nginx.pid"};
error_log {workdir / "error.log"} warn;
events {{ worker_connections 256; }}
http {{
    access_log off;
    # As Debian's own nginx.conf and most real servers: files go to the
    # socket by sendfile(2). nginx's default (off) read each file into its
    # buffers and wrote it out, CPU taken from the cores the readers under
    # test run on, which a real server does not spend (TLS reads as before).
    sendfile on;
    tcp_nopush on;
{temp}
    default_type application/octet-stream;
    server {{
        {listen}
        {certs}
        root {root};
        location /private/ {{
            if ($http_authorization != "Bearer {TOKEN}") {{ return 401; }}
        }}
        location /moved/ {{
            rewrite ^/moved/(.*)$ /$1 redirect;
        }}
    }}
}}
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _listening(process: subprocess.Popen[bytes], workdir: Path, log: Path, timeout: float, *,
               last: bool) -> bool:
    """Whether nginx listens (it writes its pid file once its sockets do);
    False where its port was taken meanwhile (unless ``last``)."""
    deadline = time.monotonic() + timeout
    while not (workdir / "nginx.pid").exists():
        if process.poll() is not None or time.monotonic() > deadline:
            text = log.read_text() if log.exists() else ""
            if process.returncode is not None and "Address already in use" in text and not last:
                return False
            process.kill()
            process.wait()
            raise RuntimeError(f"nginx did not start ({process.returncode}):\n{text}")
        time.sleep(0.02)
    return True


@contextlib.contextmanager
def running_nginx(root: Path, *, tls: tuple[Path, Path] | None = None,
                  start_timeout: float = 30.0, workers: int | str = 1) -> Iterator[Nginx]:
    """Serve ``root`` with nginx on a free loopback port until the block ends.

    Args:
        root: the directory to serve (``/private/`` wants the bearer
            :data:`TOKEN`; ``/moved/x`` redirects to ``/x``).
        tls: ``(certificate, key)`` PEM files to serve HTTPS with.
        start_timeout: seconds to wait for it to listen.
        workers: nginx's ``worker_processes`` (``"auto"``: one a core, as
            Debian's nginx.conf has it; the tests' servers take one).

    Yields:
        The running server; it is stopped (by its pid) on exit.
    """
    binary = install_nginx()
    with tempfile.TemporaryDirectory(prefix="aioflux-nginx-") as tmp:
        workdir = Path(tmp)
        log = workdir / "error.log"
        # A free port is only free when probed: another process may bind it
        # before nginx does, which then exits "address in use": a new one.
        for attempt in range(5):
            port = _free_port()
            conf = workdir / "nginx.conf"
            conf.write_text(_config(workdir, root, port, tls, workers))
            log.unlink(missing_ok=True)
            process = subprocess.Popen([os.fspath(binary), "-p", tmp, "-c", os.fspath(conf),
                                        "-e", os.fspath(log)],
                                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.STDOUT)
            if _listening(process, workdir, log, start_timeout, last=attempt == 4):
                break
        try:
            scheme = "https" if tls else "http"
            yield Nginx(f"{scheme}://127.0.0.1:{port}", root, process.pid, log)
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
