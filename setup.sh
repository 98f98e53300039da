#!/usr/bin/env bash
# Set up everything in .venv, exactly as locked (CPU PyTorch, the grader and its test tools),
# install bubblewrap (the sandbox's namespaces) where this machine lets us, grade the built-in
# example submission and print every layer of the sandbox (`grade doctor`).
# On a GPU runner, install CUDA PyTorch into .venv first (see README, "GPU runner").
set -euo pipefail
cd "$(dirname "$0")"

# System tools: bubblewrap (instructor grading refuses to run without it) and, for the test
# suite's browser check of the HTML report, Chromium with its driver. Debian/Ubuntu as root only;
# elsewhere `grade doctor` below says what is missing and how to add it.
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  missing=""
  command -v bwrap >/dev/null 2>&1 || missing="$missing bubblewrap"
  command -v chromium >/dev/null 2>&1 || missing="$missing chromium chromium-driver"
  if [ -n "$missing" ]; then
    echo "== installing:$missing =="
    apt-get update -qq >/dev/null 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null 2>&1 \
      || echo "setup: could not install$missing (grade doctor below tells what is missing)"
  fi
fi

python3 -m venv .venv
pip_install() { .venv/bin/python -m pip install --quiet --disable-pip-version-check "$@"; }
# The lock (graders/requirements.lock) holds the exact version of everything below; nothing is
# resolved beyond it, so a newer release on the package index changes nothing here. Moving it is
# one deliberate command: bash scripts/upgrade-lock.sh.
LOCK=graders/requirements.lock
# torch first, alone: the CPU wheel; with its dependencies resolved, an unpinned or unlisted torch
# would pull several GB of CUDA packages.
pip_install "$(grep -E '^torch==' "$LOCK")" \
  || .venv/bin/python -m pip show --quiet torch   # a runner may already hold its own CUDA build
pip_install --no-deps -r "$LOCK"
pip_install --no-deps --no-build-isolation -e .   # built with the lock's setuptools
.venv/bin/python -m pip check
.venv/bin/python -m graders.lock check || echo "setup: this .venv holds more or other than the lock (above)"

echo "== the sandbox on this machine (grade doctor) =="
if .venv/bin/grade doctor; then
  unsafe=""
else
  # The example is our own shipped fixture, so it may run without isolation; a student's may not.
  unsafe="--unsafe-no-sandbox"
  echo "setup: this machine cannot isolate student code (see above): instructor grading will refuse" \
       "to run here; the built-in example is graded with --unsafe-no-sandbox"
fi

echo "== grading the built-in example (the seed-004 student's code) =="
.venv/bin/grade fixtures/bert/submissions/seed004_student --out out/example $unsafe
