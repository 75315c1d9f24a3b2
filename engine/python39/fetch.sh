#!/usr/bin/env bash
# A real CPython 3.9 (Debian 11's python3.9 3.9.2-1) for the tests of halo's node side, which
# must run on Python >= 3.9: the pinned Debian packages are downloaded, checked against their
# sha256 and unpacked (no installation, no root) into a cache keyed by the pins; a wrapper
# `bin/python3.9` sets the library path and PYTHONHOME. Prints the cache directory.
#   engine/python39/fetch.sh [CACHE_BASE]   (default ~/.cache/halo)
set -euo pipefail
base="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/halo}"
mirror="${HALO_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
here="$(cd "$(dirname "$0")" && pwd)"
pins="$here/packages.txt"
key="$(sha256sum "$pins" | cut -c1-12)"
dest="$base/python-3.9.2-deb11-$key"
if [ -x "$dest/bin/python3.9" ] && "$dest/bin/python3.9" -c 'import ssl, ctypes, decimal' 2>/dev/null; then
    echo "$dest"; exit 0
fi
mkdir -p "$base"
stage="$(mktemp -d "$base/.python39.XXXXXX")"
trap 'rm -rf "$stage"' EXIT
while read -r sum path; do
    case "$sum" in ''|'#'*) continue ;; esac
    deb="$stage/$(basename "$path")"
    curl -fsSL --retry 3 -o "$deb" "$mirror/pool/main/$path"
    echo "$sum  $deb" | sha256sum -c --quiet - || { echo "checksum mismatch: $path" >&2; exit 1; }
    dpkg-deb -x "$deb" "$stage/root"
    rm -f "$deb"
done < "$pins"
mkdir -p "$stage/root/bin"
cat > "$stage/root/bin/python3.9" <<'WRAP'
#!/bin/sh
# Debian 11's CPython 3.9, unpacked here: its libraries and standard library from this tree
here="$(cd "$(dirname "$0")/.." && pwd)"
LD_LIBRARY_PATH="$here/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
PYTHONHOME="$here/usr" exec "$here/usr/bin/python3.9" "$@"
WRAP
chmod 755 "$stage/root/bin/python3.9"
ln -s python3.9 "$stage/root/bin/python3"
"$stage/root/bin/python3.9" -c 'import ssl, ctypes, decimal, zipfile, hashlib'
rm -rf "$dest"
mv "$stage/root" "$dest"
echo "$dest"
