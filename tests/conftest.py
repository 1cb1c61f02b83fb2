"""Shared fixtures: the offline data slices in ../shared/data; root for network namespaces."""

import shutil
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
FMNIST_MINI = SHARED_DATA / "fashion-mnist-mini"
CIFAR10_MINI = SHARED_DATA / "cifar10-mini"


@pytest.fixture(scope="session")
def fmnist_root() -> Path:
    if not (FMNIST_MINI / "FashionMNIST" / "raw").is_dir():
        pytest.fail(f"offline Fashion-MNIST slice missing at {FMNIST_MINI} "
                    "(the project expects ../shared beside the checkout)")
    return FMNIST_MINI


@pytest.fixture(scope="session")
def cifar10_root() -> Path:
    """The slice of the real CIFAR-10 (python batches; ../shared/data/README.md)."""
    if not (CIFAR10_MINI / "cifar-10-batches-py" / "test_batch").is_file():
        pytest.fail(f"offline CIFAR-10 slice missing at {CIFAR10_MINI} "
                    "(the project expects ../shared beside the checkout)")
    return CIFAR10_MINI


@pytest.fixture(autouse=True)
def _wandb_off_unless_asked(monkeypatch):
    """W&B logging is on by default for users; tests turn it off (each run would start a
    wandb process) except those that set WANDB_MODE=offline themselves to check it."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setenv("WANDB_SILENT", "true")


@pytest.fixture
def root():
    """Skip unless we can create network namespaces, shape links and give the namespaces
    cubic TCP (CI runs as root; tests/hostfeatures.py says what is checked)."""
    from hostfeatures import emulation_unavailable

    reason = emulation_unavailable()
    if reason:
        pytest.skip(reason)


@pytest.fixture
def host_without_cubic(root):
    """The host's allowed congestion control list without cubic for the test (issue 38's
    host: 'reno bbr'), put back afterwards. This test changes a host setting on purpose."""
    from decobench.netem.tcp import (
        ALLOWED_CONGESTION_CONTROL,
        CONGESTION_CONTROL_ALGORITHM,
        proc_path,
    )

    allowed = Path(proc_path(ALLOWED_CONGESTION_CONTROL))
    before = allowed.read_text().strip()          # `root` checked that the kernel has cubic
    try:
        allowed.write_text(" ".join(a for a in before.split()
                                    if a != CONGESTION_CONTROL_ALGORITHM) + "\n")
    except OSError as exc:
        pytest.skip(f"cannot write {allowed} (not the initial network namespace?): {exc}")
    yield before
    allowed.write_text(before + "\n")


# ------------------------------------------------------------------- live Docker (prefetch)
_DOCKER_LIVE = "test_docker_live.py"


def pytest_collection_modifyitems(config, items):
    """Run the live Docker tests last, so the image's debootstrap (started below, about
    70 s of mostly download) overlaps the rest of the suite instead of adding to it."""
    live = [item for item in items if item.path.name == _DOCKER_LIVE]
    if live:
        items[:] = [item for item in items if item.path.name != _DOCKER_LIVE] + live


def pytest_collection_finish(session):
    if not any(item.path.name == _DOCKER_LIVE for item in session.items):
        return
    from dockerlive import ROOTFS_PREFETCH, RootfsPrefetch, unavailable

    if unavailable() is None:
        import tempfile

        work = Path(tempfile.mkdtemp(prefix="decobench-docker-live-"))
        session.config.stash[ROOTFS_PREFETCH] = RootfsPrefetch(work / "rootfs")


def pytest_sessionfinish(session):
    from dockerlive import ROOTFS_PREFETCH

    prefetch = session.config.stash.get(ROOTFS_PREFETCH, None)
    if prefetch is not None:
        try:
            prefetch.result()  # do not delete under a running debootstrap
        except Exception:  # noqa: BLE001 - the live tests that needed it reported it
            pass
        shutil.rmtree(prefetch.rootfs.parent, ignore_errors=True)
