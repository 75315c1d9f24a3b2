"""``halo serve``: vLLM tensor-parallel on the Ray cluster, started on the head in the
background with its log in a known file, healthy only when NCCL's own log proves the
transport the plan asked for.

Secrets (the API key, HF_TOKEN) reach vLLM through the environment of the script fed to
``bash -s`` — vLLM reads ``VLLM_API_KEY`` as its ``--api-key`` — never through argv, logs,
state or JSON.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from halo_cluster.cluster.lifecycle import Lifecycle, LifecycleError, node_script, read_state
from halo_cluster.config import Config, NodeConfig, ServeConfig, secret
from halo_cluster.errors import UsageError
from halo_cluster.nccl_log import LogVerdict, parse_logs
from halo_cluster.runner import Result, exports
from halo_cluster.transport import TransportPlan

STATE_DIR = '"${XDG_STATE_HOME:-$HOME/.local/state}/halo"'
HEALTH_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class ServeResult:
    url: str
    log: str
    verdict: dict[str, Any]
    expected: str
    stopped: bool


def serve_argv(serve: ServeConfig, model: str, tp: int, unified_memory: bool) -> list[str]:
    argv = [
        *shlex.split(serve.command),
        "serve",
        model,
        "--tensor-parallel-size",
        str(tp),
        "--pipeline-parallel-size",
        str(serve.pipeline_parallel_size),
        "--distributed-executor-backend",
        "ray",
        "--host",
        serve.host,
        "--port",
        str(serve.port),
    ]
    utilization = serve.gpu_memory_utilization or (0.90 if unified_memory else None)
    if utilization is not None:
        argv += ["--gpu-memory-utilization", f"{utilization:g}"]
    if serve.enforce_eager if serve.enforce_eager is not None else unified_memory:
        argv.append("--enforce-eager")
    if serve.max_model_len:
        argv += ["--max-model-len", str(serve.max_model_len)]
    return [*argv, *serve.extra_args]


def log_paths(config: Config) -> tuple[str, str]:
    """(log, pid file) on the head, as shell words (the state dir expands there)."""
    return f"{STATE_DIR}/serve-{config.name}.log", f"{STATE_DIR}/serve-{config.name}.pid"


def background_script(env: Mapping[str, str], argv: list[str], log: str, pid: str) -> str:
    """Start ``argv`` detached, its output in ``log``, its pid in ``pid``."""
    return (
        f"set -e\n{exports(env)}mkdir -p {STATE_DIR}\n"
        f"setsid {shlex.join(argv)} > {log} 2>&1 < /dev/null &\n"
        f"echo $! > {pid}\n"
    )


class Server:
    def __init__(self, lifecycle: Lifecycle, progress: Callable[[str], None] | None = None) -> None:
        self.lifecycle = lifecycle
        self.config = lifecycle.config
        self.head: NodeConfig = self.config.head
        self.runner = lifecycle.runners[self.head.name]
        self.progress = progress or (lambda _m: None)

    def _plan(self) -> TransportPlan | None:
        state = read_state(self.config) or {}
        data = state.get("nodes", {}).get(self.head.name, {}).get("plan")
        return TransportPlan(**{**data, "warnings": tuple(data["warnings"])}) if data else None

    def _run(self, script: str, timeout: float = 60.0) -> Result:
        return self.runner.run(
            [*self.head.exec_prefix, "bash", "-s"], stdin=script, timeout=timeout
        )

    def start(
        self,
        model: str | None,
        tp: int | None,
        host: str | None,
        port: int | None,
        allow_fallback: bool,
        insecure: bool,
        wait_s: float = HEALTH_TIMEOUT_S,
    ) -> ServeResult:
        serve = self.config.serve
        serve = replace(serve, host=host or serve.host, port=port or serve.port)
        model = model or serve.model
        if not model:
            raise UsageError("no model: pass MODEL or set [serve] model in halo.toml")
        api_key = secret(serve.api_key_env)
        if serve.api_key_env and not api_key:
            raise UsageError(
                f"[serve] api_key_env names {serve.api_key_env}, which is not set here"
            )
        if serve.host == "0.0.0.0" and not api_key and not insecure:
            raise UsageError(
                "refusing to serve on 0.0.0.0 without an API key: set [serve] api_key_env, "
                "bind a private address, or pass --insecure"
            )
        plan = self._plan()
        if plan is None:
            raise LifecycleError("the cluster is not up (no state): run 'halo up' first")
        tp = tp or serve.tensor_parallel_size or len(self.config.nodes)
        unified = "APU" in plan.reasons.get("NCCL_NET_GDR_LEVEL", "")
        env = {
            **plan.env,
            **dict(self.head.env),
            "NCCL_DEBUG": "INFO",
            "NCCL_DEBUG_SUBSYS": "INIT,NET",
        }
        for name, value in (("VLLM_API_KEY", api_key), ("HF_TOKEN", secret("HF_TOKEN"))):
            if value:
                env[name] = value
        log, pid = log_paths(self.config)
        self.stop()
        self.progress(f"starting {serve.command} serve {model} (TP={tp}) on {self.head.name}")
        started = self._run(background_script(env, serve_argv(serve, model, tp, unified), log, pid))
        if not started.ok:
            raise LifecycleError(
                f"could not start the server on {self.head.name}: {started.error_text()}"
            )
        self._wait_healthy(serve.host, serve.port, serve.api_key_env, wait_s)
        verdict = self.verdict()
        expected = "rdma" if plan.is_rdma else "socket"
        bad = verdict.transport != "unknown" and not verdict.meets(expected)
        if bad and not allow_fallback:
            self.stop()
        url = f"http://{serve.host if serve.host != '0.0.0.0' else self.head.host}:{serve.port}"
        return ServeResult(
            url, log, verdict.to_dict(), expected, stopped=bad and not allow_fallback
        )

    def _wait_healthy(self, host: str, port: int, key_env: str | None, wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        local = "127.0.0.1" if host == "0.0.0.0" else host
        argv = [
            *self.head.exec_prefix,
            self.head.halo,
            "serve-health",
            "--host",
            local,
            "--port",
            str(port),
        ]
        script_env = {"HALO_SERVE_KEY": secret(key_env) or ""}
        while True:
            result = self.runner.run(
                [*self.head.exec_prefix, "bash", "-s"],
                stdin=node_script(script_env, argv[len(self.head.exec_prefix) :]),
                timeout=30,
            )
            if result.ok:
                return
            if not self._alive():
                raise LifecycleError(f"the server exited while starting; its log: {self.tail(20)}")
            if time.monotonic() > deadline:
                self.stop()
                raise LifecycleError(
                    f"the server did not become healthy within {wait_s:g} s; stopped it"
                )
            self.progress("waiting for /health and /v1/models")
            time.sleep(1.0)

    def _alive(self) -> bool:
        _log, pid = log_paths(self.config)
        return self._run(f'kill -0 "$(cat {pid})" 2>/dev/null\n').ok

    def tail(self, lines: int = 200) -> str:
        log, _pid = log_paths(self.config)
        return self._run(f"tail -n {int(lines)} {log}\n").stdout

    def log_from(self, offset: int) -> str:
        log, _pid = log_paths(self.config)
        return self._run(f"tail -c +{int(offset) + 1} {log} 2>/dev/null\n").stdout

    def verdict(self) -> LogVerdict:
        log, _pid = log_paths(self.config)
        text = self._run(f"cat {log}\n", timeout=120).stdout
        return parse_logs([("serve.log", text.splitlines())])

    def stop(self) -> bool:
        """Stop the server (its whole process group); True when one was running."""
        _log, pid = log_paths(self.config)
        script = (
            f'p="$(cat {pid} 2>/dev/null)" || exit 3\n'
            'kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null || exit 3\n'
            'for i in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done\n'
            'kill -KILL -- "-$p" 2>/dev/null || true\n'
            f"rm -f {pid}\n"
        )
        return self._run(script).ok


def health(host: str, port: int, key: str | None, timeout_s: float = 5.0) -> dict[str, Any]:
    """Node side: GET /health and /v1/models of the server on this node."""
    import urllib.request

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    out: dict[str, Any] = {}
    for path in ("/health", "/v1/models"):
        request = urllib.request.Request(f"http://{host}:{port}{path}", headers=headers)
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = response.read().decode("utf-8", "replace")
        out[path] = json.loads(body) if path == "/v1/models" else body
    return out
