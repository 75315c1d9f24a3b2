"""The engines halo knows: a name, the ``[serve.<section>]`` table its options live in, and
the module that implements ``engines.protocol.Engine``. Adding an engine is one module and
one line here. The implementation is imported only when it is used, so that the CLI's
choices and config validation read this table without loading any engine."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from halo_cluster.errors import UsageError

if TYPE_CHECKING:
    from halo_cluster.engines.protocol import Engine

# name -> the module whose ``ENGINE`` implements it
ENGINES: dict[str, str] = {
    "vllm": "halo_cluster.engines.vllm",
    "llama.cpp": "halo_cluster.engines.llama_cpp",
}
DEFAULT = "vllm"


def names() -> tuple[str, ...]:
    return tuple(ENGINES)


def section_name(name: str) -> str:
    """The TOML key of an engine's table under [serve]: ``llama.cpp`` -> ``llama_cpp``."""
    return name.replace(".", "_").replace("-", "_")


def by_section(section: str) -> str | None:
    """The engine whose table is ``[serve.<section>]`` (None when no engine has it)."""
    return next((n for n in ENGINES if section_name(n) == section), None)


def engine(name: str) -> Engine:
    """The engine called ``name``; an unknown name is one line listing the known ones."""
    module = ENGINES.get(name)
    if module is None:
        raise UsageError(f"unknown engine {name!r}; halo knows {', '.join(ENGINES)}")
    found: Engine = importlib.import_module(module).ENGINE
    return found


def register(name: str, module: str) -> None:
    """Add an engine at run time (a test's, or a plugin's): ``module`` defines ``ENGINE``."""
    ENGINES[name] = module


def unregister(name: str) -> None:
    ENGINES.pop(name, None)
