"""Cached features vs the notebook's way (encoder forward at every step), side by side.

    python benchmarks/bench_finetune.py                                  # CPU, smoke encoder, small set
    python benchmarks/bench_finetune.py --encoder PATH --repeat 10       # a real encoder, IMDB-length texts
    python benchmarks/bench_finetune.py --device cuda --encoder-size base --imdb PATH

Three child processes, so that each peak-memory figure is its own:
  build   load the encoder, encode every review once into a fresh cache
  cached  the student's train() over the stand-in encoder, as the grader runs it
  naive   the student's train() over the real encoder, as the notebook runs it
Both training phases use the same model (fixtures/bert/sentiment/sample_students.py, the notebook's code),
the same hyper-parameters, and the same length-bucketed batches. Prints a table; --json writes it.

Times are wall-clock and, beside them, the process's CPU time: on a shared machine the wall clock
measures the neighbours too, while CPU time of a single-threaded run (--threads 1) stays close to
what an idle machine would show. On a GPU only the wall clock means anything.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
SAMPLE_STUDENTS = REPO / "fixtures" / "bert" / "sentiment" / "sample_students.py"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--encoder", default="smoke", help="smoke, a save_pretrained folder, or a name in the HF cache")
    parser.add_argument("--encoder-size", choices=["base"], help="a random-weight bert-base (BertConfig defaults) "
                        "when --encoder cannot be loaded")
    parser.add_argument("--imdb", help="IMDB (any format graders.packs.bert.finetune.data reads); default: the small set")
    parser.add_argument("--reviews", type=int, default=400, help="training reviews to use")
    parser.add_argument("--repeat", type=int, default=1, help="join this many reviews into one, for longer texts")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--hidden-dim", type=int, default=256)  # the notebook's model
    parser.add_argument("--n-layers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--phase", choices=["build", "cached", "naive"], help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    parser.add_argument("--features", help=argparse.SUPPRESS)  # the cache the build phase wrote
    args = parser.parse_args()

    if args.phase:
        print(json.dumps(run_phase(args)))
        return
    with tempfile.TemporaryDirectory() as workdir:
        results = {"build": run_child("build", workdir)}
        results["cached"] = run_child("cached", workdir, "--features", results["build"]["features"])
        results["naive"] = run_child("naive", workdir)
    report(args, results)


def run_child(phase: str, workdir: str, *extra: str) -> dict:
    command = [sys.executable, __file__, *sys.argv[1:], "--phase", phase, "--workdir", workdir, *extra]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{phase} phase failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# -----------------------------------------------------------------------------
# the phases (each in its own process)

def run_phase(args) -> dict:
    if args.threads:
        torch.set_num_threads(args.threads)
    from graders.packs.bert.finetune.cache import build_features
    from graders.packs.bert.finetune.encoder import load_encoder

    texts, labels = benchmark_reviews(args)
    workdir = Path(args.workdir)
    encoder_path = encoder_folder(args, workdir)
    device = torch.device(args.device)
    result = {"reviews": len(texts)}

    if args.phase == "build":
        encoder = load_encoder(encoder_path, device=device, cache_root=workdir)
        with Stopwatch(device) as build:
            features = build_features(encoder, texts, cache_root=workdir / "cache", max_length=args.max_length)
        result["build_s"], result["build_cpu_s"] = build.wall, build.cpu
        result["features"] = str(features.folder)
        result["tokens"] = int(features.offsets[-1])
        result["cache_bytes"] = features.hidden.nbytes
        result["encoder"] = f"{encoder.source} ({sum(p.numel() for p in encoder.model.parameters()) / 1e6:.1f}M params)"
    elif args.phase == "cached":
        result["epochs_wall_cpu_s"] = train_cached(args, labels, device)
    else:
        result["epochs_wall_cpu_s"] = train_naive(args, texts, labels, encoder_path, workdir, device)
    result["peak_memory_mb"] = peak_memory_mb(device)
    return result


def train_cached(args, labels, device) -> list[float]:
    """What the grader's worker does: open the cache by folder, the stand-in in place of the encoder."""
    from graders.packs.bert.finetune.cache import open_features
    from graders.packs.bert.finetune.standin import CachedEncoder
    from graders.packs.bert.finetune.training import make_iterators

    features = open_features(args.features)
    standin = CachedEncoder(features.config)
    iterators = make_iterators(features, labels, features, features, encoder=standin,
                               batch_size=args.batch_size, device=device)
    return train_epochs(args, standin, iterators.train, device)


def train_naive(args, texts, labels, encoder_path, workdir, device) -> list[float]:
    """What the notebook does: every batch goes through the frozen encoder again."""
    from graders.packs.bert.finetune.encoder import load_encoder, tokenize

    encoder = load_encoder(encoder_path, device=device, cache_root=workdir)
    encoder.model.requires_grad_(True)  # as from_pretrained leaves it; the notebook's loop freezes it by name
    ids, mask = tokenize(encoder.tokenizer, texts, max_length=args.max_length)
    batches = NaiveBatches(ids, mask, torch.as_tensor(labels, dtype=torch.float32), args.batch_size, device)
    return train_epochs(args, encoder.model, batches, device)


def train_epochs(args, bert, iterator, device) -> list[float]:
    students = load_sample_students()
    torch.manual_seed(0)
    model = students.BERTGRUSentiment(bert, args.hidden_dim, 1, args.n_layers, True, 0.25)
    for name, param in model.named_parameters():  # as the notebook does
        if name.startswith("bert"):
            param.requires_grad = False
    model = model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = torch.nn.BCEWithLogitsLoss().to(device)
    epochs = []
    for _ in range(args.epochs):
        with Stopwatch(device) as epoch:
            students.train(model, iterator, optimizer, criterion)
        epochs.append((epoch.wall, epoch.cpu))
    return epochs


class Stopwatch:
    """Wall-clock and process CPU seconds of a block, the GPU's queue drained at both ends."""

    def __init__(self, device: torch.device = torch.device("cpu")):
        self.device = device

    def __enter__(self):
        synchronize(self.device)
        self.started = (time.perf_counter(), time.process_time())
        return self

    def __exit__(self, *exc):
        synchronize(self.device)
        self.wall = time.perf_counter() - self.started[0]
        self.cpu = time.process_time() - self.started[1]


class NaiveBatches:
    """Token-id batches with the same length bucketing as the harness's iterator, padded per batch."""

    def __init__(self, ids, mask, labels, batch_size, device):
        self.ids, self.mask, self.labels, self.batch_size, self.device = ids, mask, labels, batch_size, device
        self.lengths = mask.sum(1).numpy()
        self.epoch = 0

    def __len__(self):
        return -(-len(self.labels) // self.batch_size)

    def __iter__(self):
        from types import SimpleNamespace

        rng = np.random.default_rng([0, self.epoch])
        self.epoch += 1
        order = rng.permutation(len(self.labels))
        order = order[np.argsort(self.lengths[order], kind="stable")]
        batches = [order[i:i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        for rows in (batches[i] for i in rng.permutation(len(batches))):
            longest = int(self.lengths[rows].max())
            yield SimpleNamespace(text=self.ids[rows, :longest].to(self.device),
                                  attention_mask=self.mask[rows, :longest].to(self.device),
                                  label=self.labels[rows].to(self.device))


# -----------------------------------------------------------------------------
# inputs

def benchmark_reviews(args) -> tuple[list[str], np.ndarray]:
    from graders.packs.bert.finetune.data import load_imdb, load_small_sentiment

    reviews = load_imdb(args.imdb)["train"] if args.imdb else load_small_sentiment()["train"]
    needed = args.reviews * args.repeat
    reviews = [reviews[i % len(reviews)] for i in np.random.default_rng(0).permutation(max(needed, len(reviews)))[:needed]]
    groups = [reviews[i:i + args.repeat] for i in range(0, needed, args.repeat)]
    return [" ".join(r.text for r in group) for group in groups], np.array([group[0].label for group in groups])


def encoder_folder(args, workdir: Path) -> str | Path:
    """--encoder if it can be found; else, with --encoder-size base, a random bert-base saved once."""
    from graders.packs.bert.finetune.encoder import EncoderNotFound, resolve_encoder_path

    try:
        return resolve_encoder_path(args.encoder, cache_root=workdir)
    except EncoderNotFound:
        if args.encoder_size != "base":
            raise
    folder = workdir / "random-bert-base"
    if not (folder / "config.json").is_file():
        from transformers import AutoTokenizer, BertConfig, BertModel

        torch.manual_seed(0)
        BertModel(BertConfig()).save_pretrained(folder)  # 110M parameters, vocab 30,522
        # any BERT WordPiece tokenizer will do for timing: the smoke one's ids fit in bert-base's vocab
        AutoTokenizer.from_pretrained(resolve_encoder_path("smoke", cache_root=workdir)).save_pretrained(folder)
    return folder


def load_sample_students():
    spec = importlib.util.spec_from_file_location("sample_students", SAMPLE_STUDENTS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def peak_memory_mb(device: torch.device) -> dict:
    peak = {"host_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}  # Linux: KiB
    if device.type == "cuda":
        peak["gpu_allocated"] = torch.cuda.max_memory_allocated() / 2**20
    return peak


# -----------------------------------------------------------------------------
# report

def report(args, results: dict) -> None:
    build, cached, naive = results["build"], results["cached"], results["naive"]
    cached_wall, cached_cpu = np.mean(cached["epochs_wall_cpu_s"], axis=0)
    naive_wall, naive_cpu = np.mean(naive["epochs_wall_cpu_s"], axis=0)
    summary = {
        "settings": {k: v for k, v in vars(args).items() if k not in ("phase", "workdir", "json")},
        "torch": torch.__version__, "threads": args.threads or torch.get_num_threads(),
        "encoder": build["encoder"], "reviews": build["reviews"], "tokens": build["tokens"],
        "cache_mb": round(build["cache_bytes"] / 2**20, 1),
        "cache_build_s": {"wall": round(build["build_s"], 2), "cpu": round(build["build_cpu_s"], 2)},
        "cached_epoch_s": {"wall": round(cached_wall, 3), "cpu": round(cached_cpu, 3)},
        "naive_epoch_s": {"wall": round(naive_wall, 3), "cpu": round(naive_cpu, 3)},
        "speedup": {"wall": round(naive_wall / cached_wall, 2), "cpu": round(naive_cpu / cached_cpu, 2)},
        "break_even_epochs": {"wall": break_even(build["build_s"], naive_wall, cached_wall),
                              "cpu": break_even(build["build_cpu_s"], naive_cpu, cached_cpu)},
        "peak_memory_mb": {phase: {k: round(v) for k, v in r["peak_memory_mb"].items()} for phase, r in results.items()},
        "raw": results,
    }
    print(f"encoder {summary['encoder']} on {args.device}, {summary['threads']} thread(s), torch {torch.__version__}")
    print(f"{build['reviews']} reviews, {build['tokens']} tokens, model hidden {args.hidden_dim} x {args.n_layers} "
          f"layers, batch {args.batch_size}, {args.epochs} epochs")
    print(f"{'':18}{'wall s':>10}{'cpu s':>10}   peak memory MB")
    print(f"  cache build     {build['build_s']:10.2f}{build['build_cpu_s']:10.2f}   {summary['peak_memory_mb']['build']}"
          f"   ({summary['cache_mb']} MB on disk)")
    print(f"  epoch, cached   {cached_wall:10.3f}{cached_cpu:10.3f}   {summary['peak_memory_mb']['cached']}")
    print(f"  epoch, naive    {naive_wall:10.3f}{naive_cpu:10.3f}   {summary['peak_memory_mb']['naive']}")
    print(f"  naive / cached  {summary['speedup']['wall']:9.2f}x{summary['speedup']['cpu']:9.2f}x")
    print(f"  the cache pays for itself after {summary['break_even_epochs']['cpu']} epoch(s) of one submission (cpu)")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))


def break_even(build_s: float, naive_s: float, cached_s: float) -> float | None:
    """Epochs of one submission after which building the cache has paid for itself; None if it never does."""
    saved = naive_s - cached_s
    return round(build_s / saved, 2) if saved > 0 else None


if __name__ == "__main__":
    main()
