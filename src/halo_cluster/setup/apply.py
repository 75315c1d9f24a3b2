"""Applying the setup steps: pending steps in order, each verified afterwards by re-reading the
node and deciding the steps again; the first failure stops the run with the command's own error."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from dataclasses import dataclass

from halo_cluster.atomic import atomic_write
from halo_cluster.errors import SetupError
from halo_cluster.facts.inventory import collect_inventory
from halo_cluster.facts.root import Root
from halo_cluster.jsonout import JsonObject
from halo_cluster.runner.result import Runner
from halo_cluster.setup.step import Action, Step
from halo_cluster.setup.steps import SetupOptions, setup_steps

APPLY_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Outcome:
    step: str
    changed: bool


def current_steps(root_path: str, opts: SetupOptions) -> list[Step]:
    root = Root(root_path)
    return setup_steps(root, collect_inventory(root_path), opts)


def apply_steps(
    root_path: str,
    opts: SetupOptions,
    runner: Runner,
    only: set[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Outcome]:
    outcomes = []
    for step in current_steps(root_path, opts):
        if only is not None and step.id not in only:
            continue
        if step.done or not step.actions:
            outcomes.append(Outcome(step.id, False))
            continue
        if progress:
            progress(f"{step.id}: {step.title}")
        for action in step.actions:
            _run(root_path, action, runner)
        after = next(s for s in current_steps(root_path, opts) if s.id == step.id)
        if not after.done:
            raise SetupError(
                f"step {step.id} ran but is still not done ({after.note or after.check})"
            )
        outcomes.append(Outcome(step.id, True))
    return outcomes


def _run(root_path: str, action: Action, runner: Runner) -> None:
    if action.path:
        write_atomically(os.path.join(root_path, action.path), action.content)
        return
    result = runner.run(list(action.argv), timeout=APPLY_TIMEOUT_S)
    if not result.ok:
        raise SetupError(f"{action.display()} failed: {result.error_text()}")


def write_atomically(path: str, content: str) -> None:
    """``content`` in place of ``path``, renamed over it; a file mounted over its place (a
    container's or a lab node's /etc/hosts) cannot be replaced, so it is rewritten in place
    instead (the text is small and written in one call)."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    mode = os.stat(path).st_mode & 0o777 if os.path.exists(path) else 0o644
    try:
        atomic_write(path, content, mode=mode, prefix=".halo-")
    except OSError as err:
        if err.errno != errno.EBUSY:
            raise
        with open(path, "r+", encoding="utf-8") as mounted:
            mounted.write(content)
            mounted.truncate()
            mounted.flush()
            os.fsync(mounted.fileno())


def setup_here(
    root: str,
    opts: SetupOptions,
    only: set[str] | None,
    do_apply: bool,
    confirm: Callable[[list[str]], None] | None = None,
    progress: Callable[[str], None] | None = None,
) -> JsonObject:
    """This machine's setup steps, applied when asked: ``{steps, reboot_needed, applied}``.
    ``confirm`` sees the pending step ids first (and raises to stop). Applying needs root
    and the real root directory (UsageError otherwise)."""
    from halo_cluster.errors import UsageError
    from halo_cluster.runner.local import LocalRunner

    steps = [s for s in current_steps(root, opts) if only is None or s.id in only]
    applied: list[str] = []
    pending = [s for s in steps if not s.done and s.actions]
    if do_apply and pending:
        if root != "/" or os.geteuid() != 0:
            raise UsageError(
                "--apply changes this machine: run it as root (sudo) and without --root"
            )
        if confirm is not None:
            confirm([s.id for s in pending])
        outcomes = apply_steps(root, opts, LocalRunner(), only, progress)
        applied = [o.step for o in outcomes if o.changed]
        steps = [s for s in current_steps(root, opts) if only is None or s.id in only]
    return {
        "steps": [s.to_dict() for s in steps],
        "reboot_needed": any(s.reboot and s.id in applied for s in steps),
        "applied": applied,
    }
