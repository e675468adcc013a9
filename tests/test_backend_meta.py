"""Backend metadata of devx tensors (torch._utils.set_tensor_metadata/get_tensor_metadata): kept
by the tensor, its shallow copies and torch.save/load, not by new tensors."""
from __future__ import annotations

import io
import pickle

import torch

TAGS = {"calibrated": True, "frozen": False}


def _tagged():
    x = torch.arange(4.0, device="devx")
    torch._utils.set_tensor_metadata(x, TAGS)
    return x


def test_a_devx_tensor_keeps_what_is_set(devx):
    x = torch.ones(2, device="devx")
    assert torch._utils.get_tensor_metadata(x) == {}
    torch._utils.set_tensor_metadata(x, TAGS)
    assert torch._utils.get_tensor_metadata(x) == TAGS
    torch._utils.set_tensor_metadata(x, {})
    assert torch._utils.get_tensor_metadata(x) == {}


def test_shallow_copies_keep_it_and_new_tensors_do_not(devx):
    x = _tagged()
    assert torch._utils.get_tensor_metadata(x.detach()) == TAGS
    assert torch._utils.get_tensor_metadata(torch.nn.Parameter(x)) == TAGS
    assert torch._utils.get_tensor_metadata(x.clone()) == {}
    assert torch._utils.get_tensor_metadata(x[1:]) == {}
    assert torch._utils.get_tensor_metadata(x + 1) == {}


def test_torch_save_and_load_keep_it(devx):
    x = _tagged()
    buffer = io.BytesIO()
    torch.save({"weight": x}, buffer)
    buffer.seek(0)
    y = torch.load(buffer)["weight"]
    assert y.device == x.device and torch.equal(y.cpu(), x.cpu())
    assert torch._utils.get_tensor_metadata(y) == TAGS
    z = pickle.loads(pickle.dumps(x))
    assert torch._utils.get_tensor_metadata(z) == TAGS


def test_torch_keys_stay_torch_s(devx):
    c = torch.ones(2, dtype=torch.cfloat, device="devx").conj()
    assert torch._utils.get_tensor_metadata(c) == {"conj": True}
    torch._utils.set_tensor_metadata(c, {"mine": True})
    assert torch._utils.get_tensor_metadata(c) == {"conj": True, "mine": True}


def test_cpu_tensors_are_not_affected(devx):
    x = torch.ones(2)
    torch._utils.set_tensor_metadata(x, TAGS)
    assert torch._utils.get_tensor_metadata(x) == {}
