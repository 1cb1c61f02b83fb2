"""Shared fixtures: the offline data slices in ../shared/data; root for network namespaces."""

import os
import shutil
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
FMNIST_MINI = SHARED_DATA / "fashion-mnist-mini"


@pytest.fixture(scope="session")
def fmnist_root() -> Path:
    if not (FMNIST_MINI / "FashionMNIST" / "raw").is_dir():
        pytest.fail(f"offline Fashion-MNIST slice missing at {FMNIST_MINI} "
                    "(the project expects ../shared beside the checkout)")
    return FMNIST_MINI


@pytest.fixture(autouse=True)
def _wandb_off_unless_asked(monkeypatch):
    """W&B logging is on by default for users; tests turn it off (each run would start a
    wandb process) except those that set WANDB_MODE=offline themselves to check it."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setenv("WANDB_SILENT", "true")


@pytest.fixture
def root():
    """Skip unless we can create network namespaces and shape links (CI runs as root)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (CAP_NET_ADMIN) to create network namespaces")
    if shutil.which("ip") is None or shutil.which("tc") is None:
        pytest.skip("needs the ip and tc commands (iproute2)")
