"""A private Docker engine and an offline worker image for the live Docker tests.

How the engine runs here is measured in ``../shared/notes/docker-here.md``: ``dockerd`` in a
network namespace of its own (its bridges and iptables rules stay out of the host's), with
its socket, data and exec roots in one folder, started and stopped by PID. No registry is
reachable, so the image is a Debian bookworm root filesystem from ``debootstrap`` (the
mirror apt already uses) with Python, iproute2 and iptables, ``docker import``-ed; the
test's own virtual environment is mounted into the containers read-only (site-packages at
:data:`SITE_IN_IMAGE`, the checkout at its own path for the editable install), because
building ``docker/Dockerfile`` offline needs a 3 GB wheelhouse of PyPI's CUDA torch and
about 5 minutes (the note's figures), more than the test budget. Everything else is what
users run: the compose file :func:`decobench.netem.compose.render_compose` writes, torchrun,
``decobench.emulated`` and the trace player's tc sidecars.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

SITE_IN_IMAGE = "/opt/decobench-site"
"""Where the containers see the test venv's site-packages (a ``.pth`` in the image adds it)."""

ROOTFS_PREFETCH = pytest.StashKey["RootfsPrefetch"]()
"""Where tests/conftest.py keeps the session's :class:`RootfsPrefetch`."""

PACKAGES = ("python3", "python-is-python3", "iproute2", "iptables")
TOOLS = ("dockerd", "docker", "docker-compose", "debootstrap", "ip", "nsenter", "tar")


def unavailable() -> str | None:
    """Why a live Docker test cannot run here, or None."""
    if sys.platform != "linux" or os.geteuid() != 0:
        return "needs root on Linux to run a private Docker engine"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return (f"missing {', '.join(missing)} (Debian: apt-get install docker.io containerd "
                "runc iptables debootstrap docker-compose; `make test` installs them as root)")
    if sys.version_info[:2] != (3, 11):
        return (f"the test image is Debian bookworm (Python 3.11) with this venv mounted; this "
                f"venv is Python {sys.version_info[0]}.{sys.version_info[1]}")
    if apt_mirror() is None:
        return "no Debian mirror found in /etc/apt/sources.list(.d) for debootstrap"
    from hostfeatures import congestion_control_unavailable

    return congestion_control_unavailable()   # the workers' sysctls set cubic


def apt_mirror() -> str | None:
    """The Debian mirror apt uses (the first ``.../debian`` URI of its sources)."""
    for path in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for line in path.read_text().splitlines():
            if line.startswith("URIs:"):
                for uri in line.split()[1:]:
                    if uri.rstrip("/").endswith("/debian"):
                        return uri
    legacy = Path("/etc/apt/sources.list")
    if legacy.exists():
        for line in legacy.read_text().splitlines():
            words = line.split()
            if words[:1] == ["deb"] and len(words) > 2 and words[-2] == "bookworm":
                return words[-3]
    return None


class PrivateEngine:
    """``dockerd`` in network namespace ``netns`` with all its state under ``root``."""

    def __init__(self, root: Path, netns: str) -> None:
        self.root, self.netns = root, netns
        self.sock = root / "docker.sock"
        self.env = {**os.environ, "DOCKER_HOST": f"unix://{self.sock}"}
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 30.0) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        checked(subprocess.run(["ip", "netns", "add", self.netns], capture_output=True,
                               text=True))
        checked(subprocess.run(["ip", "-n", self.netns, "link", "set", "lo", "up"],
                               capture_output=True, text=True))
        log = open(self.root / "dockerd.log", "wb")  # noqa: SIM115 (kept for the process's life)
        self.proc = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{self.netns}", "dockerd", "-H", f"unix://{self.sock}",
             "--data-root", str(self.root / "data"), "--exec-root", str(self.root / "exec"),
             "--pidfile", str(self.root / "dockerd.pid"), "--storage-driver", "overlay2"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while self.docker("info", check=False).returncode != 0:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = (self.root / "dockerd.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"dockerd did not start:\n{tail}")
            time.sleep(0.3)

    def docker(self, *args: str, check: bool = True, timeout: float = 300,
               stdin: bytes | None = None) -> subprocess.CompletedProcess:
        return checked(subprocess.run(["docker", *args], env=self.env, capture_output=True,
                                      timeout=timeout, input=stdin), check)

    def compose(self, compose_dir: Path, *args: str, env: dict[str, str] | None = None,
                check: bool = True, timeout: float = 300,
                wrapper: Sequence[str] = ()) -> subprocess.CompletedProcess:
        """``docker-compose ARGS`` on this engine, behind ``wrapper`` (a command prefix such
        as ``python -m decobench.netem.tcp --``) when given."""
        files = ["-f", "compose.yaml", "-f", "override.yaml"]
        return checked(subprocess.run([*wrapper, "docker-compose", *files, *args], cwd=compose_dir,
                                      env={**self.env, **(env or {})}, capture_output=True,
                                      text=True, timeout=timeout), check)

    def stop(self) -> None:
        """Stop the daemon (by its PID), unmount what it left and delete its namespace."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for mount in sorted(_mounts_under(self.root), key=len, reverse=True):
            subprocess.run(["umount", "-l", mount], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True)

    def leftovers(self) -> list[str]:
        """What the engine left behind after :meth:`stop`: mounts, its namespace, its process."""
        out = [f"mount {m}" for m in _mounts_under(self.root)]
        if self.netns in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                        text=True).stdout.split():
            out.append(f"network namespace {self.netns}")
        if self.proc is not None and self.proc.poll() is None:
            out.append(f"dockerd (pid {self.proc.pid})")
        return out


class CommandFailed(RuntimeError):
    """A command of the live test failed; the message carries its own stderr (compose's,
    docker's), not only the exit status."""


def checked(proc: subprocess.CompletedProcess, check: bool = True) -> subprocess.CompletedProcess:
    """``proc``, or :class:`CommandFailed` with the command, its status and the last 3,000
    characters of its stderr (and stdout) when ``check`` and it failed."""
    if check and proc.returncode != 0:
        def text(data: str | bytes | None) -> str:
            return (data.decode(errors="replace") if isinstance(data, bytes)
                    else data or "").strip()

        output = "\n".join(filter(None, (text(proc.stderr), text(proc.stdout))))
        raise CommandFailed(f"{' '.join(map(str, proc.args))} exited with status "
                            f"{proc.returncode}:\n{output[-3000:] or '(no output)'}")
    return proc


def host_command(argv: list[str]) -> str:
    """Run a command on the host; its stdout, or :class:`CommandFailed` naming its stderr."""
    return checked(subprocess.run(argv, capture_output=True, text=True)).stdout


def _mounts_under(root: Path) -> list[str]:
    prefix = str(root.resolve())
    mounts = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        target = line.split()[1].replace("\\040", " ")
        if target == prefix or target.startswith(prefix + "/"):
            mounts.append(target)
    return mounts


def debootstrap_rootfs(rootfs: Path, started: Callable[[int], None] | None = None) -> Path:
    """Debian bookworm minbase + :data:`PACKAGES` from the apt mirror (about 70 s, mostly
    download and unpacking), with a ``.pth`` that adds :data:`SITE_IN_IMAGE` and
    ``torchrun`` / ``decobench`` launchers. Needs no engine, so it can run ahead
    (:class:`RootfsPrefetch`); ``started`` receives its process group."""
    # at the lowest CPU and I/O priority: it overlaps the whole suite (the live tests run
    # last) and took about 150 s from the first tests at normal priority; a test that waits
    # for it raises it back to normal (RootfsPrefetch.result)
    lowest = ["nice", "-n", "19", *(["ionice", "-c", "3"] if shutil.which("ionice") else [])]
    proc = subprocess.Popen(
        [*lowest, "debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", "bookworm",
         str(rootfs), str(apt_mirror())], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True)
    if started is not None:
        started(proc.pid)
    try:
        stdout, stderr = proc.communicate(timeout=DEBOOTSTRAP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise RuntimeError(f"debootstrap did not finish in {DEBOOTSTRAP_TIMEOUT_S} s") from None
    if proc.returncode != 0:
        raise RuntimeError(f"debootstrap failed:\n{stdout[-2000:]}{stderr[-2000:]}")
    pth = rootfs / "usr/lib/python3/dist-packages/zz_decobench_site.pth"
    pth.write_text(f"import site; site.addsitedir({SITE_IN_IMAGE!r})\n")
    for name, module in (("torchrun", "torch.distributed.run"), ("decobench", "decobench.cli.main")):
        launcher = rootfs / "usr/local/bin" / name
        launcher.write_text(f"#!/usr/bin/python3\nimport sys\nfrom {module} import main\n"
                            "sys.exit(main())\n")
        launcher.chmod(0o755)
    return rootfs


DEBOOTSTRAP_TIMEOUT_S = 1200
"""A debootstrap is killed after this long (about 70 s on an idle machine)."""


class RootfsPrefetch:
    """:func:`debootstrap_rootfs` in a background thread, started when the session collects
    the live tests (tests/conftest.py), so its download overlaps the other tests. It runs
    at the lowest priority until a test waits for it (:meth:`result`): seen here, on a
    machine whose two cores ran a sweep beside the tests, a debootstrap at nice 19 was still
    unpacking after 600 s."""

    def __init__(self, rootfs: Path) -> None:
        self.rootfs = rootfs
        self._error: BaseException | None = None
        self._group: int | None = None
        self._thread = threading.Thread(target=self._run, name="debootstrap", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            debootstrap_rootfs(self.rootfs, started=self._started)
        except BaseException as exc:  # noqa: BLE001 (re-raised in result())
            self._error = exc

    def _started(self, group: int) -> None:
        self._group = group

    def hurry(self) -> None:
        """Back to normal CPU and I/O priority: someone is waiting (root lowers a nice value;
        otherwise it stays low). Children started later inherit it from debootstrap."""
        if self._group is None or not self._thread.is_alive():
            return
        subprocess.run(["renice", "-n", "0", "-g", str(self._group)], capture_output=True)
        if shutil.which("ionice"):
            subprocess.run(["ionice", "-c", "2", "-n", "4", "-P", str(self._group)],
                           capture_output=True)

    def result(self, timeout_s: float = DEBOOTSTRAP_TIMEOUT_S + 30) -> Path:
        self.hurry()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise RuntimeError(f"debootstrap still running after {timeout_s:g} s")
        if self._error is not None:
            raise self._error
        return self.rootfs


def import_image(engine: PrivateEngine, rootfs: Path, tag: str) -> None:
    """``docker import`` the root filesystem as ``tag``."""
    tar = checked(subprocess.run(["tar", "-C", str(rootfs), "-c", "."], capture_output=True))
    engine.docker("import", "-", tag, stdin=tar.stdout)


def venv_mounts() -> list[str]:
    """Compose volume lines that give a container this venv and this checkout, read-only."""
    import decobench

    site = sysconfig.get_paths()["purelib"]
    checkout = str(Path(decobench.__file__).resolve().parents[1])
    return [f"{site}:{SITE_IN_IMAGE}:ro", f"{checkout}:{checkout}:ro"]


def disk_usage_bytes(path: Path) -> int:
    proc = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True)
    return int(proc.stdout.split()[0]) if proc.returncode == 0 else 0
