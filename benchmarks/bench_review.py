"""How fast the review desk shows the next answer, on a course-size batch: the built-in example's
result copied 400 times, the written answers varied (tests/review_samples.py: published through
the batch's store, nothing regraded).

    .venv/bin/python benchmarks/bench_review.py [--results out/example/results.json] [--students 400]
                                                [--answers 200] [--no-browser] [--json out.json]

`--results` is a real result of the built-in example: `bash setup.sh` grades it into
out/example/. Measured, in one run on this machine:

- the desk's start: reading the batch's answers, and the first publishing (every results.json
  looked at, the gradebook rebuilt);
- the next answer over HTTP from `grade review`'s own server (waitress), walking a question
  answer by answer as `j` does: median, 95th percentile and worst of the JSON the page renders;
- the same in headless Chromium, from the key press to the answer on screen (a MutationObserver
  on the answer's text), unless --no-browser;
- one action (an item applied) over HTTP, and its publishing (the student's results and reports
  rendered again, manual.json, the gradebook and summary of all the students rebuilt).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import review_samples  # noqa: E402
from graders.review.cli import start_server  # noqa: E402
from graders.review.desk import Desk  # noqa: E402
from graders.review.publish import Publisher  # noqa: E402

TOKEN = "bench"
KEY_TO_SHOWN = """
const done = arguments[arguments.length - 1];
const text = document.getElementById("answer-text");
const before = text.textContent;
const started = performance.now();
const watcher = new MutationObserver(() => {
  if (text.textContent !== before) { watcher.disconnect(); done(performance.now() - started); }
});
watcher.observe(text, {childList: true, characterData: true, subtree: true});
document.dispatchEvent(new KeyboardEvent("keydown", {key: "j", bubbles: true}));
"""


def percentiles(samples_ms: list[float]) -> dict:
    ordered = sorted(samples_ms)
    return {"n": len(ordered), "median_ms": round(statistics.median(ordered), 2),
            "p95_ms": round(ordered[max(0, int(len(ordered) * 0.95) - 1)], 2), "max_ms": round(ordered[-1], 2)}


def get(url: str, cookie: str, data: dict | None = None) -> tuple[float, dict]:
    body = None if data is None else json.dumps(data).encode()
    request = urllib.request.Request(url, data=body, headers={"Cookie": cookie, "Content-Type": "application/json"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=30) as response:
        payload = json.loads(response.read())
    return (time.perf_counter() - started) * 1000, payload


def browser_samples(base: str, question: str, first: str, count: int, profile: Path) -> list[float]:
    sys.path.insert(0, str(REPO / "tests"))
    import chromium

    driver = chromium.start(profile, (1400, 900))
    try:
        driver.get(f"{base}/?token={TOKEN}")
        driver.get(f"{base}/q/{question}/{first}")
        time.sleep(1.0)
        driver.set_script_timeout(30)
        return [driver.execute_async_script(KEY_TO_SHOWN) for _ in range(count)]
    finally:
        driver.quit()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=REPO / "out" / "example" / "results.json")
    parser.add_argument("--students", type=int, default=400)
    parser.add_argument("--answers", type=int, default=200, help="next-answer requests timed")
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if not args.results.is_file():
        print(f"bench_review: no {args.results}: run `bash setup.sh` (it grades the built-in example there) "
              "or give --results", file=sys.stderr)
        return 2
    figures: dict = {"students": args.students, "load_before": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="bench-review-") as scratch:
        out = Path(scratch) / "batch"
        started = time.perf_counter()
        review_samples.copies_of(json.loads(args.results.read_text()), out, args.students)
        figures["batch_made_s"] = round(time.perf_counter() - started, 2)

        started = time.perf_counter()
        desk = Desk(out)
        figures["desk_start_s"] = round(time.perf_counter() - started, 3)
        publisher = Publisher(desk)
        started = time.perf_counter()
        publisher.sync()
        figures["first_publish_s"] = round(time.perf_counter() - started, 3)
        question = next(iter(desk.index.questions))
        figures["answers_in_question"] = len(desk.index.questions[question].keys)

        server = start_server(desk, publisher, "127.0.0.1", 0, TOKEN)
        threading.Thread(target=server.run, daemon=True).start()
        base = f"http://127.0.0.1:{server.effective_port}"
        cookie = f"review-token-{server.effective_port}={TOKEN}; review-name=Bench"
        try:
            key = desk.index.questions[question].keys[0]
            samples = []
            for _ in range(args.answers):
                elapsed, view = get(f"{base}/api/q/{question}/{key}", cookie)
                samples.append(elapsed)
                key = view["nav"]["next"] or desk.index.questions[question].keys[0]
            figures["next_answer_http"] = percentiles(samples[5:])  # the first few warm the server up

            item = desk.create_item("Bench", question, points=2, text="benchmark item")
            writes, publishes = [], []
            for key in desk.index.questions[question].keys[:20]:
                seen = desk.view(question, key)
                elapsed, _ = get(f"{base}/api/q/{question}/{key}", cookie, {
                    "revision": seen["grade"]["revision"], "answer_sha256": seen["answer"]["sha256"],
                    "action": "apply", "item": item["id"]})
                writes.append(elapsed)
                started = time.perf_counter()
                publisher.sync(everyone=False)
                publishes.append((time.perf_counter() - started) * 1000)
            figures["apply_item_http"] = percentiles(writes)
            figures["publish_one_action"] = percentiles(publishes)

            if not args.no_browser:
                first = desk.index.questions[question].keys[0]
                figures["next_answer_browser"] = percentiles(
                    browser_samples(base, question, first, min(args.answers, 100), Path(scratch) / "profile")[3:])
        finally:
            server.close()
    figures["load_after"] = os.getloadavg()
    print(json.dumps(figures, indent=1))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
