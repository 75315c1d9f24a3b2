#!/usr/bin/env bash
# Build (or reuse) llama.cpp's RPC engine for the CPU: ggml-rpc-server (the worker),
# llama-server (the head's OpenAI server) and llama-bench (its own benchmark).
#
# The source is the llama.cpp tree vendored in one pinned llama-cpp-python source
# distribution from the package registry; nothing else is downloaded. The build lives in a
# cache outside the clone keyed by the pin, the compiler and the CPU's instruction set
# (the build is -march=native); .llama-cpp in the clone links to it. Built once (about 6 min
# on 2 cores), then reused: idempotent. The RDMA transport is built in when libibverbs'
# development files are present (the Makefile installs them as root); build.json says so.
#
#   engine/llama_cpp/build.sh [PYTHON]      env: HALO_CACHE (default ~/.cache/halo), JOBS
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$(dirname "$here")")"
python="${1:-python3}"
pin="llama-cpp-python==0.3.36"
version="${pin#*==}"
start=$(date +%s)

for tool in cmake c++ tar; do
  command -v "$tool" >/dev/null || { echo "llama.cpp: '$tool' is missing (Debian: apt-get install cmake g++)" >&2; exit 2; }
done
rdma=OFF
if [ -e /usr/include/infiniband/verbs.h ]; then rdma=ON; fi
cpu="$( { grep -m1 -E '^(flags|Features)' /proc/cpuinfo || true; } | sha256sum | cut -c1-8)"
compiler="$(c++ --version | head -1)"
flags=(-DCMAKE_BUILD_TYPE=Release -DGGML_RPC=ON -DGGML_RPC_RDMA="$rdma" -DGGML_NATIVE=ON
  -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF)
targets=(ggml-rpc-server llama-server llama-bench)
key="$( { echo "$pin $(uname -m) $cpu"; echo "$compiler"; echo "${flags[*]} ${targets[*]}"; } | sha256sum | cut -c1-12)"
cache="${HALO_CACHE:-$HOME/.cache/halo}"
out="$cache/llama.cpp-$version-$key"

mkdir -p "$cache"
exec 9>"$cache/.llama.cpp.lock"
flock 9  # one build at a time; a second run waits, then reuses it

if [ ! -e "$out/.complete" ]; then
  echo "llama.cpp: building $out from $pin's vendored tree (RPC on, CPU backend, RDMA $rdma; about 6 min on 2 cores)"
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  "$python" -m pip download --quiet --no-deps --no-binary :all: "$pin" -d "$work" 2>"$work/pip.log" \
    || { cat "$work/pip.log" >&2; exit 1; }
  tar -xzf "$work"/llama_cpp_python-"$version".tar.gz -C "$work"
  src="$work/llama_cpp_python-$version/vendor/llama.cpp"
  generator=(); if command -v ninja >/dev/null; then generator=(-G Ninja); fi
  cmake -S "$src" -B "$work/build" "${generator[@]}" "${flags[@]}" \
    >"$work/configure.log" 2>&1 || { tail -30 "$work/configure.log" >&2; exit 1; }
  cmake --build "$work/build" -j "${JOBS:-$(nproc)}" --target "${targets[@]}" \
    >"$work/build.log" 2>&1 || { tail -40 "$work/build.log" >&2; exit 1; }
  staged="$out.tmp.$$"  # assembled beside its place (same filesystem), then renamed into it
  trap 'rm -rf "$work" "$staged"' EXIT
  mkdir -p "$staged/bin"
  for exe in "${targets[@]}"; do
    install -m 0755 "$work/build/bin/$exe" "$staged/bin/$exe"
  done
  ln -s ggml-rpc-server "$staged/bin/rpc-server"  # the name most guides use
  "$python" - "$staged" "$pin" "$rdma" "$(( $(date +%s) - start ))" "$compiler" <<'PY'
import json, sys
out, pin, rdma, seconds, compiler = sys.argv[1:]
info = {"source": pin, "rdma": rdma == "ON", "backend": "cpu", "native": True,
        "build_s": int(seconds), "compiler": compiler,
        "binaries": ["ggml-rpc-server", "llama-server", "llama-bench"]}
with open(f"{out}/build.json", "w") as f:
    json.dump(info, f, indent=2)
    f.write("\n")
PY
  touch "$staged/.complete"
  rm -rf "$out"
  mv "$staged" "$out"
else
  echo "llama.cpp: reusing $out"
fi

for exe in "${targets[@]}"; do
  [ -x "$out/bin/$exe" ] || { echo "llama.cpp: $out/bin/$exe is missing: remove $out and run again" >&2; exit 1; }
done
"$out/bin/llama-server" --version >/dev/null 2>&1 || { echo "llama.cpp: $out/bin/llama-server does not run" >&2; exit 1; }
ln -sfn "$out" "$repo/.llama-cpp"
size="$(du -sh "$out" 2>/dev/null | cut -f1)"
echo "llama.cpp: ready in $(( $(date +%s) - start )) s, $size at $out (.llama-cpp links to it)"
