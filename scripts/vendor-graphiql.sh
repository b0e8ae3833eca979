#!/usr/bin/env bash
# Vendor the GraphiQL browser assets into gateway/web/static/graphiql/ so that the
# gateway serves its GraphQL IDE without any CDN (the service may run offline).
#
# Reproducible: exact versions are pinned below; the script installs them with npm
# into a throw-away directory, copies only the prebuilt browser files and license
# texts, and writes VERSIONS.txt (versions, npm integrity, sha256 of every file).
# Running it twice gives byte-identical output.
#
# Usage: scripts/vendor-graphiql.sh            (needs node + npm and the npm registry)
#
# Why these versions: GraphiQL 3.9.0 is the last 3.x release; it still ships a
# browser-ready UMD bundle (graphiql.min.js, exposes window.GraphiQL) that needs no
# build step and expects only the React 18 UMD globals (React 19 ships no UMD
# build). graphql is bundled inside graphiql.min.js; it is installed only to
# satisfy the peer dependency and to collect its license text.
set -euo pipefail

GRAPHIQL_VERSION="3.9.0"
REACT_VERSION="18.3.1"
REACT_DOM_VERSION="18.3.1"
GRAPHQL_VERSION="16.15.0"
# The graphql-ws browser client (UMD, global graphqlWs): GraphiQL's page uses it for
# subscriptions over graphql-transport-ws; graphiql.min.js does not bundle it.
GRAPHQL_WS_VERSION="6.4.2"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${repo_root}/gateway/web/static/graphiql"

for tool in node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "vendor-graphiql: '$tool' not found on PATH (install Node.js >= 18 with npm)" >&2
    exit 1
  fi
done

work="$(mktemp -d "${TMPDIR:-/tmp}/vendor-graphiql.XXXXXX")"
trap 'rm -rf "$work"' EXIT

cat >"${work}/package.json" <<EOF
{
  "name": "vendor-graphiql-tmp",
  "private": true,
  "dependencies": {
    "graphiql": "${GRAPHIQL_VERSION}",
    "graphql": "${GRAPHQL_VERSION}",
    "react": "${REACT_VERSION}",
    "react-dom": "${REACT_DOM_VERSION}",
    "graphql-ws": "${GRAPHQL_WS_VERSION}"
  }
}
EOF

echo "vendor-graphiql: installing graphiql@${GRAPHIQL_VERSION} react@${REACT_VERSION}" \
  "react-dom@${REACT_DOM_VERSION} graphql@${GRAPHQL_VERSION} into ${work}" >&2
(
  cd "$work"
  npm install --no-audit --no-fund --ignore-scripts --loglevel=error >/dev/null
)

nm="${work}/node_modules"

# Check that npm really installed the pinned versions.
for spec in "graphiql:${GRAPHIQL_VERSION}" "react:${REACT_VERSION}" \
            "react-dom:${REACT_DOM_VERSION}" "graphql:${GRAPHQL_VERSION}" \
            "graphql-ws:${GRAPHQL_WS_VERSION}"; do
  name="${spec%%:*}"
  want="${spec#*:}"
  got="$(node -p "require('${nm}/${name}/package.json').version")"
  if [[ "$got" != "$want" ]]; then
    echo "vendor-graphiql: expected ${name}@${want}, npm installed ${got}" >&2
    exit 1
  fi
done

rm -rf "$dest"
mkdir -p "${dest}/licenses"

# The built browser files (byte-identical copies of the published ones).
cp "${nm}/graphiql/graphiql.min.js" "${dest}/graphiql.min.js"
cp "${nm}/graphiql/graphiql.min.css" "${dest}/graphiql.min.css"
cp "${nm}/react/umd/react.production.min.js" "${dest}/react.production.min.js"
cp "${nm}/react-dom/umd/react-dom.production.min.js" "${dest}/react-dom.production.min.js"
cp "${nm}/graphql-ws/umd/graphql-ws.min.js" "${dest}/graphql-ws.min.js"

# License texts of the directly served packages (.txt so that setuptools'
# package-data globs ship them in the wheel).
cp "${nm}/graphiql/LICENSE" "${dest}/licenses/graphiql.LICENSE.txt"
cp "${nm}/react/LICENSE" "${dest}/licenses/react.LICENSE.txt"
cp "${nm}/react-dom/LICENSE" "${dest}/licenses/react-dom.LICENSE.txt"
cp "${nm}/graphql/LICENSE" "${dest}/licenses/graphql.LICENSE.txt"
cp "${nm}/graphql-ws/LICENSE.md" "${dest}/licenses/graphql-ws.LICENSE.txt"

# graphiql.min.js bundles graphiql's whole runtime dependency tree (CodeMirror,
# @graphiql/react, graphql-language-service, ...): collect every license text of
# that tree into one file, sorted for reproducibility.
node - "$nm" "${dest}/licenses/THIRD-PARTY-LICENSES.txt" <<'NODE'
const fs = require("fs");
const path = require("path");
const [nmRoot, outFile] = process.argv.slice(2);

function findPackageDir(name, fromDir) {
  // Node-style lookup: nested node_modules first, then each parent.
  let dir = fromDir;
  for (;;) {
    const candidate = path.join(dir, "node_modules", name);
    if (fs.existsSync(path.join(candidate, "package.json"))) return candidate;
    const parent = path.dirname(dir);
    if (parent === dir) return null;
    dir = parent;
  }
}

const seen = new Map(); // "name@version" -> {name, version, license, texts}
function walk(pkgDir) {
  const pkg = JSON.parse(fs.readFileSync(path.join(pkgDir, "package.json"), "utf8"));
  const key = `${pkg.name}@${pkg.version}`;
  if (seen.has(key)) return;
  const licenseFiles = fs
    .readdirSync(pkgDir)
    .filter((f) => /^(licen[cs]e|copying|notice)/i.test(f))
    .sort();
  seen.set(key, {
    name: pkg.name,
    version: pkg.version,
    license: typeof pkg.license === "string" ? pkg.license : JSON.stringify(pkg.license ?? null),
    texts: licenseFiles.map((f) => [f, fs.readFileSync(path.join(pkgDir, f), "utf8").trim()]),
  });
  const deps = Object.keys(pkg.dependencies ?? {}).sort();
  for (const dep of deps) {
    const depDir = findPackageDir(dep, pkgDir);
    if (depDir) walk(depDir);
  }
}
walk(path.join(nmRoot, "graphiql"));
seen.delete([...seen.keys()].find((k) => k.startsWith("graphiql@")));

const entries = [...seen.values()].sort((a, b) =>
  a.name === b.name ? a.version.localeCompare(b.version) : a.name.localeCompare(b.name),
);
let out =
  "Third-party software bundled in graphiql.min.js (the runtime dependency tree of\n" +
  "the graphiql npm package, as resolved by npm when the assets were vendored).\n\n";
for (const e of entries) {
  out += "=".repeat(78) + `\n${e.name}@${e.version}  (license: ${e.license})\n` + "=".repeat(78) + "\n";
  if (e.texts.length === 0) out += "(no license file in the package; see the license field above)\n";
  for (const [file, text] of e.texts) out += `--- ${file} ---\n${text}\n`;
  out += "\n";
}
fs.writeFileSync(outFile, out);
NODE

integrity() {
  node -p "require('${work}/package-lock.json').packages['node_modules/$1'].integrity"
}

{
  echo "# GraphiQL assets vendored by scripts/vendor-graphiql.sh (do not edit by hand)."
  echo "# Re-run the script to update; bump the pinned versions at its top."
  echo
  echo "graphiql ${GRAPHIQL_VERSION} $(integrity graphiql)"
  echo "react ${REACT_VERSION} $(integrity react)"
  echo "react-dom ${REACT_DOM_VERSION} $(integrity react-dom)"
  echo "graphql ${GRAPHQL_VERSION} $(integrity graphql) (bundled inside graphiql.min.js; license only)"
  echo "graphql-ws ${GRAPHQL_WS_VERSION} $(integrity graphql-ws)"
  echo
  echo "# Served files:"
  echo "#   graphiql.min.js             <- graphiql/graphiql.min.js (UMD, global GraphiQL)"
  echo "#   graphiql.min.css            <- graphiql/graphiql.min.css"
  echo "#   react.production.min.js     <- react/umd/react.production.min.js"
  echo "#   react-dom.production.min.js <- react-dom/umd/react-dom.production.min.js"
  echo "#   graphql-ws.min.js           <- graphql-ws/umd/graphql-ws.min.js (UMD, global graphqlWs)"
  echo
  echo "# sha256:"
  (cd "$dest" && find . -type f ! -name VERSIONS.txt | LC_ALL=C sort | sed 's|^\./||' \
    | xargs sha256sum)
} >"${dest}/VERSIONS.txt"

echo "vendor-graphiql: wrote $(du -sh "$dest" | cut -f1) to ${dest}" >&2
