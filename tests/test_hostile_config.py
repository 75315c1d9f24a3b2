"""Hostile and broken halo.toml: one-line errors, never a traceback; and hostile strings in
every config field that reaches a node never execute in any script halo generates."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from halo_cluster.config import ConfigError, ServeConfig, find_config, load_config
from halo_cluster.engines import llama_cpp_argv as llama_argv
from halo_cluster.engines.llama_cpp_argv import LlamaCppOptions
from halo_cluster.engines.process import background_script, reach_script, stop_script, tcp_probe
from halo_cluster.engines.request import serve_request
from halo_cluster.engines.vllm_argv import VllmOptions, preflight_script, serve_argv
from halo_cluster.errors import UsageError
from halo_cluster.runner.quote import RAY_TOKEN_ENV, node_script

NODE = '\n[[node]]\nname = "n1"\nssh = "n1"\n'


def write(tmp_path: Path, content: str | bytes, name: str = "halo.toml") -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'[cluster]\nname = "a\xff"\n', "not UTF-8 text (byte 19)"),
        ('[cluster]\nname = "x;rm -rf /"\n' + NODE, "cluster name 'x;rm -rf /': use 1-64"),
        ("[cluster]\n" + NODE + 'exec_prefix = "toolbox \'run"\n', "exec_prefix: No closing quotation"),
        ('[[node]]\nname = "n1"\nssh = "-oProxyCommand=touch /tmp/x"\n',
         "node[0].ssh '-oProxyCommand=touch /tmp/x': an SSH target"),
        ("x = " + "[" * 100_000 + "]" * 100_000 + "\n", "not valid TOML"),
        ('[ray]\nauth = "maybe"\n' + NODE, 'ray.auth must be "token" or "none"'),
        ('[serve]\nengine = "tgi"\n' + NODE, 'serve.engine must be "vllm" or "llama.cpp"'),
        ("[serve]\nrpc_port = 70000\n" + NODE,
         "halo.toml:2: serve.rpc_port moved: write it as 'rpc_port = ...' under [serve.llama_cpp]"),
        ("[serve]\nllama_cpp = 3\n" + NODE,
         "halo.toml:2: serve.llama_cpp moved: write it as 'build = ...' under [serve.llama_cpp]"),
        ("[serve]\nexecutor = 'mp'\n" + NODE,
         "halo.toml:2: serve.executor moved: write it as 'executor = ...' under [serve.vllm]"),
        ("[serve.tgi]\nport = 1\n" + NODE, "unknown table [serve.tgi] (engines: [serve.vllm], [serve.llama_cpp])"),
        ('[ray]\ncommand = "r"\n[serve]\ncommand = "v"\n' + NODE,
         "halo.toml:4: serve.command moved: write it as 'command = ...' under [serve.vllm]"),
        ('[serve]\nhost = "-oProxyCommand=x"\n' + NODE,
         "halo.toml:2: serve.host '-oProxyCommand=x': give an address to bind"),
    ],
)  # fmt: skip
def test_bad_config_is_one_line(tmp_path: Path, content: str | bytes, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, content))
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[serve.llama_cpp]\nrpc_port = 70000\n" + NODE,
         "halo.toml:2: serve.llama_cpp.rpc_port must be at most 65535"),
        ("[serve.llama_cpp]\n\nthreads = 0\n" + NODE,
         "halo.toml:3: serve.llama_cpp.threads must be a whole number >= 1"),
        ("[serve.llama_cpp]\nbuild = 3\n" + NODE, "halo.toml:2: serve.llama_cpp.build must be a string"),
        ("[serve.vllm]\nexecutor = 'tcp'\n" + NODE, 'halo.toml:2: serve.vllm.executor must be "ray" or "mp"'),
        ("[serve.vllm]\nrpc_port = 1\n" + NODE, "halo.toml:2: unknown key serve.vllm.rpc_port (known: "),
        ("[serve.vllm]\ngpu_memory_utilization = 1.5\n" + NODE, "serve.vllm.gpu_memory_utilization must be in (0, 1]"),
    ],
)  # fmt: skip
def test_a_bad_engine_table_is_one_line_before_anything_runs(
    tmp_path: Path, content: str, message: str
) -> None:
    """Each engine reads its own table; every table is checked when a serve is asked for,
    whichever engine serves (here vLLM, the default)."""
    config = load_config(write(tmp_path, content + '\n[serve]\nmodel = "/m"\n'))
    with pytest.raises(ConfigError) as err:
        serve_request(config)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_host_flag_that_reads_as_an_option_is_refused(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, '[serve]\nmodel = "/m"\n' + NODE))
    with pytest.raises(UsageError, match="--host '-x': give an address to bind"):
        serve_request(config, host="-x")


def test_a_bom_is_accepted(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, '\ufeff[cluster]\nname = "bom"\n' + NODE))
    assert config.name == "bom"


def test_directory_fifo_and_huge_configs(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="is not a regular file"):
        find_config(str(tmp_path))
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="is not a regular file"):
        find_config(str(fifo))
    with pytest.raises(ConfigError, match="not a regular file"):
        load_config(fifo)  # never blocks on the FIFO
    with pytest.raises(ConfigError, match="larger than 1 MiB"):
        load_config(write(tmp_path, "#" * (2 << 20)))


CANARY = "/tmp/halo-hostile-canary"
HOSTILE = st.sampled_from(
    [
        f"$(touch {CANARY})",
        f"`touch {CANARY}`",
        f"; touch {CANARY}",
        f"\ntouch {CANARY}\n",
        f"' ; touch {CANARY}; '",
        f'" ; touch {CANARY}; "',
        f"&& touch {CANARY}",
        f"| touch {CANARY}",
        f"${{IFS}}touch${{IFS}}{CANARY}",
    ]
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(HOSTILE, HOSTILE, HOSTILE, HOSTILE)
def test_hostile_strings_never_execute(tmp_path: Path, a: str, b: str, c: str, d: str) -> None:
    if os.path.exists(CANARY):
        os.remove(CANARY)
    """Every script halo feeds to bash -s, built with hostile values in the fields that reach
    it (model, command, host, extra args, node env, API key, Ray token), run for real with
    every external command stubbed: the canary file is never made."""
    serve = ServeConfig(model=a, host=b, extra_args=(d, a))
    vllm = VllmOptions(command=f"/opt/vllm {c}", executor="mp")
    env = {"HF_HOME": a, "VLLM_API_KEY": b, RAY_TOKEN_ENV: c, "X": d}
    argv = serve_argv(serve, vllm, a, 2, True, (1, 2, b, 29517))
    lserve = ServeConfig(extra_args=(d,), host=b)
    llama = LlamaCppOptions(build=c, threads=2)
    bind = b if b not in ("0.0.0.0", "::", "") else "10.0.0.1"  # refused, tested elsewhere
    scripts = [
        node_script(env, argv),
        background_script(env, argv, "lab-x"),
        preflight_script(vllm.command, a, (b, 8000)),
        stop_script("lab-x"),
        llama_argv.preflight_script(f"/opt/{c}", a, (b, 50052)),
        reach_script(b, 50052, 1),
        # the probes themselves, past the checks that stop a script before them here
        f"if {tcp_probe(b, 8000)}; then exit 12; fi\n",
        preflight_script("true", None, (b, 8000)),
        llama_argv.preflight_script("true", None, (b, 50052)),
        background_script(env, llama_argv.llama_server_argv(lserve, llama, a, [b, d], 4), "lab-x"),
        background_script(env, llama_argv.rpc_server_argv(llama, bind), "lab-x"),
    ]
    stubs = tmp_path / "stubs"
    stubs.mkdir(exist_ok=True)
    for tool in ("setsid", "mkdir", "chmod", "pgrep", "ps", "stat", "date", "sleep", "timeout", "true",
                 "grep", "ls", "rm", "cat", "tr", "opt", "dirname", "sha256sum", "cut", "head",
                 "test"):  # fmt: skip
        stub = stubs / tool
        stub.write_text("#!/bin/sh\nexit 0\n")
        stub.chmod(stat.S_IRWXU)
    touch = stubs / "touch"  # the one command that really runs: what an injection would do
    touch.write_text('#!/bin/sh\nexec /usr/bin/touch "$@"\n')
    touch.chmod(stat.S_IRWXU)
    # the nested shells of the port probes run for real (a host value reaches one)
    (stubs / "timeout").write_text('#!/bin/sh\nshift\nexec "$@"\n')
    (stubs / "bash").write_text('#!/bin/sh\nexec /bin/bash "$@"\n')
    (stubs / "seq").write_text('#!/bin/sh\nexec /usr/bin/seq "$@"\n')
    for tool in ("timeout", "bash", "seq"):
        (stubs / tool).chmod(stat.S_IRWXU)
    for script in scripts:
        done = subprocess.run(
            ["/bin/bash", "-s"],
            input=script.replace("exec ", "true "),
            env={"PATH": str(stubs), "HOME": str(tmp_path)},
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert not os.path.exists(CANARY), (script, done.stderr)
