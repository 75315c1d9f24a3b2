"""halo's node side runs on Python 3.9: which files that is, and the checks ruff cannot make.

    python tools/node_py39.py           # exit 1 with one line per problem (make lint runs it)
    python tools/node_py39.py --list    # the files the node side runs

The node side runs ``node/main.py`` and every module it imports, directly or not, with the
packages each import runs: ``nodecode.node_modules``, the list the zipapp packs. Ruff lints
those files as Python 3.9 (``[tool.ruff.per-file-target-version]`` in pyproject.toml): it
flags 3.10 syntax (``match``, parenthesised context managers, ``except*``) and stops
suggesting 3.10 forms there. This script checks that the table covers every one of them, and
looks for what is valid syntax but fails only when it runs on 3.9, which neither ruff nor
mypy (whose oldest target is now 3.10) sees:

- ``isinstance(x, A | B)``, ``issubclass`` likewise (unions of types: 3.10);
- ``X | None`` or ``None | X`` evaluated at run time, outside an annotation (3.10);
- ``zip(..., strict=...)`` (3.10);
- ``dataclass(slots=…, kw_only=…, match_args=…)``, ``field(kw_only=…)`` (3.10);
- ``except TimeoutError`` alone: ``socket.timeout`` is not one before 3.10 (nor asyncio's and
  concurrent.futures' before 3.11), so it catches nothing there;
- a module-level import of what 3.9's standard library lacks (``tomllib``, ``typing.Self``,
  ``itertools.pairwise`` …), or such a name used through its module. An import inside a
  function is how a module keeps a 3.11-only library off the node's path (``config/load.py``
  imports ``tomllib`` where it reads a file, which nodes never do).
"""

from __future__ import annotations

import ast
import fnmatch
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "src"

NEW_MODULES = {"tomllib"}
NEW_NAMES = {  # module -> what 3.9's has not
    "typing": {
        "Concatenate",
        "LiteralString",
        "Never",
        "NotRequired",
        "ParamSpec",
        "Required",
        "Self",
        "TypeAlias",
        "TypeGuard",
        "TypeIs",
        "TypeVarTuple",
        "Unpack",
        "assert_never",
        "assert_type",
        "dataclass_transform",
        "override",
        "reveal_type",
    },
    "itertools": {"pairwise", "batched"},
    "datetime": {"UTC"},
    "enum": {"StrEnum", "ReprEnum", "verify", "member", "nonmember"},
    "contextlib": {"chdir", "aclosing"},
    "dataclasses": {"KW_ONLY"},
    "types": {"UnionType", "NoneType", "EllipsisType", "NotImplementedType"},
}
DATACLASS_310 = {"slots", "kw_only", "match_args"}


def node_modules() -> set[str]:
    """Every module the node side runs (``nodecode.node_modules``: the one list the zipapp
    packs), with the package itself."""
    sys.path.insert(0, str(SRC))
    from halo_cluster.nodecode import node_modules as modules

    return {"halo_cluster", *(f"halo_cluster.{m}" for m in modules())}


def node_files() -> list[Path]:
    files = []
    for module in node_modules():
        base = SRC.joinpath(*module.split("."))
        files.append(base / "__init__.py" if base.is_dir() else base.with_suffix(".py"))
    return sorted(files)


def py39_patterns(pyproject: Path = REPO / "pyproject.toml") -> list[str]:
    table = tomllib.loads(pyproject.read_text())["tool"]["ruff"]["per-file-target-version"]
    return [pattern for pattern, version in table.items() if version == "py39"]


def uncovered(files: list[Path], patterns: list[str]) -> list[str]:
    """The files ruff does not lint as Python 3.9 (paths relative to the repository)."""
    relative = [f.relative_to(REPO).as_posix() for f in files]
    return [f for f in relative if not any(fnmatch.fnmatch(f, p) for p in patterns)]


def findings(source: str, name: str = "<source>") -> list[str]:
    """``name:line: what`` for each use of what Python 3.9 lacks at run time."""
    tree = ast.parse(source, name)
    annotations = {id(n) for n in _annotation_nodes(tree)}
    modules = _imported_modules(tree)
    found = {
        (getattr(node, "lineno", 0), what)
        for node in ast.walk(tree)
        if id(node) not in annotations
        for what in _problems(node, tree, modules)
    }
    return [f"{name}:{line}: {what}" for line, what in sorted(found)]


def _annotation_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    for node in ast.walk(tree):
        hints: list[ast.expr | None] = []
        if isinstance(node, ast.arg):
            hints = [node.annotation]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            hints = [node.returns]
        elif isinstance(node, ast.AnnAssign):
            hints = [node.annotation]
        for hint in hints:
            yield from ast.walk(hint) if hint is not None else ()


def _imported_modules(tree: ast.Module) -> dict[str, str]:
    """Names bound to modules anywhere by ``import m`` / ``import m as n``: name -> module."""
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound[alias.asname or alias.name.split(".")[0]] = alias.name
    return bound


def _problems(node: ast.AST, tree: ast.Module, modules: dict[str, str]) -> Iterator[str]:
    if isinstance(node, ast.Call):
        yield from _call_problems(node)
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        if any(_is_none(side) for side in (node.left, node.right)):
            yield "X | None evaluated at run time is Python 3.10: Optional[X]"
    elif isinstance(node, ast.ExceptHandler) and _catches_timeout_only(node.type):
        yield "except TimeoutError misses socket.timeout before Python 3.10: name it too"
    elif isinstance(node, (ast.Import, ast.ImportFrom)) and node in tree.body:
        yield from _import_problems(node)
    elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        module = modules.get(node.value.id)
        if module is not None and node.attr in NEW_NAMES.get(module, ()):
            yield f"{module}.{node.attr} is not in Python 3.9"


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _is_union(node: ast.AST) -> bool:
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr)


def _call_problems(call: ast.Call) -> Iterator[str]:
    func = call.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
    keywords = {k.arg for k in call.keywords if k.arg}
    unions = len(call.args) > 1 and any(_is_union(n) for n in ast.walk(call.args[1]))
    if name in ("isinstance", "issubclass") and unions:
        yield f"{name}() with A | B is Python 3.10: a tuple (A, B)"
    if name == "zip" and "strict" in keywords:
        yield "zip(strict=...) is Python 3.10"
    if name == "dataclass" and keywords & DATACLASS_310:
        yield f"dataclass({', '.join(sorted(keywords & DATACLASS_310))}=...) is Python 3.10"
    if name == "field" and "kw_only" in keywords:
        yield "field(kw_only=...) is Python 3.10"


def _catches_timeout_only(caught: ast.expr | None) -> bool:
    names = caught.elts if isinstance(caught, ast.Tuple) else [caught] if caught else []
    plain = any(isinstance(n, ast.Name) and n.id == "TimeoutError" for n in names)
    socket_timeout = any(isinstance(n, ast.Attribute) and n.attr == "timeout" for n in names)
    return plain and not socket_timeout


def _import_problems(node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name in NEW_MODULES:
                yield f"module {alias.name} is not in Python 3.9"
        return
    module = node.module or ""
    if module in NEW_MODULES:
        yield f"module {module} is not in Python 3.9"
    for alias in node.names:
        if alias.name in NEW_NAMES.get(module, ()):
            yield f"{module}.{alias.name} is not in Python 3.9"


def problems() -> list[str]:
    files = node_files()
    table = "[tool.ruff.per-file-target-version]"
    out = [
        f"{path}: not linted as Python 3.9 (add it to {table})"
        for path in uncovered(files, py39_patterns())
    ]
    for path in files:
        out += findings(path.read_text(encoding="utf-8"), path.relative_to(REPO).as_posix())
    return out


def main(argv: list[str]) -> int:
    if argv == ["--list"]:
        print("\n".join(f.relative_to(REPO).as_posix() for f in node_files()))
        return 0
    found = problems()
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
