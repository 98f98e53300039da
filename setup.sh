#!/usr/bin/env bash
# Set up everything in .venv (CPU PyTorch, the grader and its test tools), then grade the
# built-in example submission and print where its reports are.
# On a GPU runner, install CUDA PyTorch into .venv first (see README, "GPU runner").
set -euo pipefail
cd "$(dirname "$0")"

python3 -m venv .venv
# The CPU wheel: an unpinned `torch` would pull several GB of CUDA packages.
.venv/bin/python -m pip install --quiet --disable-pip-version-check "torch==2.13.0" \
  || .venv/bin/python -m pip show --quiet torch   # a runner may already hold its own CUDA build
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev,slurm,data]'

echo "== grading the built-in example (the seed-004 student's code) =="
.venv/bin/grade fixtures/submissions/seed004_student --out out/example
