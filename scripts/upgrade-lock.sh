#!/usr/bin/env bash
# The one deliberate upgrade of the grader's environment (docs/engine.md, "The locked environment"):
#   1. re-resolve pyproject.toml's ranges in a scratch environment and write graders/requirements.lock
#      (torch stays at the lock's release unless --torch VERSION);
#   2. rebuild .venv from the new lock (bash setup.sh);
#   3. re-record every pack's golden answers with the new versions (grade build --golden);
#   4. run the test suite.
# Then review `git diff` (the lock, each pack's golden/) and commit it as one change.
set -euo pipefail
cd "$(dirname "$0")/.."

torch_args=()
if [ "${1:-}" = "--torch" ] && [ -n "${2:-}" ]; then
  torch_args=(--torch "$2")
elif [ $# -gt 0 ]; then
  echo "usage: bash scripts/upgrade-lock.sh [--torch VERSION]" >&2
  exit 2
fi

[ -x .venv/bin/python ] || { echo "upgrade-lock: run bash setup.sh once first (the lock is written by the grader's code)" >&2; exit 2; }
echo "== 1/4 refreshing graders/requirements.lock =="
.venv/bin/python -m graders.lock refresh "${torch_args[@]}"
echo "== 2/4 rebuilding .venv from the new lock =="
rm -rf .venv
bash setup.sh
echo "== 3/4 re-recording every pack's golden answers =="
.venv/bin/grade build --golden
echo "== 4/4 the test suite =="
.venv/bin/pytest
echo "upgrade-lock: done; review and commit graders/requirements.lock and graders/packs/*/golden/ together"
