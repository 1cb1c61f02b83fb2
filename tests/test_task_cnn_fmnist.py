"""CNN@FashionMNIST's data: the local IDX files are read without torchvision (its import is
1.4-2 s of every process's start) into exactly the tensors torchvision's loader gives."""

import pytest
import torch

from decobench.errors import DecobenchError
from decobench.tasks import get_task
from decobench.tasks.idx import read_idx


def test_local_files_read_as_torchvision_reads_them(fmnist_root):
    from torchvision.datasets import FashionMNIST

    task = get_task("cnn-fmnist")
    profile = task.profiles["cpu"]
    data = task.load_data(fmnist_root, download=False, profile=profile)
    for train, inputs, targets in ((True, data.train_inputs, data.train_targets),
                                   (False, data.test_inputs, data.test_targets)):
        reference = FashionMNIST(str(fmnist_root), train=train, download=False)
        assert torch.equal(targets, reference.targets.long()) and targets.dtype == torch.int64
        expected = ((reference.data.float() / 255.0 - 0.2860) / 0.3530).unsqueeze(1)
        assert torch.equal(inputs, expected)


def test_an_idx_file_of_another_type_is_refused(tmp_path):
    path = tmp_path / "floats-idx1"
    path.write_bytes(bytes([0, 0, 0x0D, 1, 0, 0, 0, 1]) + bytes(4))   # float32 IDX
    with pytest.raises(DecobenchError, match="not an unsigned-byte IDX file"):
        read_idx(path)
    path.write_bytes(bytes([0, 0, 0x08, 2, 0, 0, 0, 2, 0, 0, 0, 3]) + bytes(range(6)))
    assert read_idx(path).tolist() == [[0, 1, 2], [3, 4, 5]]
