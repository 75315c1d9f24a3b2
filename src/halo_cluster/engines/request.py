"""One ``halo serve`` as a typed value: the config's [serve] with the command line's flags
applied, and the chosen engine's own options read from its table."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from halo_cluster import engine_registry
from halo_cluster.config import Config
from halo_cluster.engines.protocol import ServeRequest, find_engine
from halo_cluster.errors import UsageError
from halo_cluster.netnames import bind_host_problem
from halo_cluster.printable import printable, quoted


def serve_request(
    config: Config,
    *,
    model: str | None = None,
    engine: str | None = None,
    host: str | None = None,
    port: int | None = None,
    tp: int | None = None,
    pp: int | None = None,
    executor: str | None = None,
    nodes: int | None = None,
    reference: str = "auto",
    wait_s: float = 900.0,
    allow_fallback: bool = False,
    insecure: bool = False,
    force: bool = False,
    supervise: bool = True,
    extra: tuple[str, ...] = (),
    held: Mapping[str, float] | None = None,
) -> ServeRequest:
    """The request, every option checked: an engine's table that does not parse, or a flag
    the engine does not take, is one line before anything runs. The engine's command line
    ends with [serve] extra_args, its table's ``args``, then ``extra`` ('halo serve … --
    EXTRA'); an option halo sets itself is refused there, naming halo's own."""
    serve = replace(config.serve, host=host or config.serve.host, port=port or config.serve.port)
    if not supervise:
        serve = replace(serve, supervise=replace(serve.supervise, enabled=False))
    problem = None if serve.host.startswith("-") else bind_host_problem(serve.host)
    if serve.host.startswith("-") or problem is not None:
        why = f" {problem}" if problem else ""
        raise UsageError(
            f"--host {quoted(serve.host)}{why}: give an address to bind, e.g. 127.0.0.1"
        )
    name = engine or serve.engine
    chosen = find_engine(name)
    for section_name, section in serve.sections.items():  # every table, not only this one's
        other = engine_registry.by_section(section_name)
        if other is not None and other != name:
            find_engine(other).options(section, {})
    options = chosen.options(
        serve.section(engine_registry.section_name(name)),
        {"tp": tp, "pp": pp, "executor": executor},
    )
    more = (*serve.extra_args, *getattr(options, "args", ()), *extra)
    refuse_owned(more, chosen.owned, name)
    serve = replace(serve, extra_args=more)
    chosen_model = model or serve.model
    if not chosen_model:
        raise UsageError("no model: pass MODEL or set [serve] model in halo.toml")
    if chosen_model.startswith("-"):  # an engine would read it as one of its options
        raise UsageError(
            f"model {quoted(chosen_model)} reads as an option: give its path as "
            f"./{printable(chosen_model, limit=60)} or its absolute path"
        )
    return ServeRequest(
        engine=name,
        model=chosen_model,
        serve=replace(serve, engine=name),
        options=options,
        wait_s=wait_s,
        allow_fallback=allow_fallback,
        insecure=insecure,
        force=force,
        nodes=nodes,
        reference=reference,
        held=dict(held or {}),
    )


def refuse_owned(args: tuple[str, ...], owned: Mapping[str, str], engine: str) -> None:
    """One line for the first argument in ``args`` the engine reads as an option halo sets
    itself, naming the halo option that sets it. ``owned`` looks an argument up the way
    the engine's parser reads it (``--port 9000`` and ``--port=9000`` alike; for vLLM also
    ``--po``, ``--api_key``, ``--host.x``), and iterates over the options' own spellings."""
    spellings = set(owned)
    for arg in args:
        if not arg.startswith("-") or arg not in owned:
            continue
        flag = arg.split("=", 1)[0]
        said = "is set by halo" if flag in spellings else "reads as an option halo sets"
        raise UsageError(
            f"{quoted(flag)} {said} for {engine}: use {owned[arg]} instead "
            "(extra options for the engine are the others)"
        )
