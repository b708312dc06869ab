"""Each op's source line names the file its code is in, also when two files hold byte-identical
code (transformers' modular copies, ``modeling_roberta.py`` and ``modeling_xlm_roberta.py``):
code objects compare equal across files, so a cache keyed by them gave the second model the
first file's name (capture/_source.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import torch

import torchlens_nb as tl

SOURCE = """
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        return torch.tanh(self.proj(x)) * 2
"""


def _module_from(path: Path) -> ModuleType:
    path.write_text(SOURCE)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_identical_code_in_two_files_is_attributed_to_each_file(tmp_path: Path) -> None:
    roberta = _module_from(tmp_path / "modeling_roberta.py")
    xlm = _module_from(tmp_path / "modeling_xlm_roberta.py")
    assert roberta.Block.forward.__code__ == xlm.Block.forward.__code__  # what misled the cache
    x = torch.ones(1, 4)
    first = tl.trace(roberta.Block(), x)
    second = tl.trace(xlm.Block(), x)
    # linear (called in forward), tanh and mul: every op but the input is on a forward line
    assert {Path(op.file).name for op in first.ops[1:]} == {"modeling_roberta.py"}
    assert {Path(op.file).name for op in second.ops[1:]} == {"modeling_xlm_roberta.py"}
    assert [op.line for op in second.ops[1:]] == [12, 12, 12]
