#!/usr/bin/env bash
# Build a real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler) for the real-cluster tests from the pinned Go module in tools/k8s into a cache
# outside the repository, keyed by the hash of tools/k8s/go.sum: a second run with the same go.sum
# only prints the cached directory. Prints the bin directory as its last line.
#
#   scripts/build-k8s.sh             build (or reuse) and print the bin directory
#   LAHAR_CACHE=/elsewhere ...       cache root (default ~/.cache/lahar)
#   VOLCANO_SRC=/volcano/clone ...   also build Volcano's vc-scheduler (scripts/build-volcano.sh)
#
# Cold, on a 2-core machine, this takes a long while (see docs/real-cluster.md): run it under
# `lowprio` where benchmarks share the machine.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
module="$repo/tools/k8s"
cache_root=${LAHAR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lahar}
binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler)
packages=(./cmd/etcd k8s.io/kubernetes/cmd/kube-apiserver
    k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler)

fail() { echo "build-k8s: step '$1' failed: $2" >&2; exit 1; }

all_built() {
    local name
    for name in "${binaries[@]}"; do
        "$1/$name" --version >/dev/null 2>&1 || return 1
    done
    # Built by an older recipe without the version stamped in: build again.
    [ "$("$1/kube-apiserver" --version)" = "Kubernetes $version" ]
}

command -v go >/dev/null || fail "find go" "no Go toolchain on PATH (install Go 1.26+)"
[ -f "$module/go.sum" ] || fail "read go.sum" "$module/go.sum is missing"

# The kube binaries report their version from variables `make` stamps in with -ldflags; without
# them they say v0.0.0-master, and kubectl and clients would see no version at all.
version=$(cd "$module" && go list -m -f '{{.Version}}' k8s.io/kubernetes) || fail "read the pinned version" "go list -m k8s.io/kubernetes"
minor=$(echo "$version" | cut -d. -f2)
stamp=""
for package in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    stamp+=" -X $package.gitVersion=$version -X $package.gitMajor=1 -X $package.gitMinor=$minor"
    stamp+=" -X $package.gitTreeState=clean -X $package.buildDate=1970-01-01T00:00:00Z"
done

key=$(sha256sum "$module/go.sum" | cut -c1-16)
bin="$cache_root/k8s/$key/bin"
mkdir -p "$(dirname "$bin")"
# One build at a time per key: a second caller (another test session) waits, then reuses it.
exec 9>"$bin.lock"
flock 9

# With VOLCANO_SRC set, Volcano's scheduler for `lahar bench peers` too (scripts/build-volcano.sh,
# its own cache); its failure is reported and does not fail this build: the bench names the reason.
build_volcano() {
    [ -n "${VOLCANO_SRC:-}" ] || return 0
    "$repo/scripts/build-volcano.sh" >&2 || echo "build-k8s: Volcano was not built (see above)" >&2
}

if all_built "$bin"; then
    echo "build-k8s: cached $("$bin/kube-apiserver" --version) at $bin" >&2
    build_volcano
    echo "$bin"
    exit 0
fi

# Build into a sibling directory and rename it into place: a concurrent reader sees no bin
# directory or a whole one, never half the binaries.
staging=$(mktemp -d "$bin.building.XXXXXX")
trap 'rm -rf "$staging"' EXIT
echo "build-k8s: downloading modules (go mod download)" >&2
(cd "$module" && go mod download) || fail "go mod download" "could not fetch the modules in $module/go.mod"
echo "build-k8s: building ${binaries[*]} (cold: tens of minutes on 2 cores)" >&2
start=$(date +%s)
(cd "$module" && CGO_ENABLED=0 go build -trimpath -ldflags="$stamp" -o "$staging/" "${packages[@]}") \
    || fail "go build" "see the compiler output above"
all_built "$staging" || fail "run the binaries" "a binary in $staging does not print its --version"
rm -rf "$bin" && mv "$staging" "$bin" && trap - EXIT
echo "build-k8s: built $("$bin/kube-apiserver" --version) in $(( $(date +%s) - start )) s at $bin" >&2
build_volcano
echo "$bin"
