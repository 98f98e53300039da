#!/usr/bin/env bash
# The GPU rehearsal's table in one call on a bare GPU machine, with nothing fetched there.
#
# Such a machine has Python 3.12, PyTorch and transformers, but not the grader's other dependencies
# (jsonschema, nbformat, submitit, ...) nor bubblewrap, and no network. So, in two steps:
#
#   1. here, with the package index reachable (a Debian/Ubuntu machine for bubblewrap's .deb):
#        bash benchmarks/gpu-runner.sh prepare            # fills gpu-wheels/ (ignored by git, ~5 MB)
#      which runs with $PYTHON (default python3; any Python with pip), for the runner's Python
#      3.12 on x86_64,
#        pip download --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
#            --platform manylinux_2_17_x86_64 --platform any -d gpu-wheels jsonschema nbformat ...
#        apt-get download bubblewrap                      # into gpu-wheels/
#   2. on the runner, with gpu-wheels/ carried beside the tree (64 MiB at most):
#        bash benchmarks/gpu-runner.sh run [FIGURES]      # FIGURES: default $OUT, else gpu-figures/
#      installs the wheels into a virtual environment that sees the system's PyTorch and
#      transformers, bubblewrap unpacked from its .deb onto PATH (grade doctor says whether it
#      isolates there; else container mode), then runs benchmarks/bench_gpu_rehearsal.py: the steps
#      RUNNER_STEPS (default: cold cache, warm cache, one grade --parts finetune; add "batch" for
#      a batch of 8 copies of the reference) and a course of RUNNER_COURSE submissions (default 16;
#      every part; 0: none), at IMDB's scale with an encoder of bert-base's shape, stopped after
#      RUNNER_BUDGET_S (default 450) seconds so that one 8-minute call holds it. A rehearsal of this script
#      here, on CPU and small: RUNNER_DEVICE=cpu RUNNER_SCALE=0.004 RUNNER_ENCODER=tiny. The figures are written after every step, so a
#      run stopped part-way keeps what it measured (the course stopped by the budget: the
#      submissions that finished): FIGURES/rehearsal.json, environment.txt, doctor.txt and rehearsal.log.
set -euo pipefail
cd "$(dirname "$0")/.."

WHEELS=${RUNNER_WHEELS:-gpu-wheels}
# What a runner with PyTorch and transformers still lacks of pyproject.toml's dependencies
# (safetensors, packaging, numpy and jinja2 come with those two), and submitit for --backend slurm.
PACKAGES=(jsonschema nbformat submitit hypothesis rich)

prepare() {
  mkdir -p "$WHEELS"
  "${PYTHON:-python3}" -m pip download --quiet --disable-pip-version-check --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform any \
    -d "$WHEELS" "${PACKAGES[@]}"
  (cd "$WHEELS" && apt-get download bubblewrap >/dev/null)
  ls "$WHEELS"
}

# The environment (.gpu-venv, bubblewrap on PATH), environment.txt and doctor.txt in FIGURES;
# sets ISOLATION to what grading may require here.
setup() {
  local figures=$1
  ls "$WHEELS"/*.whl "$WHEELS"/bubblewrap_*.deb >/dev/null  # prepared? (set -e stops here if not)

  python3 -m venv --system-site-packages --without-pip .gpu-venv
  # The runner's python3 may itself be a virtual environment (PyTorch's is one there), whose
  # packages --system-site-packages does not reach (it reaches only the base's): a .pth file names
  # them, and the sandbox binds what a .pth names for the worker too. The tree itself is named
  # there as well, as an editable install would (the worker imports graders from it).
  { python3 -c 'import site; print("\n".join(site.getsitepackages()))'; pwd; } \
    >"$(.gpu-venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/runner-python.pth"
  .gpu-venv/bin/python -m pip install --quiet --disable-pip-version-check --no-index --find-links "$WHEELS" \
    "${PACKAGES[@]}"
  .gpu-venv/bin/python -c 'import torch, transformers' \
    || { echo "gpu-runner: PyTorch and transformers are not in this Python's system site-packages" >&2; exit 1; }
  if ! command -v bwrap >/dev/null; then  # unpacked, not installed: dpkg -i would stop on a dependency
    dpkg -x "$WHEELS"/bubblewrap_*.deb .gpu-bwrap
    export PATH="$PWD/.gpu-bwrap/usr/bin:$PATH"
  fi

  {
    date -u; nproc; free -g | head -2
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
    .gpu-venv/bin/python -c 'import sys, torch, transformers; print(sys.version); print("torch", torch.__version__, "cuda", torch.cuda.is_available()); print("transformers", transformers.__version__)'
  } >"$figures/environment.txt" 2>&1
  # Full isolation where the machine allows it, else container mode (a runner whose kernel
  # refuses namespaces to bubblewrap), so that one call still measures the table.
  ISOLATION=full
  if ! .gpu-venv/bin/python -m graders.cli doctor --assignment bert >"$figures/doctor.txt" 2>&1; then
    .gpu-venv/bin/python -m graders.cli doctor --assignment bert --isolation container >>"$figures/doctor.txt" 2>&1 && ISOLATION=container
  fi
}

run() {
  local figures=${1:-${OUT:-gpu-figures}}
  mkdir -p "$figures"
  figures=$(cd "$figures" && pwd)
  setup "$figures"

  local steps
  read -r -a steps <<<"${RUNNER_STEPS:-cache_build cache_warm grade}"
  timeout --signal=INT --kill-after=10 "${RUNNER_BUDGET_S:-450}" \
    .gpu-venv/bin/python benchmarks/bench_gpu_rehearsal.py --device "${RUNNER_DEVICE:-cuda}" --scale "${RUNNER_SCALE:-1}" \
      --encoder-size "${RUNNER_ENCODER:-base}" --steps "${steps[@]}" --submissions 8 --course "${RUNNER_COURSE:-16}" \
      --isolation "$ISOLATION" --workdir "${TMPDIR:-/tmp}/rehearsal" --json "$figures/rehearsal.json" \
      >"$figures/rehearsal.log" 2>&1 || echo "rehearsal stopped (exit $?): the figures so far are in $figures" >&2
  tail -n 20 "$figures/rehearsal.log"
}

case "${1:-}" in
  prepare) prepare ;;
  run) shift; run "$@" ;;
  # one grade on the runner, as the rehearsal's: bash benchmarks/gpu-runner.sh grade FIGURES reference/bert --parts finetune
  grade) shift; figures=$(mkdir -p "$1" && cd "$1" && pwd); shift; setup "$figures"
         .gpu-venv/bin/python -m graders.cli "$@" --isolation "$ISOLATION" ;;
  *) echo "usage: bash benchmarks/gpu-runner.sh prepare | run [FIGURES] | grade FIGURES GRADE-ARGUMENTS" >&2; exit 2 ;;
esac
