"""Build glue for the one thing ``pyproject.toml`` cannot say: the rooms at the
repository root (``app/``, ``pipeline/``, ``web/``, ``assets/``) install as
sub-packages of one import package, ``duplex``.

setuptools' ``package-dir`` maps ``duplex`` onto the repository root; the
packages are discovered (every folder under those rooms), not listed by hand.
``duplex`` itself is a namespace package: nothing else lands at the top of
site-packages. Everything else about the project is in ``pyproject.toml``.
"""

from setuptools import find_namespace_packages, setup

ROOMS = ("app", "pipeline", "web", "assets")

setup(
    package_dir={"duplex": "."},
    packages=[
        f"duplex.{name}"
        for name in find_namespace_packages(include=[*ROOMS, *(f"{room}.*" for room in ROOMS)])
        if "__pycache__" not in name
    ],
)
