"""Tiny PyTorch modules for the .pt2 tests (issue 17), and a helper that rewrites a .pt2."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import torch
from torch import nn


class TwoHeads(nn.Module):
    """A small CNN with two outputs (class logits and a box), named like torchvision's."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()),
            nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU()))
        self.classifier = nn.Linear(16, 4)
        self.box = nn.Linear(16, 4)

    def forward(self, x):
        pooled = self.features(x).mean((2, 3))
        return self.classifier(pooled), torch.sigmoid(self.box(pooled))


class DataDependent(nn.Module):
    """A forward that branches on a tensor's value: torch.export cannot capture it."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        y = self.conv(x)
        if y.sum() > 0:
            return y
        return -y


class WithCond(nn.Module):
    """torch.cond: exportable, but a control-flow op edgeopt does not convert."""

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda t: t + 1, lambda t: t - 1, (x,))


def save_program(module: nn.Module, shape: tuple[int, ...], path: Path) -> Path:
    torch.manual_seed(0)
    module.eval()
    torch.export.save(torch.export.export(module, (torch.randn(*shape),)), path)
    return path


def heads_files(folder: Path) -> tuple[Path, Path]:
    """TwoHeads saved as heads.pt2 and 40 calibration samples for it (calib.npz), in folder."""
    pt2 = save_program(TwoHeads(), (1, 3, 16, 16), folder / "heads.pt2")
    calib = folder / "calib.npz"
    rng = np.random.default_rng(0)
    np.savez(calib, x=rng.standard_normal((40, 3, 16, 16)).astype(np.float32))
    return pt2, calib


def rewrite_pt2(src: Path, dst: Path, edit=None, add: dict[str, bytes] | None = None,
                replace: dict[str, bytes] | None = None) -> Path:
    """Copy a .pt2 with its program JSON edited by `edit(program)`, members added or
    replaced (names below the archive's root folder)."""
    add, replace = add or {}, replace or {}
    with zipfile.ZipFile(src) as archive:
        root = archive.namelist()[0].split("/", 1)[0] + "/"
        with zipfile.ZipFile(dst, "w") as out:
            for info in archive.infolist():
                inner = info.filename[len(root):]
                data = archive.read(info.filename)
                if inner == "models/model.json" and edit is not None:
                    program = json.loads(data)
                    edit(program)
                    data = json.dumps(program).encode()
                out.writestr(info.filename, replace.get(inner, data))
            for name, data in add.items():
                out.writestr(root + name, data)
    return dst
