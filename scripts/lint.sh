#!/usr/bin/env bash
# The static checks CI runs before the tests (`make lint`): ruff lint and format, mypy, import
# contracts. Fast: seconds with warm caches.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}

# The program folders (agent/, scheduler/, controller/, apiserver/, node/, up/) install as lahar.* (setup.py). mypy and import-linter read
# source trees, so build/lint/lahar links every part under its installed name.
tree=build/lint/lahar
rm -rf build/lint && mkdir -p "$tree"
for entry in lahar/* agent scheduler controller apiserver federation node up bench examples; do
    name=$(basename "$entry")
    [ "$name" = __pycache__ ] && continue
    ln -s "$PWD/$entry" "$tree/$name"
done

status=0
echo "== ruff check"; "$BIN/ruff" check --output-format concise . || status=1
echo "== ruff format --check"; "$BIN/ruff" format --check . || status=1
echo "== mypy"
# Paths back to the repository's, so editors can jump to them.
"$BIN/mypy" 2>&1 | sed -E "s#^build/lint/lahar/(agent|scheduler|controller|apiserver|federation|node|up|bench|examples)/#\1/#; s#^build/lint/##" \
    || status=1
[ "${PIPESTATUS[0]}" = 0 ] || status=1
echo "== import contracts"
(cd build/lint && "$PWD/../../$BIN/lint-imports" --no-cache ../../pyproject.toml) || status=1
exit $status
