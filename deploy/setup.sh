#!/usr/bin/env bash
# Sets up icegov on a Debian machine with python3: a virtualenv in .venv with icegov installed.
#   deploy/setup.sh          runtime only (what `icegov serve` needs)
#   deploy/setup.sh test     plus the test tools: pyspark, the Iceberg Spark runtime jar, a
#                            JDK 17 and a PostgreSQL server for the Idempotency-Key tests
#                            (installed with apt when missing and we are root)
# Re-running is cheap: packages are reinstalled only when pyproject.toml changes.
set -euo pipefail
exec 1>&2  # setup talks on stderr: `make serve`'s stdout is the audit stream alone
cd "$(dirname "$0")/.."
profile=${1:-runtime}
venv=.venv

missing=()
python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
if [ "$profile" = test ]; then
  if ! command -v javac >/dev/null 2>&1 && ! ls -d /usr/lib/jvm/java-17-openjdk-* >/dev/null 2>&1; then
    missing+=(openjdk-17-jdk-headless)
  fi
  if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    missing+=(postgresql)
  fi
fi
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing ${missing[*]} with apt-get"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "setup: missing system packages: ${missing[*]}" >&2
    echo "setup: install them (e.g. sudo apt-get install -y ${missing[*]}) and run again" >&2
    exit 1
  fi
fi

[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
extras=""
[ "$profile" = test ] && extras="[test]"
stamp="$venv/.installed-$profile-$(sha1sum pyproject.toml | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  echo "setup: installing icegov$extras into $venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q -e ".$extras"
  rm -f "$venv"/.installed-"$profile"-*
  touch "$stamp"
fi
