#!/usr/bin/env bash
# Set up a development environment from scratch: a virtual environment in .venv with Lahar and its
# dependencies (and the dev extra), plus Debian's kubectl and prometheus when running as root and
# they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "Lahar needs Python >= 3.11 (found $("$PYTHON" --version 2>&1))" >&2
    exit 1
fi

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    missing=()
    "$PYTHON" -m venv --help >/dev/null 2>&1 || missing+=(python3-venv)
    command -v kubectl >/dev/null || missing+=(kubernetes-client)
    command -v gcc >/dev/null || missing+=(gcc)
    command -v prometheus >/dev/null || missing+=(prometheus)  # tests/observability: a real scrape, promtool
    # The dashboard's picture (scripts/render-dashboard.py): a headless Chromium screenshot.
    command -v chromium-headless-shell >/dev/null || command -v chromium >/dev/null || missing+=(chromium-headless-shell)
    # The co-location benchmark's third-party online services and BE kinds (lahar bench colocation)
    command -v redis-server >/dev/null || missing+=(redis-server)
    command -v memcached >/dev/null || missing+=(memcached)
    command -v stress-ng >/dev/null || missing+=(stress-ng)
    command -v fio >/dev/null || missing+=(fio)
    command -v nginx >/dev/null || missing+=(nginx-light)
    if [ ${#missing[@]} -gt 0 ]; then
        echo "installing Debian packages: ${missing[*]}"
        apt-get update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
    fi
fi

if [ ! -x .venv/bin/python ]; then
    echo "creating .venv"
    "$PYTHON" -m venv .venv
fi
stamp=.venv/.lahar-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ setup.py -nt "$stamp" ]; then
    echo "installing Lahar and its dependencies into .venv"
    .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
    .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
    touch "$stamp"
fi

# Bytecode for Lahar's own modules, as `pip install` writes it for an installed package (the
# image's too). An editable install has none, and where PYTHONDONTWRITEBYTECODE is set Python never
# writes it: every start of a program compiled each of its modules again (about 0.1 CPU-s of
# `lahar scheduler`'s start here, docs/performance.md). Up-to-date files are skipped; a file
# edited since is compiled in memory at its next import, as before.
.venv/bin/python -m compileall -q lahar agent scheduler controller apiserver federation node up bench examples >/dev/null  # setup.py's MAPPED
