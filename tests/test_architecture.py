"""The house: no import cycles, each room imports only what it may, modules stay small.

Read from the source (every ``import`` of a ``duplex`` module, lazy and
``TYPE_CHECKING`` ones included), so a cycle or a wrong-way dependency fails
here before it can confuse anyone.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROOMS = ("app", "pipeline")
MAX_LINES = 400
LONG_REASON = "Why this module is long:"

# Who may import whom (prefixes of ``duplex.*`` module names).
MAY_IMPORT = {
    "duplex.pipeline": ("duplex.pipeline",),
    "duplex.app.core": ("duplex.app.core", "duplex.pipeline"),
    "duplex.app.edge": ("duplex.app.core", "duplex.app.edge", "duplex.pipeline"),
    # Clients speak the wire: they may use the protocol's constants and the
    # pipeline (to make speech), never the server's insides.
    "duplex.app.clients": ("duplex.app.clients", "duplex.app.core.protocol", "duplex.pipeline"),
    "duplex.app.cli": ("duplex.app.cli", "duplex.app.core", "duplex.app.edge", "duplex.app.clients", "duplex.pipeline"),
    "duplex.app": ("duplex.app.cli",),  # __main__: the command
}


def modules() -> dict[str, Path]:
    found = {}
    for room in ROOMS:
        for path in sorted((ROOT / room).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(("duplex", *parts))
            found[name.removesuffix(".__init__")] = path
    return found


def imports(path: Path, known: set[str]) -> set[str]:
    """The ``duplex`` modules ``path`` imports (a ``from m import x`` names ``m.x`` if that is a module)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("duplex.")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("duplex"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                out.add(sub if sub in known else node.module)
    return out & known


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports(path, set(mods)) - {name} for name, path in mods.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in g:
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_has_no_cycle():
    g = graph()
    assert len(g) > 50, "the walk found the package"
    assert cycles(g) == []


def test_a_cycle_would_be_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_each_room_imports_only_what_it_may():
    wrong = []
    for module, deps in graph().items():
        room = next(r for r in sorted(MAY_IMPORT, key=len, reverse=True) if module == r or module.startswith(r + "."))
        allowed = MAY_IMPORT[room]
        wrong += [f"{module} -> {d}" for d in deps if not d.startswith(allowed)]
    assert wrong == []


def test_modules_stay_small_or_say_why():
    long = []
    lab = {f"lab.{p.stem}": p for p in sorted((ROOT / "scripts" / "lab").glob("*.py"))}
    for name, path in {**modules(), **lab}.items():
        text = path.read_text()
        if text.count("\n") > MAX_LINES and LONG_REASON not in (ast.get_docstring(ast.parse(text)) or ""):
            long.append(f"{name}: {text.count(chr(10))} lines")
    assert long == []


def test_the_product_never_imports_the_lab():
    """The lab (``scripts/lab``: voices, servers, tables) serves the benchmarks and the
    tests; the wheel does not carry it, so nothing in it may import it."""
    wrong = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                found = [node.module or ""]
            else:
                continue
            wrong += [f"{name} -> {m}" for m in found if m.split(".")[0] in ("lab", "scripts", "tests")]
    assert wrong == []
    assert not (ROOT / "app" / "harness").exists(), "the lab lives in scripts/lab"


def test_scripts_use_the_package_not_the_tests():
    for path in (ROOT / "scripts").rglob("*.py"):
        tree = ast.parse(path.read_text())
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not [m for m in names if m == "tests" or m.startswith("tests.")], path.name
        assert "sys.path.insert" not in path.read_text(), path.name


# Sub-rooms: a family of parts that only its package's front may show the rest of the code.
SUB_ROOMS = ("duplex.app.core.listening",)


def test_a_sub_room_is_entered_only_by_its_front():
    wrong = []
    for module, deps in graph().items():
        for room in SUB_ROOMS:
            if module == room or module.startswith(room + "."):
                continue
            wrong += [f"{module} -> {d}" for d in deps if d.startswith(room + ".")]
    assert wrong == []


def test_the_sub_rooms_are_there_and_used_through_their_front():
    g = graph()
    for room in SUB_ROOMS:
        assert any(m.startswith(room + ".") for m in g), f"{room} has parts"
        assert any(room in deps for m, deps in g.items() if not m.startswith(room)), f"{room} is entered"


# The core's door: the modules the edge may import of it. The session is the one way in
# (what arrived, what was played; back come events, actions and verdicts); the rest of
# the core (replies, turn taking, intake, transcripts, pacing, the state tables) is
# reached only through it.
CORE_DOOR = (
    "duplex.app.core.session",
    "duplex.app.core.actions",
    "duplex.app.core.events",
    "duplex.app.core.protocol",
    "duplex.app.core.wire",
    "duplex.app.core.settings",
    "duplex.app.core.limits",
    "duplex.app.core.listening",  # its front only (the sub-room test keeps it so)
)
SESSION_PARTS = {"replies", "turn_taking", "intake", "clock", "ctx", "conversation"}
NO_IO = {"asyncio", "socket", "websockets", "httpx", "threading", "subprocess", "concurrent", "time", "selectors"}


def test_the_edge_enters_the_core_by_its_door_and_goes_no_further():
    wrong = []
    for module, deps in graph().items():
        if module.startswith("duplex.app.edge"):
            core = [d for d in deps if d.startswith("duplex.app.core")]
            wrong += [f"{module} -> {d}" for d in core if d not in CORE_DOOR and not d.startswith(CORE_DOOR[-1])]
    for path in sorted((ROOT / "app" / "edge").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in SESSION_PARTS:
                base = node.value
                name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
                if name == "session":  # session.replies, self.session.clock, ...
                    wrong.append(f"{path.name}:{node.lineno}: session.{node.attr}")
    assert wrong == []


def test_the_core_does_no_io():
    wrong = []
    for name, path in modules().items():
        if not name.startswith("duplex.app.core"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                found = [node.module or ""]
            else:
                continue
            wrong += [f"{name} -> {m}" for m in found if m.split(".")[0] in NO_IO]
    assert wrong == []
