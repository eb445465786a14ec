#!/usr/bin/env bash
# Re-vendors mermaid.min.js (and its licence) from the npm package `mermaid`, so the site draws
# its diagrams offline: Material for MkDocs uses a `mermaid` it finds on the page and fetches one
# from a CDN only when there is none. Usage: docs/javascripts/vendor-mermaid.sh [version]
# (default: the newest 11.x, the major version Material for MkDocs drives).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="${1:-11}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
tarball="$(cd "$scratch" && npm pack --silent "mermaid@$version")"
tar -xzf "$scratch/$tarball" -C "$scratch" package/dist/mermaid.min.js package/LICENSE
cp "$scratch/package/dist/mermaid.min.js" "$here/mermaid.min.js"
cp "$scratch/package/LICENSE" "$here/mermaid.LICENSE"
echo "vendored ${tarball%.tgz}"
