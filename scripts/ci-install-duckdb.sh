#!/usr/bin/env bash
# Installs the prebuilt DuckDB shared library that `src/analyze` links against, so the build
# does not compile DuckDB's C++ (the `bundled` feature: 26–35 min on 2 cores).
#
# The library comes from the npm package @duckdb/node-bindings-linux-x64 (DuckDB's own
# build, shipped inside a registry package), whose version must match the `duckdb` crate in
# Cargo.toml: crate 1.10506.x ↔ DuckDB 1.5.6. Change both together.
#
# Result: $TABCONTAM_DUCKDB_DIR (default ~/.cache/tabcontam-duckdb/1.5.6)/libduckdb.so.
# build.rs finds it there (or in $DUCKDB_LIB_DIR) and bakes an rpath into every binary.
# Idempotent: does nothing when the library is already there.
set -euo pipefail

DUCKDB_VERSION="1.5.6"
NPM_PACKAGE="@duckdb/node-bindings-linux-x64@${DUCKDB_VERSION}-r.1"
dir="${TABCONTAM_DUCKDB_DIR:-$HOME/.cache/tabcontam-duckdb/$DUCKDB_VERSION}"

if [ -s "$dir/libduckdb.so" ]; then
    echo "libduckdb $DUCKDB_VERSION present in $dir"
    exit 0
fi

case "$(uname -s)-$(uname -m)" in
    Linux-x86_64) ;;
    *)
        echo "error: no prebuilt libduckdb for $(uname -s)-$(uname -m) in this script;" >&2
        echo "       install DuckDB $DUCKDB_VERSION's libduckdb and set DUCKDB_LIB_DIR to its folder" >&2
        exit 1
        ;;
esac
if ! command -v npm >/dev/null 2>&1; then
    # The machines ship Node.js and npm; Debian's npm is the fallback.
    echo "npm missing: installing Debian's npm"
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    DEBIAN_FRONTEND=noninteractive $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends npm >/dev/null
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "$NPM_PACKAGE" >/dev/null)
tar -xzf "$work"/*.tgz -C "$work" package/libduckdb.so package/LICENSE
if ! grep -aq "v$DUCKDB_VERSION" "$work/package/libduckdb.so"; then
    echo "error: $NPM_PACKAGE does not hold DuckDB v$DUCKDB_VERSION" >&2
    exit 1
fi
mkdir -p "$dir"
# Moved into place last, so an interrupted run leaves no half-written library behind.
cp "$work/package/LICENSE" "$dir/LICENSE"
cp "$work/package/libduckdb.so" "$dir/libduckdb.so.partial"
mv "$dir/libduckdb.so.partial" "$dir/libduckdb.so"
echo "installed libduckdb $DUCKDB_VERSION into $dir"
