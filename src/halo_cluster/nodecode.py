"""halo's node-side code, sent to nodes that have no halo installed (agentless, like Ansible).

The code is a zipapp of what the node side runs: ``node/main.py`` and every module of this
package it imports, directly or not (``node_modules``, read from the sources' own imports:
the one list the zipapp, the Python 3.9 check and docs/architecture.md read). It is built
the same way from the same files every time, so its sha256
*is* the version: the controller and the nodes cannot disagree. A node runs it as
``python3 -c BOOT HASH COMMAND…`` (through its ``exec_prefix``): BOOT checks the Python
version, then that the cache directory is this user's and not writable by others (else it
refuses, ``UNSAFE``, naming the path and the fix), then the cached file
``~/.cache/halo/node-HASH.pyz`` (0600, read without following links, regular files only, at
most ``MAX_CODE`` bytes) against HASH, and only then imports from it. When the file is
missing or does not match (a corrupted copy is deleted, never run), BOOT exits with
``MISSING`` before anything runs, and ``NodeRunner`` sends the code once (``python3 -c BOOT
HASH --install``, base64 on stdin) and runs the command again. Later commands send only the
hash. Each module's compiled code is kept in a 0700 directory beside the file, with the
sha256 of its source and of the code: an entry that does not match is compiled again.
Nothing here runs anything: ``runner.node_code`` does.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

MIN_PYTHON = (3, 9)
CANNOT_CACHE = 96  # the cache directory is read-only or full
MISSING = 97  # not cached here (or the copy did not match its hash): send it
UNSAFE = 95  # the cache (or the code in it) could be changed by another user: refused
TOO_OLD = 98  # python3 is older than MIN_PYTHON
ENTRY = "node.main"  # the node side's entry point, under the package
_MARK = "halo-node:"  # BOOT's own lines on stderr start with it
MAX_CODE = 16 << 20  # the most BOOT reads of a cached zipapp (halo's is about 180 KB)
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # fixed: the same files give the same bytes

# Python 3.0+ syntax up to the version check, so that an old python3 says what it is.
BOOT_TEMPLATE = """\
import sys
if sys.version_info < {minimum!r}:
    sys.stderr.write("{mark} python %d.%d.%d is older than {wanted}\\n" % sys.version_info[:3])
    sys.exit({too_old})
import hashlib, os, stat
h = sys.argv[1]
d = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "halo")
p = os.path.join(d, "node-" + h + ".pyz")
def fail(code, text):
    sys.stderr.write("{mark} " + text + "\\n")
    sys.exit(code)
def unsafe(f, s):
    # why another user could change f (None when only this one, or root, can)
    u = os.geteuid()
    if s.st_uid != u:
        return ("%s is owned by uid %d, not by this user (uid %d): refused; remove it or "
                "chown it to uid %d" % (f, s.st_uid, u, u))
    if s.st_mode & 0o022:
        return "%s is writable by group or others (mode %03o): refused; chmod go-w it" % (
            f, s.st_mode & 0o777)
def refuse(f, s):
    why = unsafe(f, s)
    if why:
        fail({unsafe}, why)
def load(f, limit):
    # (bytes or None, stat or None): never a link, a FIFO or a device, at most limit bytes
    try:
        fd = os.open(f, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None, None
    try:
        s, b = os.fstat(fd), b""
        while stat.S_ISREG(s.st_mode) and s.st_size <= limit and len(b) <= limit:
            more = os.read(fd, limit + 1 - len(b))
            if not more:
                return b, s
            b += more
        return None, s
    except OSError:
        return None, None
    finally:
        os.close(fd)
if sys.argv[2:3] == ["--install"]:
    import base64, tempfile, time
    data = base64.b64decode(sys.stdin.read())
    if hashlib.sha256(data).hexdigest() != h:
        fail({missing}, "the code received does not match its hash")
    tmp = None
    try:
        os.makedirs(d, 0o700, exist_ok=True)
        refuse(d, os.stat(d))
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".node-")
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, p)
    except OSError as err:
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)
        fail({cannot_cache}, "cannot cache halo's node code in %s: %s" % (d, err.strerror or err))
    import shutil
    for old in os.listdir(d):  # other versions' code (and compiled copies) unused for a week
        q = os.path.join(d, old)
        try:
            if old.startswith("node-") and not old.startswith("node-" + h):
                if os.lstat(q).st_mtime < time.time() - 7 * 86400:
                    shutil.rmtree(q) if stat.S_ISDIR(os.lstat(q).st_mode) else os.unlink(q)
        except OSError:
            pass
    sys.exit(0)
if os.path.isdir(d):
    refuse(d, os.stat(d))
b, s = load(p, {max_code})
if b is None or hashlib.sha256(b).hexdigest() != h:
    try:
        if s is not None:
            os.unlink(p)  # damaged (or not a file): never imported, replaced when sent
    except OSError:
        pass  # a directory it cannot change: the install that follows says why
    fail({missing}, "halo's node code " + h[:12] + " is not cached here")
refuse(p, s)
if len(sys.argv) == 2:
    sys.exit(0)
import importlib.util, marshal, zipimport
z = zipimport.zipimporter(p)
c = p[:-4] + "." + sys.implementation.cache_tag
try:
    os.mkdir(c, 0o700)
except OSError:
    pass
try:
    s = os.lstat(c)
except OSError:
    s = None
if s is None or not stat.S_ISDIR(s.st_mode):
    c = None  # compiled in memory only
else:
    refuse(c, s)
class Code:
    # modules from the checked file; their compiled code cached in c, each entry the sha256
    # of its source (from the checked file), the sha256 of the code, the code: an entry that
    # does not match, or cannot be read, is compiled again
    def find_spec(self, name, path=None, target=None):
        if name != "halo_cluster" and not name.startswith("halo_cluster."):
            return None
        base = name.replace(".", "/")
        for f, package in ((base + "/__init__.py", True), (base + ".py", False)):
            try:
                source = z.get_data(f)
            except OSError:
                continue
            origin = p + "/" + f
            spec = importlib.util.spec_from_loader(name, self, origin=origin, is_package=package)
            spec.has_location = True
            spec.loader_state = source
            return spec
        return None
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        spec = module.__spec__
        key = hashlib.sha256(spec.loader_state).digest()
        f = c and os.path.join(c, spec.name + ".bin")
        data, s = load(f, 8 * len(spec.loader_state) + 65536) if f else (None, None)
        code = None
        if data and data[:32] == key and hashlib.sha256(data[64:]).digest() == data[32:64]:
            try:
                code = None if s.st_uid != os.geteuid() else marshal.loads(data[64:])
            except (ValueError, EOFError, TypeError):
                pass
        if code is None:
            code = compile(spec.loader_state, spec.origin, "exec", dont_inherit=True)
            if f:
                data = marshal.dumps(code)
                tmp = f + ".%d" % os.getpid()
                try:
                    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
                    with os.fdopen(fd, "wb") as out:
                        out.write(key + hashlib.sha256(data).digest() + data)
                    os.replace(tmp, f)
                except OSError:
                    try:
                        os.unlink(tmp)
                    except OSError:
                        pass
        exec(code, module.__dict__)
sys.meta_path.insert(0, Code())
sys.argv = ["halo"] + sys.argv[2:]
from halo_cluster.node.main import main
sys.exit(main())
"""

# __main__ of the zipapp, for a direct run (the exporter's systemd unit): it checks itself
# against the hash in its own name before importing anything from itself.
ZIP_MAIN = """\
import hashlib, os, sys
name = os.path.basename(sys.argv[0])
with open(sys.argv[0], "rb") as f:
    digest = hashlib.sha256(f.read()).hexdigest()
if name != "node-%s.pyz" % digest:
    sys.stderr.write("halo-node: %s does not match its hash: not run\\n" % sys.argv[0])
    sys.exit(97)
from halo_cluster.node.main import main
sys.exit(main())
"""


def boot(minimum: tuple[int, int] = MIN_PYTHON) -> str:
    """The program ``python3 -c`` runs on a node (``minimum`` other than the default only in
    tests, to see the refusal on this machine's Python)."""
    return BOOT_TEMPLATE.format(
        minimum=minimum,
        wanted=".".join(map(str, minimum)),
        mark=_MARK,
        too_old=TOO_OLD,
        missing=MISSING,
        cannot_cache=CANNOT_CACHE,
        unsafe=UNSAFE,
        max_code=MAX_CODE,
    )


@dataclass(frozen=True)
class NodeCode:
    data: bytes  # the zipapp

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def argv(self, python: str, args: Sequence[str]) -> list[str]:
        """``python -c BOOT HASH ARGS…``: one node-side command."""
        return [python, "-c", boot(), self.digest, *args]

    def install_argv(self, python: str) -> list[str]:
        return [python, "-c", boot(), self.digest, "--install"]

    def payload(self) -> str:
        return base64.b64encode(self.data).decode("ascii")


def node_modules(package: Path | None = None) -> list[str]:
    """What runs on a node, as module names under the package (``node.main``, ``wire``…):
    the entry point and every module of the package it imports, directly or not, imports
    inside functions included (a command imports what it alone needs where it runs), those
    made only for the type checker left out, with the packages each import runs."""
    import ast

    root = package or Path(__file__).resolve().parent
    todo, seen = [ENTRY], set()
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        parts = module.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # its packages
        path = _module_path(root, module)
        if path is not None:
            tree = ast.parse(path.read_bytes(), str(path))
            todo += [m for m in _imports(tree, root.name) if _module_path(root, m) is not None]
    return sorted(seen)


def _module_path(root: Path, module: str) -> Path | None:
    base = root.joinpath(*module.split("."))
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def _imports(tree: object, name: str) -> list[str]:
    """The package's modules a module imports (names under the package), but under
    ``if TYPE_CHECKING:``; ``from package.x import y`` names ``x.y`` too, in case y is a
    module (the caller keeps only names that are files)."""
    import ast

    checking = {
        id(inner)
        for node in ast.walk(tree)  # type: ignore[arg-type]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test)
        for branch in node.body
        for inner in ast.walk(branch)
    }
    found = []
    prefix = name + "."
    for node in ast.walk(tree):  # type: ignore[arg-type]
        if id(node) in checking:
            continue
        if isinstance(node, ast.Import):
            found += [a.name[len(prefix) :] for a in node.names if a.name.startswith(prefix)]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == name:
                found += [a.name for a in node.names]
            elif node.module.startswith(prefix):
                base = node.module[len(prefix) :]
                found += [base, *(f"{base}.{a.name}" for a in node.names)]
    return found


def package_files(package: Path | None = None) -> list[tuple[str, bytes]]:
    """The node code's files as (archive name, bytes), sorted: the package's ``__init__``
    and every module the node side runs (``node_modules``), nothing else."""
    root = package or Path(__file__).resolve().parent
    paths = {root / "__init__.py"}
    for module in node_modules(root):
        path = _module_path(root, module)
        if path is not None:
            paths.add(path)
    return [
        (f"{root.name}/{p.relative_to(root).as_posix()}", p.read_bytes()) for p in sorted(paths)
    ]


def build(files: Sequence[tuple[str, bytes]]) -> bytes:
    """The zipapp of ``files``, byte for byte the same for the same files."""
    import io
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name, content in [("__main__.py", ZIP_MAIN.encode()), *files]:
            info = zipfile.ZipInfo(name, _ZIP_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, content, compresslevel=9)
    return out.getvalue()


@lru_cache(maxsize=4)
def node_code(cache: Path | None = None) -> NodeCode:
    """This halo's node code, built once per process; with ``cache`` (a directory), built
    once per version of the sources: kept there under a fingerprint of their names, sizes
    and modification times, and checked on every read (a damaged copy is built again)."""
    root = Path(__file__).resolve().parent
    if cache is None:
        return NodeCode(build(package_files(root)))
    path = cache / f"controller-{_fingerprint(root)}.b64"  # the digest, then the zipapp
    try:
        digest, _, text = path.read_text().partition("\n")
        data = base64.b64decode(text, validate=True)
        if hashlib.sha256(data).hexdigest() == digest:
            return NodeCode(data)
    except (OSError, UnicodeDecodeError, ValueError):
        pass
    code = NodeCode(build(package_files(root)))
    try:
        from halo_cluster.atomic import atomic_write

        cache.mkdir(mode=0o700, parents=True, exist_ok=True)
        atomic_write(path, f"{code.digest}\n{code.payload()}", prefix=".controller-")
    except OSError:
        pass  # a read-only cache: built each time, as without one
    return code


def _fingerprint(root: Path) -> str:
    parts = []
    for path in sorted(root.rglob("*.py")):
        info = path.stat()
        parts.append(f"{path.relative_to(root)}:{info.st_size}:{info.st_mtime_ns}")
    return hashlib.sha256("\n".join([str(root), *parts]).encode()).hexdigest()[:24]


@dataclass(frozen=True)
class Problem:
    """Why a node cannot run halo's node code."""

    kind: str  # "python-missing" | "python-old" | "cache" | "cache-unsafe" | "code"
    detail: str  # one line, from the node


_OLD = re.compile(r"python (\d+\.\d+\.\d+) is older than")


def problem(returncode: int, stderr: str) -> Problem | None:
    """The node-code problem a failed command shows (BOOT's own exit codes and lines, or the
    shell's 127 for a missing interpreter); None for any other outcome."""
    lines = [line for line in stderr.splitlines() if line.startswith(_MARK)]
    detail = lines[-1][len(_MARK) :].strip() if lines else ""
    if returncode == TOO_OLD and detail:
        return Problem("python-old", detail)
    if returncode == CANNOT_CACHE and detail:
        return Problem("cache", detail)
    if returncode == UNSAFE and detail:
        return Problem("cache-unsafe", detail)
    if returncode == MISSING and detail:
        return Problem("code", detail)
    if returncode == 127:
        last = [line for line in stderr.splitlines() if line.strip()]
        return Problem("python-missing", last[-1].strip() if last else "command not found")
    return None


def is_missing(returncode: int, stderr: str) -> bool:
    """The code was not cached there (or its copy did not match): send it and run again."""
    return returncode == MISSING and _MARK in stderr


def old_version(found: Problem) -> str | None:
    match = _OLD.search(found.detail)
    return match.group(1) if match else None


_REFUSED = re.compile(r"^(.+) is (?:owned by uid \d+|writable by group or others)")


def refused_path(found: Problem) -> str | None:
    """The cache directory or file BOOT refused (a ``cache-unsafe`` problem's path)."""
    match = _REFUSED.match(found.detail) if found.kind == "cache-unsafe" else None
    return match.group(1) if match else None


_HASH = re.compile(r"^[0-9a-f]{64}$")


def as_halo(args: tuple[str, ...]) -> tuple[str, ...]:
    """A command of halo's node code (``[prefix…] python -c BOOT HASH CMD…``) as the
    ``halo CMD…`` an installed halo would run (how FakeRunner's rules name node commands)."""
    start = BOOT_TEMPLATE.split("{", 1)[0]
    for i in range(len(args) - 3):
        if args[i + 1] == "-c" and args[i + 2].startswith(start) and _HASH.match(args[i + 3]):
            return (*args[:i], "halo", *args[i + 4 :])
    return args
