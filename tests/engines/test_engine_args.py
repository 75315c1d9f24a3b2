"""Options for the engines without forks: [serve] extra_args, then [serve.<engine>] args,
then 'halo serve MODEL -- EXTRA', in that order at the end of the engine's command line;
an option halo sets itself is refused wherever it is given, naming halo's own option."""

from __future__ import annotations

from pathlib import Path

import pytest

from halo_cluster.config import load_config
from halo_cluster.engines.llama_cpp_argv import OWNED as LLAMA_OWNED
from halo_cluster.engines.llama_cpp_argv import LlamaCppOptions, llama_server_argv
from halo_cluster.engines.request import serve_request
from halo_cluster.engines.vllm_argv import OWNED as VLLM_OWNED
from halo_cluster.engines.vllm_argv import serve_argv
from halo_cluster.errors import ConfigError, UsageError
from tests.conftest import halo

NODES = '\n[[node]]\nname = "n1"\nssh = "n1"\n\n[[node]]\nname = "n2"\nssh = "n2"\n'


def config_with(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "halo.toml"
    path.write_text(text + NODES)
    return load_config(path)


def test_extra_options_reach_vllm_in_order(tmp_path: Path) -> None:
    config = config_with(
        tmp_path,
        '[serve]\nmodel = "/m"\nextra_args = ["--seed", "7"]\n'
        '[serve.vllm]\nargs = ["--enable-prefix-caching"]\n',
    )
    request = serve_request(config, extra=("--speculative-config", '{"method": "ngram"}'))
    assert request.serve.extra_args == (
        "--seed", "7", "--enable-prefix-caching", "--speculative-config", '{"method": "ngram"}'
    )  # fmt: skip
    argv = serve_argv(request.serve, request.options, "/m", 2, unified_memory=False)
    assert argv[-5:] == list(request.serve.extra_args)


def test_extra_options_reach_llama_server(tmp_path: Path) -> None:
    config = config_with(
        tmp_path,
        '[serve]\nmodel = "/m.gguf"\nengine = "llama.cpp"\n'
        '[serve.llama_cpp]\nargs = ["--cache-type-k", "q8_0"]\n',
    )
    request = serve_request(config, extra=("--flash-attn", "on"))
    options: LlamaCppOptions = request.options
    assert options.args == ("--cache-type-k", "q8_0")
    argv = llama_server_argv(request.serve, options, "/m.gguf", ["198.19.1.12:50052"], 4)
    assert argv[-4:] == ["--cache-type-k", "q8_0", "--flash-attn", "on"]


@pytest.mark.parametrize(
    ("engine", "table", "extra", "message"),
    [
        ("vllm", "", ("--port=9000",), "'--port' is set by halo for vllm: use [serve] port or "
         "--port instead"),
        ("vllm", 'args = ["-tp", "4"]', (), "'-tp' is set by halo for vllm: use --tp or "
         "[serve.vllm] tensor_parallel_size instead"),
        ("vllm", "", ("--api-key", "k"), "'--api-key' is set by halo for vllm: use [serve] "
         "api_key_env (kept out of argv) instead"),
        ("vllm", "", ("--headless",), "use halo places the ranks (--executor mp) instead"),
        ("llama.cpp", 'args = ["-ngl", "99"]', (), "'-ngl' is set by halo for llama.cpp: use "
         "halo splits the layers over the nodes instead"),
        ("llama.cpp", "", ("--rpc", "10.0.0.2:50052"), "'--rpc' is set by halo for llama.cpp"),
        ("llama.cpp", "", ("-c", "8192"), "use [serve] max_model_len instead"),
    ],
)  # fmt: skip
def test_options_halo_sets_are_refused_naming_its_own(
    tmp_path: Path, engine: str, table: str, extra: tuple[str, ...], message: str
) -> None:
    section = "vllm" if engine == "vllm" else "llama_cpp"
    config = config_with(
        tmp_path, f'[serve]\nmodel = "/m"\nengine = "{engine}"\n[serve.{section}]\n{table}\n'
    )
    with pytest.raises(UsageError) as err:
        serve_request(config, extra=extra)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_an_owned_option_in_extra_args_is_refused_too(tmp_path: Path) -> None:
    config = config_with(tmp_path, '[serve]\nmodel = "/m"\nextra_args = ["--max-model-len", "9"]\n')
    with pytest.raises(UsageError, match="'--max-model-len' is set by halo for vllm"):
        serve_request(config)


def test_a_value_that_looks_like_an_owned_flag_is_a_value(tmp_path: Path) -> None:
    config = config_with(tmp_path, '[serve]\nmodel = "/m"\n')
    request = serve_request(config, extra=("--served-model-name", "port"))
    assert request.serve.extra_args == ("--served-model-name", "port")


def test_args_that_are_not_a_list_of_strings_name_the_line(tmp_path: Path) -> None:
    config = config_with(tmp_path, '[serve]\nmodel = "/m"\n[serve.vllm]\nargs = "--x"\n')
    with pytest.raises(ConfigError, match=r"halo\.toml:4: serve\.vllm\.args must be a list"):
        serve_request(config)


def test_every_owned_option_is_a_flag_and_names_a_halo_option() -> None:
    for owned in (VLLM_OWNED, LLAMA_OWNED):
        assert all(flag.startswith("-") and why for flag, why in owned.items())


def test_the_command_line_takes_extra_options_after_a_double_dash(tmp_path: Path) -> None:
    path = tmp_path / "halo.toml"
    path.write_text('[serve]\nmodel = "/m"\n' + NODES)
    done = halo("serve", "tiny", "--config", str(path), "--", "--port", "1")
    assert done.returncode == 2
    assert done.stderr == (
        "halo: error: '--port' is set by halo for vllm: use [serve] port or --port instead "
        "(extra options for the engine are the others)\n"
    )
    without = halo("serve", "tiny", "--config", str(path), "--enable-prefix-caching")
    assert without.returncode == 2 and "No such option" in without.stderr
