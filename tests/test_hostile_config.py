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
from halo_cluster.engines.request import serve_request
from halo_cluster.engines.scripts import background_script, reach_script, stop_script, tcp_probe
from halo_cluster.engines.vllm_argv import VllmOptions, preflight_script, serve_argv
from halo_cluster.errors import UsageError
from halo_cluster.runner.quote import RAY_TOKEN_ENV, node_script
from tests.conftest import halo

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
        ("[serve]\nstall_s = 5\n" + NODE,
         "halo.toml:2: serve.stall_s must be seconds between 30 and 86400 (default 600)"),
        ("[serve]\nstall_s = true\n" + NODE,
         "halo.toml:2: serve.stall_s must be seconds between 30 and 86400 (default 600)"),
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


LONG_HOST = "a" * 300
SHOWN_LONG = "a" * 60 + "…"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        # a NUL reaches no argv, path or variable: one line at the key, not a ValueError at exec
        (NODE + 'python = "py\\u0000thon"\n', ":5: node[0].python holds a NUL character (\\x00)"),
        (NODE + 'halo = "/opt/halo\\u0000"\n', ":5: node[0].halo holds a NUL character (\\x00)"),
        (NODE + 'exec_prefix = "toolbox\\u0000run"\n',
         ":5: node[0].exec_prefix holds a NUL character (\\x00)"),
        (NODE + 'exec_prefix = ["toolbox", "r\\u0000"]\n',
         ":5: node[0].exec_prefix[1] holds a NUL character (\\x00)"),
        (NODE + 'env = { HF_HOME = "/m\\u0000" }\n', ":5: node[0].env.HF_HOME holds a NUL character (\\x00)"),
        ('[serve.vllm]\ncommand = "vllm"\nexecutor = "r\\u0000"\n' + NODE,
         ":3: serve.vllm.executor holds a NUL character (\\x00)"),
        # an over-long or right-to-left [serve] host: not an address, one line, shown escaped
        (f'[serve]\nhost = "{LONG_HOST}"\n' + NODE,
         f":2: serve.host '{SHOWN_LONG}' is neither an IP address nor a host name of 1-253 "
         "characters: give an address to bind, e.g. 127.0.0.1"),
        ('[serve]\nhost = "10.0.0.1\\u202e"\n' + NODE,
         ":2: serve.host '10.0.0.1\\u202e' is neither an IP address nor a host name of ASCII "
         "letters, digits, '-' and '.': give an address to bind, e.g. 127.0.0.1"),
        ('[ray]\ndashboard_host = "a b"\n' + NODE,
         ":2: ray.dashboard_host 'a b' is neither an IP address nor a host name of ASCII "
         "letters, digits, '-' and '.': give an address to bind, e.g. 127.0.0.1"),
        # an engine's command line is split when the file loads, not when a serve starts
        ("[serve.vllm]\ncommand = \"vllm 'x\"\n" + NODE,
         ":2: serve.vllm.command: No closing quotation in 'vllm 'x'"),
        ('[serve.vllm]\ncommand = "  "\n' + NODE, ":2: serve.vllm.command names no program"),
        (NODE + "gpus = 1025\n", ":5: node[0].gpus must be a whole number from 0 to 1024"),
        (NODE + "gpus = 100000000000000000000\n", ":5: node[0].gpus must be a whole number from 0 to 1024"),
        (NODE + "gpus = -1\n", ":5: node[0].gpus must be a whole number from 0 to 1024"),
        (NODE + 'fabric_address = "0.0.0.0"\n',
         ":5: node[0].fabric_address '0.0.0.0' is 0.0.0.0 (every interface): give the node's own address"),
        (NODE + 'mgmt_address = "0.0.0.0"\n',
         ":5: node[0].mgmt_address '0.0.0.0' is 0.0.0.0 (every interface): give the node's own address"),
        (NODE + 'fabric_address = "224.0.0.1"\n',
         ":5: node[0].fabric_address '224.0.0.1' is a multicast address: give the node's own address"),
        (NODE + 'mgmt_address = "255.255.255.255"\n',
         ":5: node[0].mgmt_address '255.255.255.255' is a reserved address (240.0.0.0/4): give the "
         "node's own address"),
        (NODE + 'fabric_address = "10.0.0.1\\n"\n',
         ":5: node[0].fabric_address '10.0.0.1\\n' is not an IPv4 address"),
        # Python's limit on an integer's digits: one line, not a ValueError
        ("[ray]\nport = 1" + "0" * 5000 + "\n" + NODE, ": not valid TOML: a number of more than 4300 digits"),
    ],
)  # fmt: skip
def test_hostile_values_are_one_complete_line(tmp_path: Path, content: str, expected: str) -> None:
    path = write(tmp_path, content)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == f"{path}{expected}"


def test_hostile_values_on_the_command_line(tmp_path: Path) -> None:
    """The same values given as flags: ``halo serve --host``, a model read as an option,
    ``halo setup --address 0.0.0.0/30``, ``--mtu -1``: one line each, before anything runs."""
    config = load_config(write(tmp_path, '[serve]\nmodel = "/m"\n' + NODE))
    with pytest.raises(UsageError) as err:
        serve_request(config, host="10.0.0.1\u202e")
    assert str(err.value) == (
        "--host '10.0.0.1\\u202e' is neither an IP address nor a host name of ASCII letters, "
        "digits, '-' and '.': give an address to bind, e.g. 127.0.0.1"
    )
    with pytest.raises(UsageError) as err:
        serve_request(config, model="-x.gguf")
    assert str(err.value) == (
        "model '-x.gguf' reads as an option: give its path as ./-x.gguf or its absolute path"
    )
    done = halo("setup", "--local", "--step", "network", "--address", "0.0.0.0/30")
    assert (done.returncode, done.stderr) == (
        2,
        "halo: error: --address '0.0.0.0/30' is 0.0.0.0 (every interface): give the node's own "
        "address\n",
    )
    done = halo("setup", "--local", "--mtu", "-1")
    assert done.returncode == 2 and "'--mtu': -1 is not in the range 1280<=x<=65520" in done.stderr


def test_a_gguf_path_that_starts_with_a_dash_is_a_path(tmp_path: Path) -> None:
    """llama.cpp's preflight reads the file at a path that starts with '-' (run for real with
    the real head and stat): a GGUF passes, anything else is 'not a GGUF file' (13)."""
    model = tmp_path / "-x.gguf"
    model.write_bytes(b"GGUF" + bytes(28))

    def preflight(path: str) -> int:
        script = llama_argv.preflight_script("true", path, None)
        run = subprocess.run(["/bin/bash", "-s"], input=script, text=True, cwd=tmp_path,
                             capture_output=True, timeout=30, check=False)  # fmt: skip
        return run.returncode

    assert [preflight("-x.gguf"), preflight(str(model))] == [0, 0]
    model.write_bytes(b"NOPE" + bytes(28))
    assert preflight("-x.gguf") == 13
