# The Python interpreter of the tests: the project's virtual environment, which
# scripts/setup_python.sh creates outside the clone and fills from tests/requirements.txt.
#
# BATON_PYTHON (cache, FILEPATH) defaults to $BATON_VENV/bin/python, or, without BATON_VENV, to
# ${XDG_CACHE_HOME:-$HOME/.cache}/baton/venv/bin/python: the same path as setup_python.sh. It is
# the default even where that venv does not exist yet, so that running setup_python.sh after
# configuring needs no reconfigure; set -DBATON_PYTHON=... for another interpreter.
#
# baton_add_python_test(NAME name SCRIPT script.py [ARGS args...]) adds a ctest that runs the
# script with BATON_PYTHON and skips (exit 77, SKIP_RETURN_CODE) when that interpreter is missing.
# The scripts themselves skip (77) when a module they import is missing. Set the test's other
# properties (labels, timeout) with set_tests_properties as usual.
include_guard(GLOBAL)

if(NOT "$ENV{BATON_VENV}" STREQUAL "")
  set(_baton_venv "$ENV{BATON_VENV}")
elseif(NOT "$ENV{XDG_CACHE_HOME}" STREQUAL "")
  set(_baton_venv "$ENV{XDG_CACHE_HOME}/baton/venv")
else()
  set(_baton_venv "$ENV{HOME}/.cache/baton/venv")
endif()
set(BATON_PYTHON "${_baton_venv}/bin/python" CACHE FILEPATH
    "Python interpreter of the tests (the venv of scripts/setup_python.sh)")
unset(_baton_venv)

function(baton_add_python_test)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "NAME;SCRIPT" "ARGS")
  if(NOT arg_NAME OR NOT arg_SCRIPT OR arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "usage: baton_add_python_test(NAME name SCRIPT script [ARGS args...])")
  endif()
  # $0 is the interpreter, "$@" the script and its arguments. Checked when the test runs, not
  # at configure time: the venv may be made after configuring.
  add_test(NAME ${arg_NAME}
    COMMAND sh -c [=[
if [ ! -x "$0" ]; then
  echo "SKIP: no Python interpreter at $0"
  echo "(run scripts/setup_python.sh, or configure with -DBATON_PYTHON=...)"
  exit 77
fi
exec "$0" "$@"]=]
            ${BATON_PYTHON} ${arg_SCRIPT} ${arg_ARGS})
endfunction()
