"""The one exception tree of halo.

    HaloError                 anything halo reports to the user as a one-line message
    ├── ParseError            file or tool output halo cannot understand (path + text)
    │   └── WireError         a node command's answer that is not what it prints (a ValueError)
    ├── UsageError            the user asked for something impossible
    │   ├── ConfigError       a bad halo.toml: file, field, line
    │   ├── FabricError       cabling that cannot be a routed fabric (which cable or node)
    │   ├── StateError        a state file (cluster, supervisor spec) not written by this halo
    │   ├── ListenError       the exporter cannot listen where it was told
    │   └── RequestRefused    a request the gateway's key gate does not take (its HTTP status)
    ├── TransportError        a requested transport the node cannot provide, or not the one used
    │   └── NoTransportEvidence   nothing in the evidence says which transport ran
    ├── OperationError        an operation on the nodes failed (the message says where)
    │   ├── BenchError        a measurement could not be made; carries the rows measured before
    │   ├── NodeLost          a node stopped answering
    │   ├── DriverError       the bench driver on the head could not go on
    │   ├── LifecycleError    halo up / down / serve could not be done
    │   ├── NodeCallError     a node-side command failed or answered what halo cannot read
    │   ├── SetupError        a setup step failed, or its verification did
    │   ├── RayNodesError     the local Ray node table cannot be read, or nodes did not register
    │   ├── ModelError        a model cannot be read, hashed, stored or synced (names the file)
    ├── LabError              a lab operation could not be done
    └── OutsideRoot           a path whose links climb out of a filesystem root (never escapes)

    BenchInterrupted (a KeyboardInterrupt, not a HaloError): Ctrl-C during a benchmark,
    with the rows measured before it.

The CLI catches HaloError, prints ``str(err)`` on one line and exits with
``exit_code(err)``, looked up in EXIT_CODES by the nearest class; anything else is a bug
and keeps its traceback. tests/test_errors.py checks this drawing against the classes.
"""

from __future__ import annotations

from typing import Any


class _ExitCode:
    """``exit_code`` on an error class or instance: looked up in EXIT_CODES, not stored."""

    def __get__(self, instance: object, owner: type[BaseException]) -> int:
        return class_exit_code(owner)


class HaloError(Exception):
    """Base class: a problem halo explains in one line."""

    exit_code = _ExitCode()


class ParseError(HaloError):
    """Content halo cannot parse. ``path`` is filled in by the reader that knows it."""

    def __init__(self, reason: str, text: str = "", path: str | None = None) -> None:
        self.reason = reason
        self.text = text
        self.path = path
        super().__init__(self.describe())

    def describe(self) -> str:
        shown = self.text if len(self.text) <= 120 else self.text[:117] + "..."
        where = f"{self.path}: " if self.path else ""
        return f"{where}{self.reason} (content {shown!r})"

    def at(self, path: str) -> ParseError:
        """The same error, located at ``path``."""
        return ParseError(self.reason, self.text, path)


class WireError(ParseError, ValueError):
    """A node command's answer that is not what the command prints (wire/answers.py):
    one line, the command, where in the answer, what was wrong and what came. A ValueError
    too, for the code that reads answers with ``except ValueError``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)

    def describe(self) -> str:
        return self.reason  # the reason shows what came, escaped


class UsageError(HaloError):
    """Bad arguments or a bad root directory."""


class ConfigError(UsageError):
    """A bad halo.toml: names the file, the field and (when it can) the line."""


class FabricError(UsageError):
    """Nodes' cabling that cannot be a routed fabric (a one-sided cable, a node out of
    reach, two nodes of one identity), or a node's part of one that is not what halo
    wrote; one line naming the cable or node."""


class StateError(UsageError):
    """A state file (the cluster's, a supervisor's spec) is not one this halo wrote (another
    schema, or garbage)."""


class ListenError(UsageError):
    """The address cannot be listened on (busy port, unknown host, no permission)."""


class RequestRefused(UsageError):
    """A request the gateway's key gate does not take: the status, message and code of its
    answer (OpenAI's error shape)."""

    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


class TransportError(HaloError):
    """The requested transport cannot work on this node, or another one ran."""


class NoTransportEvidence(TransportError):
    """The evidence (a log, counters) names no transport at all."""


class OperationError(HaloError):
    """An operation on the nodes failed; the message names the node or the step."""


class BenchError(OperationError):
    """A measurement could not be made; the message names the node and the path.
    ``partial`` holds the rows measured before it stopped (empty when none), which the CLI
    saves as a result marked incomplete."""

    def __init__(self, message: str, partial: list[Any] | None = None) -> None:
        super().__init__(message)
        self.partial: list[Any] = list(partial or [])


class NodeLost(OperationError):
    """A node stopped answering; the message names it."""


class DriverError(OperationError):
    """The bench driver's run could not go on; the message says which node or step."""


class LifecycleError(OperationError):
    """The cluster could not be brought to the wanted state; the message names what failed."""


class SetupError(OperationError):
    """A setup step failed; the message carries the command's own error."""


class RayNodesError(OperationError):
    """The local Ray cluster's node table cannot be read, or nodes did not register."""


class ModelError(OperationError):
    """A model's files cannot be read, hashed, stored or sent: one line naming the file or
    the node, and what to do."""


class NodeCallError(OperationError):
    """A node-side command (``NodeClient.call_json``) failed or sent no JSON: one line with
    the node's name, the reason and the first characters it sent, escaped."""


class LabError(HaloError):
    """A lab operation that could not be done (the message says what to do)."""


class OutsideRoot(HaloError):
    """A path under a filesystem root whose links climb above it (or loop): nothing there
    is read. Raised and caught inside facts/root.py."""

    def __init__(self, rel: str, reason: str = "a link climbs above the root") -> None:
        super().__init__(rel)
        self.reason = reason


class BenchInterrupted(KeyboardInterrupt):
    """Ctrl-C during a benchmark; ``partial`` holds the rows measured before it."""

    def __init__(self, partial: list[Any]) -> None:
        super().__init__()
        self.partial: list[Any] = list(partial)


# The one table of exit codes: the nearest class of an exception in its MRO decides.
EXIT_CODES: dict[type[BaseException], int] = {
    HaloError: 1,
    UsageError: 2,  # also click's own usage errors
    OperationError: 1,  # a remote or local operation failed
    TransportError: 1,  # another transport ran than the one asked for
    NoTransportEvidence: 3,
    KeyboardInterrupt: 130,  # interrupted (Ctrl-C), also click.Abort
}


def class_exit_code(kind: type[BaseException]) -> int:
    """The exit code of errors of class ``kind``: its nearest class in EXIT_CODES (else 1)."""
    for cls in kind.__mro__:
        if cls in EXIT_CODES:
            return EXIT_CODES[cls]
    return 1


def exit_code(err: BaseException) -> int:
    """The exit code of ``err`` (see EXIT_CODES)."""
    return class_exit_code(type(err))
