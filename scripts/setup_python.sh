#!/usr/bin/env bash
# Creates the tests' Python virtual environment and installs tests/requirements.txt into it.
# Called by scripts/setup.sh; needs no root.
#
# The venv lives outside the clone, at $BATON_VENV, by default
# ${XDG_CACHE_HOME:-$HOME/.cache}/baton/venv (cmake/PythonEnv.cmake computes the same path for
# BATON_PYTHON). It is made with the python3 first on PATH (pyenv's, not Debian's), and pip
# installs only into it. pip runs only when tests/requirements.txt differs from the last
# install (its sha256 is kept in the venv); otherwise this prints one line and takes well under
# a second. A venv whose interpreter no longer runs, or is another Python version than the
# python3 on PATH, is made anew. Tests never install anything.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
requirements="$root/tests/requirements.txt"
venv="${BATON_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/baton/venv}"
stamp="$venv/.baton-requirements.sha256"

python="$(command -v python3)" || { echo "setup: no python3 on PATH" >&2; exit 1; }
want_version="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
have_version="$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' \
                2>/dev/null || true)"

if [ "$have_version" != "$want_version" ]; then
  if [ -e "$venv" ]; then
    # Only ever delete what is a venv (or an empty directory): $BATON_VENV may be mistyped.
    if [ ! -f "$venv/pyvenv.cfg" ] && [ -n "$(ls -A "$venv")" ]; then
      echo "setup: $venv exists and is not a Python venv; remove it or set BATON_VENV" >&2
      exit 1
    fi
    echo "setup: recreating $venv (Python ${have_version:-unusable} -> $want_version)"
    rm -rf "$venv"
  fi
  echo "setup: creating Python $want_version venv $venv ($python)"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv"
fi

want="$(sha256sum "$requirements" | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "setup: Python venv $venv up to date"
  exit 0
fi
echo "setup: pip install -r tests/requirements.txt into $venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
  -r "$requirements"
if ! problems="$("$venv/bin/python" -m pip check --disable-pip-version-check 2>&1)"; then
  echo "setup: pip check: $problems" >&2
  exit 1
fi
echo "$want" >"$stamp"
