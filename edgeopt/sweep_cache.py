"""What a sweep ships and keeps: input payloads, candidate keys, the results folder.

A candidate's key is the SHA-256 of the bytes of its model and data files (a folder: every
file in it, by relative path) and of its settings, so a renamed copy of the same model hits
the cache and a changed calibration file does not. The results folder holds one
`points/KEY.json` per finished candidate (failed ones too, with their error) and, for a
built one, its bundle in `bundles/KEY/`; the bundle is written first, the point last and
atomically (edgeopt.atomic), so a point on disk always means a finished candidate, and a
killed sweep resumes from the points it finds.

    >>> store = Store(Path("sweep-out"))                                 # doctest: +SKIP
    >>> store.point(key) is None                                         # doctest: +SKIP
    True
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from edgeopt import __version__
from edgeopt.atomic import write_file_atomic
from edgeopt.bundle import write_bundle
from edgeopt.errors import ConfigError, OutputError
from edgeopt.inputs import CAPS, read_bytes

POINTS = "points"
MARKER = ".edgeopt-sweep"  # what makes a folder a sweep's results folder
BUNDLES = "bundles"
MAX_PAYLOAD_FILES = 100_000


@dataclass(frozen=True)
class Payload:
    """A model or data input as bytes: a file (one entry) or a folder (one per file)."""

    name: str  # the file or folder name the build sees
    files: tuple[tuple[str, bytes], ...]  # (path relative to the folder, or "", content)
    sha256: str

    def materialize(self, folder: Path) -> Path:
        """Write the payload under `folder`; returns the path a build reads."""
        target = folder / self.name
        for relative, content in self.files:
            path = target / relative if relative else target
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
        return target


def _digest(entries: list[tuple[str, bytes]]) -> str:
    h = hashlib.sha256()
    for relative, content in entries:
        h.update(f"{relative}\0{len(content)}\0".encode())
        h.update(content)
    return h.hexdigest()


def read_payload(path: str | os.PathLike) -> Payload:
    """A file's or a folder's bytes (regular files only; links are not followed)."""
    source = Path(path)
    if source.is_dir() and not source.is_symlink():
        entries = sorted((str(p.relative_to(source)), p) for p in source.rglob("*")
                         if p.is_file() and not p.is_symlink())
        if len(entries) > MAX_PAYLOAD_FILES:
            raise ConfigError(f"{source} holds more than {MAX_PAYLOAD_FILES} files")
        files = [(rel, read_bytes(p, "sweep input", ConfigError, CAPS["numpy"]))
                 for rel, p in entries]
    else:
        files = [("", read_bytes(source, "sweep input", ConfigError, CAPS["numpy"]))]
    return Payload(source.name, tuple(files), _digest(files))


def candidate_key(settings: dict, payload_hashes: dict[str, str]) -> str:
    """The cache key: the inputs' content hashes and every setting (paths left out)."""
    record = {"settings": settings, "inputs": payload_hashes, "edgeopt": __version__}
    text = json.dumps(record, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


class Store:
    """The results folder of one sweep: points and bundles by candidate key."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def prepare(self) -> None:
        """Make the folder; one that holds anything but a sweep's results is refused."""
        if self.folder.is_symlink() or (self.folder.exists() and not self.folder.is_dir()):
            raise OutputError(f"sweep output {self.folder} exists and is not a folder")
        if self.folder.is_dir() and any(self.folder.iterdir()) and \
                not (self.folder / MARKER).is_file():
            raise OutputError(f"sweep output {self.folder} holds files that are not a sweep's "
                              "results; nothing was written (choose a new folder)")
        try:
            (self.folder / POINTS).mkdir(parents=True, exist_ok=True)
            (self.folder / BUNDLES).mkdir(exist_ok=True)
        except OSError as exc:
            raise OutputError(f"cannot create {self.folder}: {exc.strerror or exc}") from None
        if not (self.folder / MARKER).is_file():
            write_file_atomic(self.folder / MARKER, "edgeopt sweep results\n")

    def point(self, key: str) -> dict | None:
        """The finished point of `key`, or None (also for a file that does not parse)."""
        path = self.folder / POINTS / f"{key}.json"
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def bundle(self, key: str) -> Path:
        return self.folder / BUNDLES / key

    def save(self, key: str, point: dict, files: dict[str, bytes] | None) -> None:
        """The bundle (if any), then the point: the point's file marks the end."""
        if files:
            write_bundle(self.bundle(key), files)
        write_file_atomic(self.folder / POINTS / f"{key}.json",
                          json.dumps(point, indent=2, sort_keys=True, default=str) + "\n")

    def write(self, name: str, content: str | bytes) -> Path:
        return write_file_atomic(self.folder / name, content)
