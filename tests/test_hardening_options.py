"""Hardening 4, section 3: options halo owns stay owned.

- An engine's extra options ([serve] extra_args, [serve.<engine>] args, 'halo serve … --
  EXTRA') may not set what halo sets in any spelling the engine's parser takes: vLLM's
  argparse takes prefixes ('--hos'), '_' for '-' ('--api_key'), '--name=value',
  '--name.key value' and aliases ('-n' for --nnodes); llama-server takes '_' for '-'.
- A server bound to anything but a loopback address needs an API key (or --insecure),
  judged on the address ('0', '0x0', '::', '[::]', '::ffff:0.0.0.0'), not the text.
- The supervisor spec's settings are checked: a wrong type or a value out of range is one
  WireError line.

The option tables below are the engines' own: vLLM 0.32.0's 'vllm serve' parser (every
option string of make_arg_parser(FlexibleArgumentParser()), and the groups of spellings of
one action), and llama.cpp's llama-server (llama-cpp-python 0.3.36's build, its --help). The
spellings in VLLM_READS were each given to vLLM 0.32.0's own parser ('vllm serve m ARGS'),
which set the option named beside them."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from halo_cluster.config import ServeConfig, load_config
from halo_cluster.engines.request import serve_request
from halo_cluster.errors import UsageError, WireError
from halo_cluster.supervision import SuperviseSettings
from halo_cluster.wire.supervise import parse_spec, parse_state
from tests.cluster.test_serve import Node, cluster, serve
from tests.node.test_supervise_spec import SPEC

NODES = '\n[[node]]\nname = "n1"\nssh = "n1"\n\n[[node]]\nname = "n2"\nssh = "n2"\n'


def spellings(text: str) -> list[str]:
    return text.split()


VLLM_0_32_OPTIONS = spellings("""
--additional-config --aggregate-engine-logging --all2all-backend --allow-credentials
--allow-deprecated-quantization --allowed-headers --allowed-local-media-path
--allowed-media-domains --allowed-methods --allowed-origins
--anthropic-disabled-thinking-effort --api-key --api-server-count --async-scheduling
--attention-backend --attention-config --aux-output-config --block-size --chat-template
--chat-template-content-format --code-revision --cohere-format --cohere-is-reasoning-model
--collect-detailed-traces --compilation-config --config --config-format --convert
--cp-kv-cache-interleave-size --cpu-distributed-timeout-seconds --cpu-offload-gb
--cpu-offload-params --cudagraph-capture-sizes --cudagraph-metrics
--custom-histogram-buckets --data-parallel-address --data-parallel-backend
--data-parallel-external-lb --data-parallel-hybrid-lb
--data-parallel-multi-port-external-lb --data-parallel-rank --data-parallel-rpc-port
--data-parallel-size --data-parallel-size-local --data-parallel-start-rank
--data-parallel-supervisor-port --dbo-decode-token-threshold --dbo-prefill-token-threshold
--dcp-comm-backend --dcp-kv-cache-interleave-size --dcp-q-replicate
--decode-context-parallel-size --default-chat-template-kwargs --default-mm-loras
--device-ids --device-memory-utilization --diffusion-config
--disable-access-log-for-endpoints --disable-cascade-attn --disable-chunked-mm-input
--disable-custom-all-reduce --disable-fastapi-docs --disable-hybrid-kv-cache-manager
--disable-log-stats --disable-nccl-for-dp-synchronization --disable-sliding-window
--disable-uvicorn-access-log --distributed-executor-backend --distributed-timeout-seconds
--download-dir --dp-supervisor-probe-failure-threshold --dp-supervisor-probe-interval-s
--dp-supervisor-probe-timeout-s --dp-sync-interval --dtype --ec-manager-config
--ec-transfer-config --elastic-ep-max-dp-size --enable-auto-tool-choice
--enable-batch-sharded-sampling --enable-chunked-prefill --enable-cumem-allocator
--enable-dbo --enable-elastic-ep --enable-ep-weight-filter --enable-eplb
--enable-expert-parallel --enable-fault-tolerance --enable-flash-late-interaction
--enable-flashinfer-autotune --enable-force-include-usage --enable-hc-sp
--enable-layerwise-nvtx-tracing --enable-log-deltas --enable-log-outputs
--enable-log-requests --enable-logging-iteration-details --enable-lora
--enable-mamba-cache-stochastic-rounding --enable-mamba-shared-prefix-checkpoint
--enable-mfu-metrics --enable-mixed-moe-lora-format --enable-mm-embeds
--enable-moe-shared-loras --enable-nccl-comm-suspend --enable-offline-docs
--enable-per-request-metrics --enable-prefix-caching --enable-prompt-embeds
--enable-prompt-tokens-details --enable-request-id-headers --enable-return-routed-experts
--enable-scale-out --enable-server-load-tracking --enable-shm-tensor-arena
--enable-sleep-mode --enable-ssl-refresh --enable-tokenizer-info-endpoint
--enable-tower-connector-lora --enable-trace-replay --enforce-eager --engram-config
--eplb-config --exclude-tools-when-tool-choice-none --expert-placement-strategy
--fail-on-environ-validation --fault-tolerance-config --fingerprint-mode
--fingerprint-value --fully-sharded-loras --gdn-prefill-backend --generation-config
--gpu-memory-utilization --grpc --grpc-port --h11-max-header-count
--h11-max-incomplete-event-size --headless --help --hf-config-path --hf-overrides
--hf-token --host --ignore-patterns --interleave-mm-strings --io-processor-plugin
--ir-op-priority --jit-monitor-mode --jit-monitor-verbose --kda-decode-backend
--kda-prefill-backend --kernel-config --kv-cache-dtype --kv-cache-dtype-skip-layers
--kv-cache-memory-bytes --kv-cache-metrics --kv-cache-metrics-sample --kv-events-config
--kv-offloading-backend --kv-offloading-size --kv-sharing-fast-prefill
--kv-transfer-config --language-model-only --limit-mm-per-prompt --linear-backend
--load-format --log-config-file --log-error-stack --log-level --logging-config
--logits-processors --logprobs-mode --long-prefill-token-threshold
--long-prefill-token-threshold-adaptive --lora-dtype --lora-modules --lora-target-modules
--mamba-backend --mamba-block-size --mamba-cache-dtype --mamba-cache-mode
--mamba-cache-philox-rounds --mamba-ssm-cache-dtype --mamba-ssu-algorithm --master-addr
--master-port --max-cpu-loras --max-cudagraph-capture-size --max-log-len --max-logprobs
--max-lora-cls-labels --max-lora-rank --max-loras --max-model-len --max-num-active-seqs
--max-num-batched-tokens --max-num-queued-reqs --max-num-queued-tokens
--max-num-scheduled-tokens --max-num-seqs --max-parallel-loading-workers --media-io-kwargs
--middleware --mm-device-do-normalize --mm-encoder-attn-backend --mm-encoder-attn-dtype
--mm-encoder-fp8-scale-path --mm-encoder-fp8-scale-save-margin
--mm-encoder-fp8-scale-save-path --mm-encoder-only --mm-encoder-tp-mode
--mm-hasher-algorithm --mm-ipc-gpu-memory-gb --mm-processor-cache-gb
--mm-processor-cache-type --mm-processor-device --mm-processor-kwargs
--mm-shm-cache-max-object-size-mb --mm-tensor-ipc --model --model-class-overrides
--model-impl --model-loader-extra-config --moe-backend --nnodes --no-allow-credentials
--no-allow-deprecated-quantization --no-async-scheduling --no-cohere-is-reasoning-model
--no-cudagraph-metrics --no-data-parallel-external-lb --no-data-parallel-hybrid-lb
--no-dcp-q-replicate --no-disable-cascade-attn --no-disable-chunked-mm-input
--no-disable-custom-all-reduce --no-disable-fastapi-docs
--no-disable-hybrid-kv-cache-manager --no-disable-nccl-for-dp-synchronization
--no-disable-sliding-window --no-disable-uvicorn-access-log --no-enable-auto-tool-choice
--no-enable-batch-sharded-sampling --no-enable-chunked-prefill --no-enable-cumem-allocator
--no-enable-dbo --no-enable-elastic-ep --no-enable-ep-weight-filter --no-enable-eplb
--no-enable-expert-parallel --no-enable-fault-tolerance --no-enable-flash-late-interaction
--no-enable-flashinfer-autotune --no-enable-force-include-usage --no-enable-hc-sp
--no-enable-layerwise-nvtx-tracing --no-enable-log-deltas --no-enable-log-outputs
--no-enable-log-requests --no-enable-logging-iteration-details --no-enable-lora
--no-enable-mamba-cache-stochastic-rounding --no-enable-mamba-shared-prefix-checkpoint
--no-enable-mfu-metrics --no-enable-mixed-moe-lora-format --no-enable-mm-embeds
--no-enable-moe-shared-loras --no-enable-nccl-comm-suspend --no-enable-offline-docs
--no-enable-per-request-metrics --no-enable-prefix-caching --no-enable-prompt-embeds
--no-enable-prompt-tokens-details --no-enable-request-id-headers
--no-enable-return-routed-experts --no-enable-scale-out --no-enable-server-load-tracking
--no-enable-shm-tensor-arena --no-enable-sleep-mode --no-enable-ssl-refresh
--no-enable-tokenizer-info-endpoint --no-enable-tower-connector-lora
--no-enable-trace-replay --no-enforce-eager --no-exclude-tools-when-tool-choice-none
--no-fail-on-environ-validation --no-fully-sharded-loras --no-interleave-mm-strings
--no-jit-monitor-verbose --no-kv-cache-metrics --no-kv-sharing-fast-prefill
--no-language-model-only --no-log-error-stack --no-long-prefill-token-threshold-adaptive
--no-mm-device-do-normalize --no-mm-encoder-only --no-numa-bind
--no-ray-workers-use-nsight --no-return-sampling-mask --no-return-tokens-as-token-ids
--no-scheduler-reserve-full-isl --no-skip-mm-profiling --no-skip-tokenizer-init
--no-sleep-mode-offload-cudagraph --no-specialize-active-lora --no-swa-bounded-replay
--no-tokens-only --no-trust-remote-code --no-trust-request-chat-template
--no-trust-request-mm-kwargs --no-use-fp64-gumbel --no-use-replayssm --no-use-tqdm-on-load
--node-rank --num-gpu-blocks-override --numa-bind --numa-bind-cpus --numa-bind-nodes
--offload-backend --offload-group-size --offload-num-in-group --offload-params
--offload-prefetch-step --optimization-level --otlp-traces-endpoint
--override-generation-config --per-request-spec-decode-metrics --performance-mode
--pipeline-parallel-size --pooler-config --port --prefill-context-parallel-size
--prefill-schedule-interval --prefix-cache-retention-interval --prefix-caching-hash-algo
--prefix-match-unit --profiler-config --pt-load-map-location --quantization
--quantization-config --ray-workers-use-nsight --reasoning-config --reasoning-parser
--reasoning-parser-plugin --renderer-num-workers --replayssm-buffer-len --response-role
--return-sampling-mask --return-tokens-as-token-ids --revision --root-path --runner
--safetensors-load-strategy --safetensors-prefetch-block-size
--safetensors-prefetch-num-threads --scheduler-cls --scheduler-reserve-full-isl
--scheduling-policy --seed --served-model-name --show-hidden-metrics-for-version
--shutdown-timeout --skip-mm-profiling --skip-tokenizer-init
--sleep-mode-offload-cudagraph --sleep-preserve-parameter-names
--sparse-indexer-topk-backend --spec-method --spec-model --spec-tokens
--specialize-active-lora --speculative-config --sse-keep-alive-interval --ssl-ca-certs
--ssl-cert-reqs --ssl-certfile --ssl-ciphers --ssl-keyfile --stream-interval
--structured-outputs-config --swa-bounded-replay --tensor-parallel-size --tokenizer
--tokenizer-mode --tokenizer-revision --tokens-only --tool-call-parser
--tool-parser-plugin --tool-server --tool-strict-level --trust-remote-code
--trust-request-chat-template --trust-request-mm-kwargs --ubatch-size --uds
--use-fp64-gumbel --use-replayssm --use-tqdm-on-load --uvicorn-log-level
--video-pruning-method --video-pruning-rate --watermark --watermark-config
--weight-transfer-config --worker-cls --worker-extension-cls -ac -asc -cc -dc -dcp -dp
-dpa -dpb -dpe -dph -dpl -dpm -dpn -dpp -dpr -ep -h -n -pcp -pp -q -r -sc -tp
""")

# the groups of spellings of one vllm serve option where one spelling is halo's
VLLM_0_32_ALIASES = """
--enforce-eager --no-enforce-eager
--pipeline-parallel-size -pp
--nnodes -n
--node-rank -r
--tensor-parallel-size -tp
--gpu-memory-utilization --device-memory-utilization
""".strip().splitlines()

LLAMA_SERVER_OPTIONS = spellings("""
--adaptive-decay --adaptive-target --agent --alias --api-key --api-key-file
--api-prefix --backend-sampling --batch-size --cache-idle-slots --cache-list
--cache-prompt --cache-ram --cache-reuse --cache-type-k --cache-type-k-draft
--cache-type-v --cache-type-v-draft --chat-template --chat-template-file
--chat-template-kwargs --check-tensors --checkpoint-min-step --completion-bash
--cont-batching --context-shift --control-vector --control-vector-layer-range
--control-vector-scaled --cors-credentials --cors-headers --cors-methods --cors-origins
--cpu-mask --cpu-mask-batch --cpu-mask-batch-draft --cpu-mask-draft --cpu-moe
--cpu-moe-draft --cpu-range --cpu-range-batch --cpu-range-draft --cpu-strict
--cpu-strict-batch --cpu-strict-batch-draft --cpu-strict-draft --ctx-checkpoints
--ctx-size --defrag-thold --device --device-draft --docker-repo --draft --draft-max
--draft-min --draft-n --draft-n-min --draft-p-min --draft-p-split --dry-allowed-length
--dry-base --dry-multiplier --dry-penalty-last-n --dry-sequence-breaker --dynatemp-exp
--dynatemp-range --embd-gemma-default --embd-normalize --embedding --embeddings --escape
--fim-qwen-1.5b-default --fim-qwen-14b-spec --fim-qwen-30b-default --fim-qwen-3b-default
--fim-qwen-7b-default --fim-qwen-7b-spec --fit --fit-ctx --fit-target --flash-attn
--frequency-penalty --gpt-oss-120b-default --gpt-oss-20b-default --gpu-layers
--gpu-layers-draft --grammar --grammar-file --help --hf-file --hf-repo --hf-repo-draft
--hf-token --host --ignore-eos --image-max-tokens --image-min-tokens --jinja --json-schema
--json-schema-file --keep --kv-offload --kv-unified --kv-unified-per-slot --lazy-mode
--list-devices --load-mode --log-colors --log-disable --log-file --log-jsonl --log-prefix
--log-prompts-dir --log-timestamps --log-verbose --log-verbosity --logit-bias
--lookup-cache-dynamic --lookup-cache-static --lora --lora-init-without-apply
--lora-scaled --main-gpu --mcp-servers-config --mcp-servers-json --media-path --metrics
--min-p --mirostat --mirostat-ent --mirostat-lr --mmproj --mmproj-auto --mmproj-device
--mmproj-offload --mmproj-url --model --model-draft --model-url --models-autoload
--models-dir --models-max --models-preset --mtmd-batch-max-tokens --n-cpu-ffn --n-cpu-moe
--n-cpu-moe-draft --n-gpu-layers --n-gpu-layers-draft --n-predict --no-agent
--no-cache-idle-slots --no-cache-prompt --no-cont-batching --no-context-shift
--no-cors-credentials --no-escape --no-host --no-jinja --no-kv-offload --no-kv-unified
--no-log-jsonl --no-log-prefix --no-log-timestamps --no-mmproj --no-mmproj-auto
--no-mmproj-offload --no-models-autoload --no-op-offload --no-perf --no-prefill-assistant
--no-reasoning-preserve --no-repack --no-skip-chat-parsing --no-slots
--no-spec-draft-backend-sampling --no-ui --no-ui-mcp-proxy --no-warmup --no-webui
--no-webui-mcp-proxy --numa --offline --op-offload --override-kv --override-tensor
--override-tensor-draft --parallel --path --perf --poll --poll-batch --poll-batch-draft
--poll-draft --pooling --port --predict --prefill-assistant --presence-penalty --prio
--prio-batch --prio-batch-draft --prio-draft --props --reasoning --reasoning-budget
--reasoning-budget-message --reasoning-effort --reasoning-format --reasoning-preserve
--repack --repeat-last-n --repeat-penalty --rerank --reranking --reuse-port
--reverse-prompt --rope-freq-base --rope-freq-scale --rope-scale --rope-scaling --rpc
--sampler-seq --samplers --sampling-seq --seed --skip-chat-parsing --sleep-idle-seconds
--slot-prompt-similarity --slot-save-path --slots --spec-default
--spec-draft-backend-sampling --spec-draft-cpu-mask --spec-draft-cpu-mask-batch
--spec-draft-cpu-moe --spec-draft-cpu-range --spec-draft-cpu-strict
--spec-draft-cpu-strict-batch --spec-draft-device --spec-draft-hf --spec-draft-model
--spec-draft-n-cpu-moe --spec-draft-n-max --spec-draft-n-min --spec-draft-ncmoe
--spec-draft-ngl --spec-draft-override-tensor --spec-draft-p-min --spec-draft-p-split
--spec-draft-poll --spec-draft-poll-batch --spec-draft-prio --spec-draft-prio-batch
--spec-draft-threads --spec-draft-threads-batch --spec-draft-type-k --spec-draft-type-v
--spec-ngram-map-k-min-hits --spec-ngram-map-k-size-m --spec-ngram-map-k-size-n
--spec-ngram-map-k4v-min-hits --spec-ngram-map-k4v-size-m --spec-ngram-map-k4v-size-n
--spec-ngram-min-hits --spec-ngram-mod-n-match --spec-ngram-mod-n-max
--spec-ngram-mod-n-min --spec-ngram-simple-min-hits --spec-ngram-simple-size-m
--spec-ngram-simple-size-n --spec-ngram-size-m --spec-ngram-size-n --spec-synth-len
--spec-synth-rates --spec-type --special --split-mode --spm-infill --sse-ping-interval
--ssl-cert-file --ssl-key-file --swa-checkpoints --swa-full --tags --temp --temperature
--tensor-split --threads --threads-batch --threads-batch-draft --threads-draft
--threads-http --timeout --tools --tools-runtime --top-k --top-n-sigma --top-nsigma
--top-p --typical --typical-p --ubatch-size --ui --ui-config --ui-config-file
--ui-mcp-proxy --usage --verbose --verbosity --version --video-ffmpeg-dir --video-fps
--video-timestamp-interval --vision-gemma-12b-default --vision-gemma-4b-default --warmup
--webui --webui-config --webui-config-file --webui-mcp-proxy --xtc-probability
--xtc-threshold --yarn-attn-factor --yarn-beta-fast --yarn-beta-slow --yarn-ext-factor
--yarn-orig-ctx -C -Cb -Cbd -Cd -Cr -Crb -Crd -a -ag -b -bs -c -cb -cl -cmoe -cmoed -cms
-cram -ctk -ctkd -ctv -ctvd -ctxcp -dev -devd -dr -dt -e -fa -fit -fitc -fitt -h -hf -hfd
-hff -hfr -hfrd -hft -j -jf -kvo -kvu -l -lcd -lcs -lm -lv -lzm -m -md -mg -mm -mmdev -mmu
-mu -n -ncffn -ncmoe -ncmoed -ngl -ngld -nkvo -no-ag -no-kvu -nocb -np -nr -ot -otd -r
-rea -s -sm -sp -sps -t -tb -tbd -td -to -ts -ub -v
""")

# the same for llama-server
LLAMA_SERVER_ALIASES = """
-t --threads
-c --ctx-size
-ngl --gpu-layers --n-gpu-layers
-ts --tensor-split
-m --model
-lv --verbosity --log-verbosity
-np --parallel
""".strip().splitlines()

# arguments vLLM 0.32.0's parser read as one of halo's options, and the option it set
VLLM_READS = [
    (("--hos", "0.0.0.0"), "host"),
    (("--host=0.0.0.0",), "host"),
    (("--host.x", "1"), "host"),
    (("--hos.x", "1"), "host"),
    (("--por", "9000"), "port"),
    (("--model=x",), "model"),
    (("--api_key", "k"), "api_key"),
    (("--api-key.x", "y"), "api_key"),
    (("--tensor_parallel_size", "2"), "tensor_parallel_size"),
    (("--tensor_par", "2"), "tensor_parallel_size"),
    (("-t", "2"), "tensor_parallel_size"),
    (("-tp=2",), "tensor_parallel_size"),
    (("-n", "2"), "nnodes"),
    (("-n2",), "nnodes"),
    (("--nn", "2"), "nnodes"),
    (("-r1",), "node_rank"),
    (("--node_rank", "1"), "node_rank"),
    (("--headl",), "headless"),
    (("--distributed_executor_backend=mp",), "distributed_executor_backend"),
    (("--device-memory-utilization", "0.5"), "gpu_memory_utilization"),
    (("--gp", "0.5"), "gpu_memory_utilization"),
    (("--no-enforce-eager",), "enforce_eager"),
    (("--max_model", "9"), "max_model_len"),
    (("--config=x",), "config"),
]
# and arguments it read as options of its own, that halo lets through
VLLM_OTHERS = [
    ("--seed", "7"),
    ("-O3",),
    ("--config-format", "yaml"),
    ("--max-num-batched-tokens", "8"),
]


def config_with(tmp_path: Path, text: str) -> Any:
    path = tmp_path / "halo.toml"
    path.write_text(text + NODES)
    return load_config(path)


def refused(tmp_path: Path, engine: str, extra: tuple[str, ...]) -> str:
    config = config_with(tmp_path, f'[serve]\nmodel = "/m"\nengine = "{engine}"\n')
    with pytest.raises(UsageError) as err:
        serve_request(config, extra=extra)
    assert "\n" not in str(err.value)
    return str(err.value)


@pytest.mark.parametrize(("extra", "dest"), VLLM_READS, ids=[" ".join(a) for a, _ in VLLM_READS])
def test_every_spelling_vllm_reads_as_an_option_halo_sets_is_refused(
    tmp_path: Path, extra: tuple[str, ...], dest: str
) -> None:
    message = refused(tmp_path, "vllm", extra)
    flag = extra[0].split("=", 1)[0]
    assert message.startswith(f"'{flag}' ") and " for vllm: use " in message


def test_an_abbreviation_names_halo_s_option(tmp_path: Path) -> None:
    assert refused(tmp_path, "vllm", ("--hos", "0.0.0.0")) == (
        "'--hos' reads as an option halo sets for vllm: use [serve] host or --host instead "
        "(extra options for the engine are the others)"
    )
    assert refused(tmp_path, "vllm", ("--api_key", "k")).endswith(
        "use [serve] api_key_env (kept out of argv) instead (extra options for the engine "
        "are the others)"
    )


@pytest.mark.parametrize("extra", VLLM_OTHERS, ids=[" ".join(a) for a in VLLM_OTHERS])
def test_vllm_s_other_options_pass(tmp_path: Path, extra: tuple[str, ...]) -> None:
    config = config_with(tmp_path, '[serve]\nmodel = "/m"\n')
    assert serve_request(config, extra=extra).serve.extra_args == extra


def test_no_option_of_vllm_that_halo_does_not_set_is_refused() -> None:
    from halo_cluster.engines.vllm_argv import OWNED

    assert [o for o in VLLM_0_32_OPTIONS if o not in set(OWNED) and o in OWNED] == []
    assert set(OWNED) <= set(VLLM_0_32_OPTIONS)  # every owned spelling is vLLM's


def test_every_spelling_of_an_option_halo_sets_is_owned() -> None:
    from halo_cluster.engines.llama_cpp_argv import OWNED as LLAMA
    from halo_cluster.engines.vllm_argv import OWNED as VLLM

    for owned, groups in ((VLLM, VLLM_0_32_ALIASES), (LLAMA, LLAMA_SERVER_ALIASES)):
        for group in groups:
            spellings = group.split()
            assert any(s in set(owned) for s in spellings), group
            assert all(s in set(owned) for s in spellings), group


@pytest.mark.parametrize(
    ("extra", "option"),
    [
        (("--api_key", "k"), "[serve] api_key_env"),
        (("--n_gpu_layers", "99"), "halo splits the layers"),
        (("--ctx_size", "8192"), "[serve] max_model_len"),
        (("--api-key_file", "/k"), "[serve] api_key_env"),
        (("--log_verbosity", "1"), "halo reads llama.cpp's lines"),
        (("--tensor_split", "1,1"), "halo splits the layers"),
    ],
)
def test_llama_server_s_underscore_spellings_are_refused(
    tmp_path: Path, extra: tuple[str, ...], option: str
) -> None:
    message = refused(tmp_path, "llama.cpp", extra)
    assert message.startswith(f"'{extra[0]}' reads as an option halo sets for llama.cpp: use ")
    assert option in message


def test_llama_server_takes_no_prefix_so_none_is_refused(tmp_path: Path) -> None:
    """llama-server refuses '--ho', '-H' and '--Host' itself ('invalid argument'): they set
    nothing of halo's, and its own options that halo does not set pass."""
    from halo_cluster.engines.llama_cpp_argv import OWNED

    config = config_with(tmp_path, '[serve]\nmodel = "/m"\nengine = "llama.cpp"\n')
    for extra in (("--ho", "1"), ("-H", "1"), ("--Host", "1"), ("-cb",), ("--threads-http", "4")):
        assert serve_request(config, extra=extra).serve.extra_args == extra
    assert [o for o in LLAMA_SERVER_OPTIONS if o not in set(OWNED) and o in OWNED] == []
    assert set(OWNED) <= set(LLAMA_SERVER_OPTIONS)


# -- the API key rule: judged on the address -------------------------------------------------
EVERY_INTERFACE = ("0", "0x0", "0.0.0.0", "::", "[::]", "0000::", "::ffff:0.0.0.0", "0.0")
NOT_LOOPBACK = (*EVERY_INTERFACE, "192.168.1.5", "10.0.0.1", "fe80::1%eth0", "head.lan")
LOOPBACK = ("127.0.0.1", "127.1", "127.0.0.2", "::1", "[::1]", "::ffff:127.0.0.1", "localhost",
            "LOCALHOST", "localhost.", "2130706433")  # fmt: skip


@pytest.mark.parametrize("host", [h for h in NOT_LOOPBACK if h != "[::]"])  # '[::]': no host
def test_a_server_not_on_loopback_needs_an_api_key(tmp_path: Path, host: str) -> None:
    nodes = {"node1": Node("", (0, 0, None))}
    srv = cluster(tmp_path, nodes, ServeConfig(model="/m", host=host))
    with pytest.raises(UsageError) as err:
        serve(srv, wait_s=5)
    assert str(err.value) == (
        f"refusing to serve on {host} without an API key (it is not a loopback address): "
        "set [serve] api_key_env, bind 127.0.0.1, or pass --insecure"
    )
    assert nodes["node1"].scripts == []  # nothing ran


def test_which_hosts_are_loopback() -> None:
    from halo_cluster.serving.bringup import loopback_host

    assert [h for h in LOOPBACK if not loopback_host(h)] == []
    assert [h for h in NOT_LOOPBACK if loopback_host(h)] == []


def test_insecure_or_a_key_lets_every_interface_be_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from halo_cluster.serving.bringup import Serving

    monkeypatch.setenv("HALO_KEY", "k3y")
    srv = cluster(tmp_path, {"node1": Node("", (0, 0, None))}, ServeConfig(model="/m"))
    for host in ("::", "0"):
        keyed = ServeConfig(model="/m", host=host, api_key_env="HALO_KEY")
        assert Serving._check_key(srv, keyed, insecure=False) == "k3y"
        assert Serving._check_key(srv, ServeConfig(model="/m", host=host), insecure=True) is None
    for host in LOOPBACK:
        assert Serving._check_key(srv, ServeConfig(model="/m", host=host), insecure=False) is None
    with pytest.raises(UsageError, match=r"^refusing to serve on \[::\] without an API key"):
        Serving._check_key(srv, ServeConfig(model="/m", host="[::]"), insecure=False)


# -- the supervisor spec's settings ------------------------------------------------------------
def spec_with(settings: Any) -> dict[str, Any]:
    return {**json.loads(SPEC.to_json()), "settings": settings}


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ([], "supervisor spec: settings is not an object"),
        ("fast", "supervisor spec: settings is not an object"),
        ({"interval_s": "5"}, "supervisor spec: settings.interval_s is not a number"),
        ({"interval_s": None}, "supervisor spec: settings.interval_s is not a number"),
        ({"deadline_s": True}, "supervisor spec: settings.deadline_s is not a number"),
        ({"wedge_probes": 1.5}, "supervisor spec: settings.wedge_probes is not a whole number"),
        ({"crash_restarts": 0}, "supervisor spec: settings.crash_restarts is not between 1 and "
         "604800"),
        ({"interval_s": 0.1}, "supervisor spec: settings.interval_s is not between 0.5 and "
         "604800"),
        ({"backoff_s": -1}, "supervisor spec: settings.backoff_s is not between 0 and 604800"),
        ({"crash_window_s": math.inf}, "supervisor spec: settings.crash_window_s is not between "
         "1 and 604800"),
        ({"start_timeout_s": math.nan}, "supervisor spec: settings.start_timeout_s is not "
         "between 5 and 604800"),
        ({"memory_max_pressure_pct": 101}, "supervisor spec: settings.memory_max_pressure_pct "
         "is not between 0 and 100"),
        ({"enabled": "yes"}, "supervisor spec: settings.enabled is not true or false"),
    ],
)  # fmt: skip
def test_a_setting_of_the_wrong_type_or_out_of_range_is_one_wire_error(
    settings: Any, message: str
) -> None:
    with pytest.raises(WireError) as err:
        parse_spec(spec_with(settings))
    assert str(err.value) == message


def test_the_settings_read_back_and_absent_ones_are_the_defaults() -> None:
    custom = SuperviseSettings(interval_s=1, wedge_probes=3, memory_max_pressure_pct=100.0)
    assert parse_spec(spec_with(custom.to_dict())).settings == custom
    assert parse_spec(spec_with(None)).settings == SuperviseSettings()
    assert parse_spec(spec_with({"from_a_newer_halo": 1})).settings == SuperviseSettings()
    state = {"version": 1, "cluster": "c", "state": "serving", "settings": {"interval_s": "x"}}
    with pytest.raises(WireError, match=r"^supervisor state: settings\.interval_s is not a "):
        parse_state(state)


def test_the_settings_take_what_the_config_takes() -> None:
    """[serve.supervise] is checked in config/load.py with the same limits."""
    from halo_cluster.config import load as config_load
    from halo_cluster.supervision import LIMITS

    limits = {key: (kind, low) for key, (kind, low, _high) in LIMITS.items()}
    assert limits == config_load._SUPERVISE_LIMITS
    assert {high for key, (_k, _l, high) in LIMITS.items() if "pressure" not in key} == {
        config_load._SUPERVISE_MAX
    }


SETTING = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4)


@given(
    st.dictionaries(st.sampled_from([*SuperviseSettings.__dataclass_fields__, "x"]), SETTING)
    | st.lists(SETTING, max_size=2)
    | SETTING
)
def test_any_settings_are_read_in_range_or_are_one_wire_error(settings: Any) -> None:
    from halo_cluster.supervision import LIMITS

    try:
        read = parse_spec(spec_with(settings)).settings
    except WireError as err:
        assert str(err).startswith("supervisor spec: settings") and "\n" not in str(err)
        return
    for key, (kind, low, high) in LIMITS.items():
        value = getattr(read, key)
        assert type(value) is kind and low <= value <= high
    assert isinstance(read.enabled, bool)
