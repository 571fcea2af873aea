"""The test suite by part: every test module is in exactly one group of
``tests/conftest.py``'s table, the table names only modules that exist, and each group
is a registered marker that its tests carry (so ``pytest -m core`` runs the core's)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import GROUPS, TESTS, module_name


def modules_on_disk() -> set[str]:
    """Every test module: tests/test_*.py and those of the test packages under it
    (tests/conformance/test_*.py)."""
    files = [*TESTS.glob("test_*.py"), *TESTS.glob("*/test_*.py")]
    return {
        name for f in files if (f.parent == TESTS or (f.parent / "__init__.py").exists()) and (name := module_name(f))
    }


def test_the_groups_are_the_seven_parts():
    assert set(GROUPS) == {"core", "backends", "server", "hardening", "clients", "conformance", "packaging"}


def test_every_test_module_is_in_a_group():
    listed = {m for modules in GROUPS.values() for m in modules}
    assert sorted(modules_on_disk() - listed) == [], "add these to GROUPS in tests/conftest.py"


def test_no_test_module_is_in_two_groups():
    counts = Counter(m for modules in GROUPS.values() for m in modules)
    twice = {m: [g for g, ms in GROUPS.items() if m in ms] for m, n in counts.items() if n > 1}
    assert twice == {}


def test_the_table_names_only_modules_that_exist():
    listed = {m for modules in GROUPS.values() for m in modules}
    assert sorted(listed - modules_on_disk()) == [], "renamed or removed: update GROUPS in tests/conftest.py"


def test_the_conformance_suite_is_found_in_its_package():
    assert "conformance/test_conformance" in modules_on_disk()
    assert module_name(TESTS / "conformance" / "test_conformance.py") == "conformance/test_conformance"
    assert module_name(TESTS.parent / "scripts" / "check.py") is None, "outside tests/: no group"


def test_every_group_is_a_registered_marker(pytestconfig: pytest.Config):
    registered = {line.split(":", 1)[0].strip() for line in pytestconfig.getini("markers")}
    assert set(GROUPS) <= registered


def test_a_collected_test_carries_its_group_marker(request: pytest.FixtureRequest):
    assert request.node.get_closest_marker("packaging") is not None
    others = [g for g in GROUPS if g != "packaging" and request.node.get_closest_marker(g) is not None]
    assert others == []


def test_module_names_are_paths_without_the_suffix(tmp_path: Path):
    assert module_name(TESTS / "test_session.py") == "test_session"
    assert module_name(tmp_path / "test_session.py") is None
