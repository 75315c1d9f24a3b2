"""The shared-service part of ``halo demo`` (root only): a 3-node lab serving two
deployments behind one gateway, as a team would use it: 'small' on llama.cpp with a
replica on node1 and one on node2, 'chat' on vLLM on node3; one key made, both asked
through the gateway with it, refused without it; a replica killed while requests go on,
and back by itself; then every deployment, the gateway and the lab stopped. It drives the
``halo`` command line, as a user would."""

from __future__ import annotations

import json
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from halo_cluster.cli.demo_lab import HALO
from halo_cluster.cli.demo_mesh import lab_section
from halo_cluster.cli.output import safe
from halo_cluster.errors import OperationError
from halo_cluster.jsonout import JsonObject
from halo_cluster.runner.local import LocalRunner

if TYPE_CHECKING:
    from rich.console import Console

BACK_S = 120.0  # a killed replica serving again (its supervisor restarts it)


def gateway_demo(out: Console | None) -> JsonObject:
    from halo_cluster.config import default_engine, default_llama_cpp
    from halo_cluster.errors import HaloError
    from halo_cluster.lab.lab import Lab

    say, skipped = lab_section(
        out,
        "10. A team's endpoint: two deployments and replicas behind one gateway (halo run "
        "--name, halo gateway start, halo gateway key add)",
    )
    if skipped is not None:
        return skipped
    engine, llama_cpp = default_engine(), default_llama_cpp()
    if engine is None or llama_cpp is None:
        say("needs vLLM's engine environment and the llama.cpp build (make engine llama-cpp)")
        return {"skipped": "no engine environment or llama.cpp build"}
    lab = Lab()
    with tempfile.TemporaryDirectory(prefix="halo-demo-team-") as tmp:
        try:
            state = lab.up("team", Path(tmp) / "lab", 3, 9000, HALO, engine, llama_cpp)
        except HaloError as err:
            say(f"[yellow]lab not started:[/] {err}")
            return {"skipped": str(err)}
        config = Path(state.dir) / "halo.toml"
        head = state.nodes[0].mgmt_address
        with config.open("a") as handle:  # clients reach the gateway on the lab's bridge
            handle.write(f'\n[gateway]\nhost = "{head}"\naliases = {{ fast = "small" }}\n')
        try:
            return _run(config, Path(tmp) / "model", say)
        finally:
            _halo("stop", "--config", str(config))
            _halo("gateway", "stop", "--config", str(config))
            lab.down(state)
            say("team lab removed")


def _halo(*args: str, timeout: float = 900) -> tuple[int, str, str]:
    done = LocalRunner().run([HALO, *args], timeout=timeout)
    return done.returncode, done.stdout, done.stderr


def _json(said: str, *args: str) -> Any:
    code, stdout, stderr = _halo(*args, "--json")
    if code != 0:
        raise OperationError(f"{said} failed: {stderr.strip().splitlines()[-1:] or stdout[-200:]}")
    return json.loads(stdout)


def _deployments(config: Path) -> list[dict[str, Any]]:
    """The deployments as 'halo status --json' shows them (it exits 1 while one is not
    serving, which is what the demo waits out)."""
    _code, stdout, stderr = _halo("status", "--config", str(config), "--json")
    try:
        return list(json.loads(stdout)["deployments"])
    except (ValueError, KeyError, TypeError):
        raise OperationError(f"halo status failed: {stderr.strip()[-200:]}") from None


def _run(config: Path, model: Path, say: Callable[[str], None]) -> JsonObject:
    """Every step; one that fails (OperationError) is said in one line, then the lab is
    torn down."""
    at = ("--config", str(config))
    code, _out, err = _halo("lab", "model", str(model), "--format", "both")
    if code != 0:
        say(f"[yellow]halo lab model failed:[/] {err.strip()}")
        return {"error": err.strip()}
    try:
        small = _json(
            "halo run small", "run", str(model), *at, "--name", "small", "--replicas", "2",
            "--layout", "llama.cpp single",
        )  # fmt: skip
        _deployed(small, say)
        chat = _json("halo run chat", "run", str(model), *at, "--name", "chat",
                     "--layout", "vllm TP1")  # fmt: skip
        _deployed(chat, say)
        gateway = _json("halo gateway start", "gateway", "start", *at)
        models = sorted({w["model_id"] for w in gateway["workers"]})
        say(
            f"halo gateway start: {gateway['url']}, vllm-router holding "
            f"{len(gateway['workers'])} replicas of {', '.join(models)}"
        )
        _healthy(config)
        key = _json("halo gateway key add", "gateway", "key", "add", "team", *at)["key"]
        say("halo gateway key add team: a key, shown once, stored hashed")
        return {
            "deployments": [small, chat],
            "gateway": gateway,
            **_asked(gateway["url"], key, say),
            "failover": _failover(config, gateway["url"], key, say),
            "status": _deployments(config),
        }
    except OperationError as err:
        say(f"[yellow]{err}[/]")
        return {"error": str(err)}


def _healthy(config: Path, within_s: float = 60.0) -> None:
    """Until the router has checked every replica healthy (it asks every 2 s)."""
    deadline = time.monotonic() + within_s
    while True:
        _code, stdout, _err = _halo("gateway", "status", "--config", str(config), "--json")
        try:
            workers = json.loads(stdout)["workers"]
        except (ValueError, KeyError, TypeError):
            workers = []
        if workers and all(w["healthy"] for w in workers):
            return
        if time.monotonic() > deadline:
            raise OperationError(f"the router did not find every replica healthy in {within_s:g} s")
        time.sleep(1.0)


def _deployed(result: dict[str, Any], say: Callable[[str], None]) -> None:
    for replica in result["replicas"]:
        said = f"proven: {replica['proven']}" if not replica["stopped"] else "stopped"
        say(
            f"halo run --name {result['name']}: {result['layout']}, replica {replica['index']} "
            f"on {'+'.join(replica['nodes'])} at {replica['url']} ({said})"
        )


def ask(url: str, key: str | None, model: str, tokens: int = 8) -> tuple[int, str]:
    """One completion through the gateway: (HTTP status, the text or the error)."""
    body = json.dumps({"model": model, "prompt": "The fabric", "max_tokens": tokens}).encode()
    headers = {"content-type": "application/json"}
    if key is not None:
        headers["authorization"] = f"Bearer {key}"
    request = urllib.request.Request(f"{url}/v1/completions", body, headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            found = json.loads(answer.read(1 << 20))
            return answer.status, str(found["choices"][0]["text"])
    except urllib.error.HTTPError as err:
        return err.code, err.read(4096).decode(errors="replace")
    except (OSError, ValueError, KeyError, IndexError) as err:
        return 0, str(err)


def _asked(url: str, key: str, say: Callable[[str], None]) -> JsonObject:
    answers = {}
    for model in ("small", "fast", "chat"):
        status, text = ask(url, key, model)
        answers[model] = status
        say(f"through the gateway, model {model!r} with the key: {status} {safe(repr(text[:40]))}")
    refused, _text = ask(url, None, "small")
    say(f"the same without a key: {refused} (no engine saw it)")
    return {"answers": answers, "without_key": refused}


def _failover(config: Path, url: str, key: str, say: Callable[[str], None]) -> JsonObject:
    """node2's replica killed; requests go on through the gateway while its supervisor
    brings it back."""
    _halo("lab", "exec", "--dir", str(config.parent), "node2", "--", "pkill", "-f",
          "llama-server")  # fmt: skip
    killed = time.monotonic()
    statuses = [ask(url, key, "small", 4)[0] for _ in range(20)]
    ok = statuses.count(200)
    say(f"replica on node2 killed: {ok} of {len(statuses)} requests answered meanwhile")
    back = None
    while time.monotonic() - killed < BACK_S:
        found = _deployments(config)
        if all(d["state"] == "serving" for d in found):
            back = round(time.monotonic() - killed, 1)
            break
        time.sleep(1.0)
    said = f"serving on both replicas again after {back} s" if back else "not back in time"
    say(f"halo status: deployment small {said}")
    return {"answered": ok, "asked": len(statuses), "back_s": back}
