#!/usr/bin/env bash
# Build Volcano's scheduler (vc-scheduler) at a pinned release for `lahar bench peers`, into a
# cache outside the repository keyed by the release's commit: a second run only checks the binary
# and prints its folder. Prints the bin directory (vc-scheduler, crds/) as its last line. Bench infrastructure only.
#
#   VOLCANO_SRC=/path/to/volcano scripts/build-volcano.sh
#
# The Go module proxy refuses volcano.sh/volcano (403 "not available" for every version), so the
# source comes from a git clone of Volcano named by VOLCANO_SRC (a work tree or a bare/mirror git
# directory); the pinned tag is exported from it with `git archive`, so local changes in that clone
# never leak in. Volcano's own go.mod (its k8s.io replace lines, volcano.sh/apis from its staging
# tree) and go.sum are used as released; every other module comes from the module proxy.
#
#   VOLCANO_VERSION=v1.15.1          the release tag (default below)
#   LAHAR_CACHE=/elsewhere           cache root (default ~/.cache/lahar)
set -euo pipefail

version=${VOLCANO_VERSION:-v1.15.1}
cache_root=${LAHAR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lahar}

fail() { echo "build-volcano: step '$1' failed: $2" >&2; exit 1; }

[ -n "${VOLCANO_SRC:-}" ] || fail "find the source" \
    "VOLCANO_SRC is not set (a git clone of Volcano holding tag $version; the Go module proxy does not serve volcano.sh/volcano)"
command -v go >/dev/null || fail "find go" "no Go toolchain on PATH"
commit=$(git -C "$VOLCANO_SRC" rev-parse --verify --quiet "$version^{commit}") \
    || fail "find the release" "$VOLCANO_SRC has no tag $version"

bin="$cache_root/volcano/$version-${commit:0:12}/bin"
mkdir -p "$(dirname "$bin")"
exec 9>"$bin.lock"
flock 9

# Volcano's CRDs (PodGroup, Queue, HyperNode, ...) as that release ships them: vc-scheduler waits
# for an informer of each kind it watches, so the bench installs these, not Lahar's.
copy_crds() {
    rm -rf "$1/crds" && mkdir -p "$1/crds"
    git -C "$VOLCANO_SRC" archive --format=tar "$commit" config/crd/volcano/bases \
        | tar -x -C "$1/crds" --strip-components=4 || fail "export the CRDs" "config/crd/volcano/bases of $version"
}

if "$bin/vc-scheduler" --version >/dev/null 2>&1; then
    [ -d "$bin/crds" ] || copy_crds "$bin"
    echo "build-volcano: cached vc-scheduler $version at $bin" >&2
    echo "$bin"
    exit 0
fi

work=$(mktemp -d "$bin.building.XXXXXX")
trap 'rm -rf "$work"' EXIT
git -C "$VOLCANO_SRC" archive --format=tar "$commit" | tar -x -C "$work" \
    || fail "export the source" "git archive $version from $VOLCANO_SRC"
echo "build-volcano: downloading modules (go mod download)" >&2
(cd "$work" && go mod download) || fail "go mod download" "could not fetch the modules of Volcano $version"
echo "build-volcano: building vc-scheduler $version (cold: many minutes on 2 cores)" >&2
start=$(date +%s)
# Volcano's Makefile stamps its version the same way (pkg/version).
stamp="-X volcano.sh/volcano/pkg/version.Version=$version -X volcano.sh/volcano/pkg/version.GitSHA=$commit"
mkdir -p "$work/out"
(cd "$work" && CGO_ENABLED=0 go build -trimpath -ldflags="$stamp" -o "$work/out/" ./cmd/scheduler) \
    || fail "go build" "see the compiler output above"
mv "$work/out/scheduler" "$work/out/vc-scheduler"
"$work/out/vc-scheduler" --version >/dev/null 2>&1 || fail "run the binary" "vc-scheduler --version failed"
copy_crds "$work/out"
rm -rf "$bin" && mv "$work/out" "$bin"
echo "build-volcano: built vc-scheduler $version in $(( $(date +%s) - start )) s at $bin" >&2
echo "$bin"
