"""The engines halo knows: a name, the ``[serve.<section>]`` table its options live in, and
the module that implements ``engines.protocol.Engine``. Adding an engine is one module and
one line here. This table imports no engine (``engines.protocol.find_engine`` loads one when
it is used), so that the CLI's choices and config validation read it without loading any,
and nodes (whose config names the engines) carry only it."""

from __future__ import annotations

from halo_cluster.errors import UsageError

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


def module_of(name: str) -> str:
    """The module of the engine called ``name``; an unknown name is one line listing the
    known ones."""
    module = ENGINES.get(name)
    if module is None:
        raise UsageError(f"unknown engine {name!r}; halo knows {', '.join(ENGINES)}")
    return module


def register(name: str, module: str) -> None:
    """Add an engine at run time (a test's, or a plugin's): ``module`` defines ``ENGINE``."""
    ENGINES[name] = module


def unregister(name: str) -> None:
    ENGINES.pop(name, None)
