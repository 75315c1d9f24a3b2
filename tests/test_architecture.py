"""The architecture is enforced, not just drawn: lint-imports (the contracts in
pyproject.toml, run by ``make lint``) fails on an upward import, and the diagram in
docs/architecture.md is the one generated from those contracts."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))
import arch_diagram  # noqa: E402

LINT = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def _lint(copy: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(copy / "src")}
    return subprocess.run(
        [sys.executable, "-c", LINT, "--no-cache"],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """The package and its contracts, copied where the test may break them."""
    shutil.copytree(
        REPO / "src" / "halo_cluster",
        tmp_path / "src" / "halo_cluster",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_lint_imports_fails_on_an_upward_import(copy: Path) -> None:
    kept = _lint(copy)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert "0 broken" in kept.stdout

    parsers = copy / "src" / "halo_cluster" / "facts" / "parsers.py"
    parsers.write_text(parsers.read_text() + "\nfrom halo_cluster.cli import main  # upward\n")
    broken = _lint(copy)
    assert broken.returncode != 0
    assert "Layers only point down BROKEN" in broken.stdout
    assert "halo_cluster.facts.parsers -> halo_cluster.cli" in broken.stdout


def test_lint_imports_fails_when_a_pure_module_does_io(copy: Path) -> None:
    rates = copy / "src" / "halo_cluster" / "monitor" / "rates.py"
    rates.write_text(rates.read_text() + "\nimport subprocess  # I/O in a pure module\n")
    broken = _lint(copy)
    assert broken.returncode != 0
    assert "Pure modules import nothing that does I/O BROKEN" in broken.stdout


def test_lint_imports_fails_when_an_engine_reaches_into_another(copy: Path) -> None:
    llama = copy / "src" / "halo_cluster" / "engines" / "llama_cpp.py"
    llama.write_text(llama.read_text() + "\nfrom halo_cluster.engines import vllm  # noqa\n")
    broken = _lint(copy)
    assert broken.returncode != 0
    assert "No engine reaches into another BROKEN" in broken.stdout


def test_lint_imports_fails_when_a_room_crosses_its_walls(copy: Path) -> None:
    """The rooms' own rules: the node side reaches none of the controller's rooms, the
    supervisor's installer and model sync stand apart, a witness does no I/O."""
    pkg = copy / "src" / "halo_cluster"
    plants = {
        pkg / "node" / "models.py": "from halo_cluster.models import sync  # noqa\n",
        pkg / "supervise" / "service.py": "from halo_cluster.models import sync  # noqa\n",
        pkg / "witness" / "tokens.py": "import subprocess  # noqa\n",
    }
    for path, line in plants.items():
        path.write_text(path.read_text() + "\n" + line)
    broken = _lint(copy)
    assert broken.returncode != 0
    assert "Node side: standard library only" in broken.stdout
    assert "halo_cluster.node.models -> halo_cluster.models.sync" in broken.stdout
    assert "halo_cluster.supervise.service -> halo_cluster.models.sync" in broken.stdout
    assert "halo_cluster.witness.tokens -> subprocess" in broken.stdout


SAYS_PURE = re.compile(r"\bpure\b(?! parsers| part)")


def test_every_module_that_says_pure_is_in_the_pure_contract() -> None:
    """A module's docstring that calls it pure is a promise the contract keeps (a package's
    face describes its parts, so it is not read)."""
    import ast

    pure = arch_diagram.contracts()["pure"]["source_modules"]
    src = REPO / "src"
    unkept = []
    for path in sorted((src / "halo_cluster").rglob("*.py")):
        if path.name == "__init__.py":
            continue
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        if not SAYS_PURE.search(" ".join(doc.split())):
            continue
        module = ".".join(path.relative_to(src).with_suffix("").parts)
        if not any(module == p or module.startswith(p + ".") for p in pure):
            unkept.append(module)
    assert unkept == []


def _cycles(graph: object, modules: set[str]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in graph.find_modules_directly_imported_by(module):  # type: ignore[attr-defined]
            if other not in modules:
                continue
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while True:
                top = stack.pop()
                group.append(top)
                if top == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(modules):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycle_in_src() -> None:
    """No module imports itself through others (imports for the type checker only aside:
    they do not run)."""
    import grimp

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    graph = grimp.build_graph("halo_cluster", exclude_type_checking_imports=True, cache_dir=None)
    assert _cycles(graph, set(graph.modules)) == []


def test_every_file_the_architecture_names_exists() -> None:
    """docs/architecture.md and docs/flow.md name modules by path (`serving/bringup.py`,
    `wire/`): each one exists, in the package, the tests or the tools, so a rename cannot
    leave it behind."""
    text = "".join(
        (REPO / "docs" / name).read_text(encoding="utf-8")
        for name in ("architecture.md", "flow.md")
    )
    package = REPO / "src" / "halo_cluster"
    paths = set(re.findall(r"`((?:[a-z_0-9]+/)+(?:[a-z_0-9]+\.py)?)`", text))
    missing = sorted(p for p in paths if not any((d / p).exists() for d in (package, REPO)))
    # a bare file name is named beside its package in the prose: it exists somewhere in it
    names = set(re.findall(r"`([a-z_0-9]+\.py)`", text))
    missing += sorted(n for n in names if not any(package.rglob(n)))
    assert paths and names and missing == []


def test_the_diagram_is_generated_from_the_contracts() -> None:
    assert arch_diagram.documented() == arch_diagram.generated()


# One concept per file, named for what it is (docs/architecture.md, "One concept, one name"):
# size is a symptom, not the rule. This is only a backstop for a module that grew past any
# single concept.
BACKSTOP_LINES = 600


def test_no_module_is_over_the_600_line_backstop() -> None:
    package = REPO / "src" / "halo_cluster"
    long = {
        str(path.relative_to(package)): count
        for path in package.rglob("*.py")
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > BACKSTOP_LINES
    }
    assert long == {}, long


TERMINAL = {"cli/setup.py", "cli/lab.py"}  # hand the user's terminal to the program
SRC = REPO / "src" / "halo_cluster"


def test_processes_start_only_through_the_runner() -> None:
    """subprocess.run/Popen/call/check_output appear only in runner/local.py (LocalRunner,
    which every other runner ends in) and the two commands that give the program the
    terminal."""
    calls = re.compile(r"\bsubprocess\.(run|Popen|call|check_call|check_output)\(")
    found = {
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if calls.search(path.read_text(encoding="utf-8"))
    }
    assert found == {"runner/local.py"} | TERMINAL


# Where an engine's name may stand as a string outside engines/ and the registry, and why.
ENGINE_NAMES_ALLOWED = {
    "checks/cluster.py": "vllm the Python package, whose version must match on every node",
    "facts/inventory.py": "vllm the Python package, whose version is read",
    "config/model.py": "the [serve] keys of before the engines' tables, mapped to those tables",
    "wire/recheck.py": "the kinds of log a witness reads again after a restart",
    "cli/demo.py": "the demo shows each engine by name",
    "cli/demo_lab.py": "the demo shows each engine by name",
    "cli/demo_mesh.py": "the demo shows each engine by name",
    "lab/files.py": "the lab's config names the engines it was given",
    "lab/profile.py": "the lab measures each engine it runs",
}


def test_no_engine_is_named_outside_the_engines() -> None:
    """Code that decides by an engine's name belongs to that engine: everywhere else an
    engine is whatever the registry holds (docstrings and help texts may name them)."""
    import ast

    sys.path.insert(0, str(REPO / "src"))
    from halo_cluster import engine_registry

    names = {*engine_registry.names(), *map(engine_registry.section_name, engine_registry.names())}
    package = REPO / "src" / "halo_cluster"
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if (rel.startswith("engines/") and rel not in ENGINES_SEAM) or rel == "engine_registry.py":
            continue
        if rel in ENGINE_NAMES_ALLOWED:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        found += [
            f"{rel}:{node.lineno} {node.value!r}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and node.value in names and id(node) not in docs
        ]
    assert found == []


# the engines' seam: modules in engines/ that every engine shares, so they name none
ENGINES_SEAM = {
    "engines/protocol.py",
    "engines/layout.py",
    "engines/process.py",
    "engines/scripts.py",
    "engines/request.py",
}
