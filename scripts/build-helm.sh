#!/usr/bin/env bash
# Build helm (for the chart tests) from the pinned Go module in tools/helm into a cache outside
# the repository, keyed by the hash of tools/helm/go.sum: a second run with the same go.sum only
# prints the cached path. Prints the path of the helm binary as its last line.
#
#   scripts/build-helm.sh            build (or reuse) and print the binary's path
#   LAHAR_CACHE=/elsewhere ...       cache root (default ~/.cache/lahar)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
module="$repo/tools/helm"
cache_root=${LAHAR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lahar}

fail() { echo "build-helm: step '$1' failed: $2" >&2; exit 1; }

command -v go >/dev/null || fail "find go" "no Go toolchain on PATH (install Go 1.26+)"
[ -f "$module/go.sum" ] || fail "read go.sum" "$module/go.sum is missing"

key=$(sha256sum "$module/go.sum" | cut -c1-16)
out="$cache_root/helm/$key"
helm="$out/bin/helm"

if [ -x "$helm" ] && "$helm" version --short >/dev/null 2>&1; then
    echo "build-helm: cached $("$helm" version --short) at $out" >&2
    echo "$helm"
    exit 0
fi

mkdir -p "$out/bin"
tmp="$out/bin/.helm.$$"
trap 'rm -f "$tmp"' EXIT
echo "build-helm: downloading modules (go mod download)" >&2
(cd "$module" && go mod download) || fail "go mod download" "could not fetch the modules in $module/go.mod"
echo "build-helm: building helm.sh/helm/v3/cmd/helm (a few minutes cold on 2 cores)" >&2
start=$(date +%s)
(cd "$module" && CGO_ENABLED=0 go build -trimpath -o "$tmp" helm.sh/helm/v3/cmd/helm) \
    || fail "go build helm" "see the compiler output above"
mv "$tmp" "$helm"  # atomic: a concurrent reader sees the old binary or the whole new one
"$helm" version --short >/dev/null || fail "run helm" "$helm does not run"
echo "build-helm: built $("$helm" version --short) in $(( $(date +%s) - start )) s at $out" >&2
echo "$helm"
