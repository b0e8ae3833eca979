#!/usr/bin/env bash
# Vendor the viewer's (/ui) third-party browser code into gateway/web/static/ui/vendor/
# so that the page needs no CDN and no build step (the gateway may run offline).
#
# Reproducible: the exact version is pinned below; the script installs it with npm
# into a throw-away directory, copies only the prebuilt browser file and the license
# texts, and writes VERSIONS.txt (version, npm integrity, sha256 of every file).
# Running it twice gives byte-identical output.
#
# Usage: scripts/vendor-ui.sh            (needs node + npm and the npm registry)
#
# What: @dagrejs/dagre lays out the lineage DAG. Its dist/dagre.min.js is an IIFE
# that defines the global `dagre` and bundles @dagrejs/graphlib (whose license is
# copied too). The source map it names is not vendored: browsers fetch it only
# when developer tools are open.
set -euo pipefail

DAGRE_VERSION="3.1.3"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${repo_root}/gateway/web/static/ui/vendor"

for tool in node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "vendor-ui: '$tool' not found on PATH (install Node.js >= 18 with npm)" >&2
    exit 1
  fi
done

work="$(mktemp -d "${TMPDIR:-/tmp}/vendor-ui.XXXXXX")"
trap 'rm -rf "$work"' EXIT

cat >"${work}/package.json" <<JSON
{
  "name": "vendor-ui-tmp",
  "private": true,
  "dependencies": {
    "@dagrejs/dagre": "${DAGRE_VERSION}"
  }
}
JSON

echo "vendor-ui: installing @dagrejs/dagre@${DAGRE_VERSION} into ${work}" >&2
(
  cd "$work"
  npm install --no-audit --no-fund --ignore-scripts --loglevel=error >/dev/null
)

nm="${work}/node_modules"
got="$(node -p "require('${nm}/@dagrejs/dagre/package.json').version")"
if [[ "$got" != "$DAGRE_VERSION" ]]; then
  echo "vendor-ui: expected @dagrejs/dagre@${DAGRE_VERSION}, npm installed ${got}" >&2
  exit 1
fi
graphlib_version="$(node -p "require('${nm}/@dagrejs/graphlib/package.json').version")"

rm -rf "$dest"
mkdir -p "${dest}/licenses"
cp "${nm}/@dagrejs/dagre/dist/dagre.min.js" "${dest}/dagre.min.js"
cp "${nm}/@dagrejs/dagre/LICENSE" "${dest}/licenses/dagre.LICENSE.txt"
cp "${nm}/@dagrejs/graphlib/LICENSE" "${dest}/licenses/graphlib.LICENSE.txt"

integrity() {
  node -p "require('${work}/package-lock.json').packages['node_modules/$1'].integrity"
}

{
  echo "# Viewer assets vendored by scripts/vendor-ui.sh (do not edit by hand)."
  echo "# Re-run the script to update; bump the pinned version at its top."
  echo
  echo "@dagrejs/dagre ${DAGRE_VERSION} $(integrity @dagrejs/dagre)"
  echo "@dagrejs/graphlib ${graphlib_version} $(integrity @dagrejs/graphlib) (bundled inside dagre.min.js; license only)"
  echo
  echo "# Served files:"
  echo "#   dagre.min.js <- @dagrejs/dagre/dist/dagre.min.js (IIFE, global dagre)"
  echo
  echo "# sha256:"
  (cd "$dest" && find . -type f ! -name VERSIONS.txt | LC_ALL=C sort | sed 's|^\./||' \
    | xargs sha256sum)
} >"${dest}/VERSIONS.txt"

echo "vendor-ui: wrote $(du -sh "$dest" | cut -f1) to ${dest}" >&2
