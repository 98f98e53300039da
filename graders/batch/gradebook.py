"""gradebook.csv and summary.html, rebuilt from the per-submission results.json files.

Nothing here remembers anything: both files are a function of DIR/submissions/*/results.json
(and done.json for the outcome), so they always agree with the per-student reports, whichever
run, merge or resume wrote them last.

gradebook.csv, one row per result folder, sorted by student id:

    student_id, name, late, total, max, status, <one column per part: its score>, provisional,
    pending_manual, flags, isolation, report, reason

`late` is "late" where the LMS marked the submission late (Canvas's LATE), else empty.

`status` is graded, rejected (the input could not be graded: not a zip, zip-slip, ...) or
error (grading did not finish: hard time limit, grader failure, infrastructure lost too often).
`flags` is the number of integrity flags and their kinds ("2: exit, sandbox-denial"; "0"; empty
when nothing was graded): for a person to review, no points depend on them.
`report` is the report's path relative to DIR. A part that was not graded is an empty cell.
docs/batch.md maps the columns onto a Canvas and a Moodle import.
"""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
from collections import Counter
from pathlib import Path

from jinja2 import Environment, StrictUndefined
from markupsafe import Markup, escape

from graders.atomic import write_atomically
from graders.batch import store
from graders.integrity import flag_summary
from graders.reports.html import CSP_META, visible_text
from graders.reports.figures import figures, number
from graders.reports.summary import isolation_warning

GRADEBOOK = "gradebook.csv"
SUMMARY = "summary.html"
MANUAL = "pending_manual"
BINS = 10


def load_rows(out: Path) -> list[dict]:
    rows = []
    for folder in store.result_folders(out):
        try:
            results = json.loads((folder / "results.json").read_text())
        except (OSError, ValueError):
            continue
        marker = store.read_marker(out, folder.name) or {}
        rows.append({"student_id": folder.name, "folder": folder, "results": results, "marker": marker})
    return rows


def batch_section(results: dict) -> dict:
    """What the batch recorded of a submission (results.json's `batch`), {} when there is none."""
    return results.get("batch") if isinstance(results.get("batch"), dict) else {}


def display_name(row: dict) -> str:
    """The student's name as the LMS file name or the manifest gave it, else ""."""
    return str(batch_section(row["results"]).get("name") or row["marker"].get("name") or "")


def part_ids(rows: list[dict], rubric=None) -> list[str]:
    """The parts any result graded, in the order of `rubric` (the batch's assignment's), else of
    the results themselves (each lists its parts in its rubric's order)."""
    seen = {p.get("id") for row in rows for p in row["results"].get("parts") or []}
    order = [p.id for p in rubric.parts] if rubric is not None else \
        list(dict.fromkeys(p.get("id") for row in rows for p in row["results"].get("parts") or []))
    ordered = [pid for pid in order if pid in seen and isinstance(pid, str)]
    return ordered + sorted(pid for pid in seen - set(ordered) if isinstance(pid, str))


def _fmt(value: float) -> str:
    return f"{round(value, 2):g}"


def gradebook_rows(rows: list[dict], rubric=None) -> tuple[list[str], list[list[str]]]:
    parts = part_ids(rows, rubric)
    header = ["student_id", "name", "late", "total", "max", "status", *parts, "provisional", "pending_manual", "flags",
              "isolation", "report", "reason"]
    table = []
    for row in rows:
        results = row["results"]
        figured = figures(results)
        scores = {p.get("id"): _fmt(points.score) for p, points in zip(results.get("parts") or [], figured.parts)
                  if isinstance(p, dict)}
        pending = sum(1 for p in results.get("parts") or [] for c in p.get("checks") or [] if c.get("status") == MANUAL)
        reason = "" if store.outcome_of(results) == store.GRADED else str(results.get("reason") or "")
        report = f"{store.SUBMISSIONS}/{row['student_id']}/report.html"
        table.append([row["student_id"], display_name(row), "late" if batch_section(results).get("late") is True else "",
                      _fmt(figured.total.score), _fmt(figured.total.max_score),
                      store.outcome_of(results), *[scores.get(pid, "") for pid in parts],
                      _provisional_cell(results), str(pending),
                      _flags_cell(results), _isolation_cell(results), report,
                      " ".join(reason.split())[:300]])
    return header, table


def _isolation_cell(results: dict) -> str:
    """How isolated the student's code ran: empty when grading never ran it (a rejected submission;
    an error: a node that cannot isolate is an error, never "full")."""
    if store.outcome_of(results) != store.GRADED:
        return ""
    if isolation_warning(results):
        return "NOT ISOLATED"
    sandbox = results.get("sandbox") if isinstance(results.get("sandbox"), dict) else {}
    return "container" if sandbox.get("level") == "container" else "full"


def _provisional_banner(rows: list[dict]) -> str:
    """One sentence for the dashboard when some totals leave out (or hold) provisional points."""
    marked = [r["results"]["provisional"] for r in rows if isinstance(r["results"].get("provisional"), dict)]
    if not marked:
        return ""
    parts = sorted({str(p) for m in marked for p in m.get("parts") or []})
    counted = sum(1 for m in marked if m.get("counted"))
    where = f"{len(marked)} submission(s) have provisional points ({', '.join(parts)}: smoke mode, which may still change)"
    if counted == len(marked):
        return f"{where}; the totals include them (--count-provisional)."
    if counted:
        return f"{where}; {counted} of the totals include them, the others do not: grade again with the same options."
    return f"{where}; the totals leave them out (the provisional column shows them)."


def _provisional_cell(results: dict) -> str:
    """Which points may still change, and whether the total holds them: a TA importing the
    totals into a gradebook must not take smoke-mode points for final ones."""
    provisional = results.get("provisional")
    if not isinstance(provisional, dict):
        return ""
    where = " ".join(str(p) for p in provisional.get("parts") or [])
    points = f"{_fmt(number(provisional.get('score')))}/{_fmt(number(provisional.get('max_score')))}"
    return f"{where} {points} {'in total' if provisional.get('counted') else 'not in total'}"


def _flags_cell(results: dict) -> str:
    if not isinstance(results.get("integrity"), dict):
        return ""
    count, kinds = flag_summary(results)
    return f"{count}: {', '.join(kinds)}" if count else "0"


def write_gradebook(out: Path, rows: list[dict], rubric=None) -> Path:
    header, table = gradebook_rows(rows, rubric)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([_defuse(cell) for cell in line] for line in table)
    return write_atomically(Path(out) / GRADEBOOK, buffer.getvalue())


def _defuse(cell: str) -> str:
    """A cell safe to open and to print: its control characters replaced (a student-chosen name
    holding an escape sequence acts on the terminal of whoever `cat`s the file), and a cell a
    spreadsheet would run as a formula (CSV injection through a name, a file name or a reason)
    given a leading apostrophe, also behind leading blanks."""
    cell = visible_text(cell)
    return "'" + cell if cell.lstrip()[:1] in ("=", "+", "-", "@") and not _is_number(cell) else cell


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# ------------------------------------------------------------------------------------ summary


def summary_view(rows: list[dict]) -> dict:
    graded = [r for r in rows if store.outcome_of(r["results"]) == store.GRADED]
    totals = [figures(r["results"]).total.score for r in graded]
    # The totals' maximum: a row that was not graded (an error's maximum may count a provisional
    # part that the graded totals leave out) does not set it, unless nothing was graded.
    maxima = [figures(r["results"]).total.max_score for r in (graded or rows)] or [0.0]
    top = max(maxima) or 1.0
    checks: dict[str, dict] = {}
    diagnoses: dict[str, dict] = {}
    for row in graded:
        for part in row["results"].get("parts") or []:
            for chk in part.get("checks") or []:
                status = chk.get("status")
                cid = str(chk.get("id"))
                entry = checks.setdefault(cid, {"id": cid, "title": str(chk.get("title") or ""), "part": str(part.get("id")),
                                                "counts": Counter(), "manual": 0})
                if status == MANUAL:
                    entry["manual"] += 1
                    continue
                entry["counts"][status] += 1
                diagnosis = chk.get("diagnosis")
                if isinstance(diagnosis, dict) and diagnosis.get("id"):
                    did = str(diagnosis["id"])
                    d = diagnoses.setdefault(did, {"id": did, "text": str(diagnosis.get("text") or ""),
                                                   "students": set(), "checks": set()})
                    d["students"].add(row["student_id"])
                    d["checks"].add(cid)
    check_rows = []
    for entry in checks.values():
        ran = sum(entry["counts"].values())
        graded_by_hand = entry["counts"].get("passed", 0) + entry["counts"].get("failed", 0)
        if not ran or (entry["manual"] and not graded_by_hand):
            continue  # a written answer nobody has graded yet is not a mistake of the class
        passed = entry["counts"].get("passed", 0)
        check_rows.append({**entry, "ran": ran, "passed": passed, "rate": passed / ran,
                           "failed": entry["counts"].get("failed", 0), "error": entry["counts"].get("error", 0),
                           "skipped": entry["counts"].get("skipped", 0)})
    check_rows.sort(key=lambda c: (c["rate"], c["id"]))
    diagnosis_rows = sorted(({"id": d["id"], "text": d["text"], "count": len(d["students"]),
                              "checks": ", ".join(sorted(d["checks"])), "students": sorted(d["students"])}
                             for d in diagnoses.values()), key=lambda d: (-d["count"], d["id"]))
    timed = [(r["student_id"], number((r["results"].get("batch") or {}).get("wall_s")
                                       or (r["results"].get("timings") or {}).get("total_s"))) for r in rows]
    slowest = sorted(timed, key=lambda t: -t[1])[:10]
    not_graded = [{"id": r["student_id"], "status": store.outcome_of(r["results"]),
                   "reason": str(r["results"].get("reason") or "")[:500]} for r in rows
                  if store.outcome_of(r["results"]) != store.GRADED]
    lowest = [(sid, _fmt(score)) for sid, score in
              sorted(((r["student_id"], figures(r["results"]).total.score) for r in graded), key=lambda t: t[1])[:10]]
    pending = sum(1 for r in graded for p in r["results"].get("parts") or [] for c in p.get("checks") or []
                  if c.get("status") == MANUAL)
    flagged = [{"id": r["student_id"], "count": count, "kinds": ", ".join(kinds)}
               for r in rows for count, kinds in [flag_summary(r["results"])] if count]
    return {
        "count": len(rows), "graded": len(graded), "rejected": sum(1 for r in rows if store.outcome_of(r["results"]) == store.REJECTED),
        "errors": sum(1 for r in rows if store.outcome_of(r["results"]) == store.ERROR),
        "max": top, "mean": statistics.fmean(totals) if totals else None,
        "median": statistics.median(totals) if totals else None,
        "histogram": Markup(histogram_svg(totals, top)),
        "checks": check_rows, "diagnoses": diagnosis_rows, "slowest": slowest, "not_graded": not_graded,
        "lowest": lowest, "pending_manual": pending, "flagged": flagged,
        "not_isolated": [r["student_id"] for r in rows if isolation_warning(r["results"])],
        "provisional": _provisional_banner(rows),
    }


# Histogram geometry, in SVG units: the plot is PLOT_WIDTH wide between side margins wide enough
# for a label centred on the outermost edges. An axis label is AXIS_FONT_PX high and about
# AXIS_CHAR_PX per character wide (digits of a system sans-serif); labels closer than LABEL_GAP
# would read as one number, so some edges go unlabelled when the bins are narrow.
PLOT_WIDTH, PLOT_HEIGHT, SIDE_MARGIN, TOP_MARGIN = 520, 200, 24, 20
AXIS_FONT_PX, AXIS_CHAR_PX, LABEL_GAP = 12, 7.5, 8


def histogram_svg(values: list[float], top: float, bins: int = BINS,
                  axis_title: str = "total points (bars: number of submissions)") -> str:
    """Bars of how many totals fall in each tenth of the maximum (the last bin includes it).

    Each bar spans its bin, so the axis is labelled at the bin edges, under the edges (a label
    under a bar's centre would read as that bin's value). Labels that would overlap are thinned
    to every k-th edge, always keeping 0 and the maximum; the axis is titled."""
    counts = [0] * bins
    for value in values:
        index = min(bins - 1, max(0, int(value / top * bins))) if top > 0 else 0
        counts[index] += 1
    bar = PLOT_WIDTH / bins
    edges = [top * i / bins for i in range(bins + 1)]
    labels = [_axis_number(edge) for edge in edges]
    widest = max(len(label) for label in labels) * AXIS_CHAR_PX
    step = max(1, math.ceil((widest + LABEL_GAP) / bar))
    shown = [i for i in range(0, bins + 1, step)]
    if shown[-1] != bins:  # the maximum is always labelled; drop the edge it would crowd
        shown = shown[:-1] + [bins] if bins - shown[-1] < step and len(shown) > 1 else shown + [bins]
    axis_y = TOP_MARGIN + PLOT_HEIGHT
    width, height = PLOT_WIDTH + 2 * SIDE_MARGIN, axis_y + 2 * AXIS_FONT_PX + 16
    tallest = max(counts) or 1
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" class="histogram" '
             f'role="img" aria-label="histogram of total scores">']
    for i, count in enumerate(counts):
        h = round(PLOT_HEIGHT * count / tallest)
        x = SIDE_MARGIN + i * bar
        parts.append(f'<rect x="{x + 2:g}" y="{axis_y - h}" width="{bar - 4:g}" height="{h}" class="bar">'
                     f'<title>{count} with {labels[i]}–{labels[i + 1]}</title></rect>')
        if count:
            parts.append(f'<text x="{x + bar / 2:g}" y="{axis_y - h - 4}" text-anchor="middle" class="count">{count}</text>')
    parts.append(f'<line x1="{SIDE_MARGIN}" y1="{axis_y}" x2="{SIDE_MARGIN + PLOT_WIDTH}" y2="{axis_y}" class="axis-line"/>')
    for i in shown:
        x = SIDE_MARGIN + i * bar
        parts.append(f'<line x1="{x:g}" y1="{axis_y}" x2="{x:g}" y2="{axis_y + 4}" class="axis-line"/>')
        parts.append(f'<text x="{x:g}" y="{axis_y + 4 + AXIS_FONT_PX}" text-anchor="middle" class="axis">{labels[i]}</text>')
    parts.append(f'<text x="{SIDE_MARGIN + PLOT_WIDTH / 2:g}" y="{height - 4}" text-anchor="middle" class="axis-title">'
                 f'{escape(axis_title)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _axis_number(value: float) -> str:
    """Bin edges to at most 2 decimals: 4.5, 9, 13.5 (a tenth of 45), 0.33 (of 3.3)."""
    return f"{round(value, 2):g}"


_TEMPLATE = """<!doctype html>
<html lang="en"><head>{{ csp_meta }}<meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Batch summary: {{ v.count }} submissions</title>
<style>
body{font:15px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1000px;padding:1em;color:#222}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;width:100%;font-size:.92em}th,td{text-align:left;padding:.25em .5em;border-bottom:1px solid #eee;vertical-align:top}
.table-scroll{max-width:100%;overflow-x:auto}body{overflow-wrap:anywhere}
table.wide{min-width:40em}/* on a phone these scroll sideways in their box rather than squeeze a word a line */
th{white-space:nowrap}td.n{text-align:right;font-variant-numeric:tabular-nums}
.rate{display:inline-block;height:.7em;background:#c33;vertical-align:middle}.rate.ok{background:#393}
.bar{fill:#4a78b5}svg{max-width:100%;height:auto}.histogram{display:block;width:100%;max-width:600px}
svg text{font-size:12px}svg .axis,svg .axis-title{fill:#555}svg .axis-line{stroke:#888}
.kpi{display:flex;flex-wrap:wrap;gap:1em}.kpi div{background:#f4f6f8;padding:.5em 1em;border-radius:6px}
.kpi b{display:block;font-size:1.4em}code{font-size:.9em}a{color:#2a5db0}
.unsafe{border:2px solid #c33;background:#ffebe9;border-radius:6px;padding:.5em 1em}
.provisional{border:2px solid #b8860b;background:#fff8e1;border-radius:6px;padding:.5em 1em}
</style></head><body>
<h1>Batch summary</h1>
{% if v.not_isolated %}<p class="unsafe" role="alert"><strong>NOT ISOLATED:</strong> {{ v.not_isolated|length }} submission(s)
were graded with --unsafe-no-sandbox: their code ran without full isolation and could have changed their results
({{ v.not_isolated|join(", ") }}).</p>{% endif %}
{% if v.provisional %}<p class="provisional" role="note"><strong>Provisional:</strong> {{ v.provisional }}</p>{% endif %}
<div class="kpi">
<div><b>{{ v.count }}</b>submissions</div><div><b>{{ v.graded }}</b>graded</div>
<div><b>{{ v.rejected }}</b>rejected</div><div><b>{{ v.errors }}</b>errors</div>
{% if v.mean is not none %}<div><b>{{ "%.2f"|format(v.mean) }} / {{ "%g"|format(v.max) }}</b>mean total</div>
<div><b>{{ "%.2f"|format(v.median) }}</b>median total</div>{% endif %}
{% if v.pending_manual %}<div><b>{{ v.pending_manual }}</b>written answers await manual grading</div>{% endif %}
</div>
<h2>Totals (graded submissions)</h2>
{{ v.histogram }}
<h2>Checks, by pass rate (the class's most common mistakes first)</h2>
<div class="table-scroll"><table class="wide"><tr><th>check</th><th>part</th><th>pass rate</th><th>passed</th><th>failed</th><th>error</th><th>skipped</th></tr>
{% for c in v.checks %}<tr><td><code>{{ c.id }}</code><br>{{ c.title }}</td><td>{{ c.part }}</td>
<td class="n"><span class="rate{% if c.rate >= 0.8 %} ok{% endif %}" style="width:{{ (c.rate * 60)|round(0, 'floor')|int }}px"></span> {{ (c.rate * 100)|round|int }}%</td>
<td class="n">{{ c.passed }}/{{ c.ran }}</td><td class="n">{{ c.failed }}</td><td class="n">{{ c.error }}</td><td class="n">{{ c.skipped }}</td></tr>
{% else %}<tr><td colspan="7">no checks ran</td></tr>{% endfor %}</table></div>
<h2>Diagnoses, by number of students</h2>
<div class="table-scroll"><table class="wide"><tr><th>students</th><th>mistake</th><th>seen in checks</th></tr>
{% for d in v.diagnoses %}<tr><td class="n">{{ d.count }}</td><td>{{ d.text or d.id }}<br><code>{{ d.id }}</code></td><td><code>{{ d.checks }}</code></td></tr>
{% else %}<tr><td colspan="3">no known mistake was diagnosed</td></tr>{% endfor %}</table></div>
<h2>Not graded (rejected or error)</h2>
<div class="table-scroll"><table><tr><th>student</th><th>status</th><th>reason</th></tr>
{% for r in v.not_graded %}<tr><td><a href="submissions/{{ r.id|urlencode }}/report.html">{{ r.id }}</a></td><td>{{ r.status }}</td><td>{{ r.reason }}</td></tr>
{% else %}<tr><td colspan="3">none</td></tr>{% endfor %}</table></div>
<h2>Flagged for review</h2>
<p>Code that reaches into the grader or the sandbox, or that the sandbox refused while it ran: for a person to
review, not a penalty (no points depend on it). Each report lists its flags at the top.</p>
<div class="table-scroll"><table><tr><th>student</th><th>flags</th><th>kinds</th></tr>
{% for f in v.flagged %}<tr><td><a href="submissions/{{ f.id|urlencode }}/report.html">{{ f.id }}</a></td><td class="n">{{ f.count }}</td><td>{{ f.kinds }}</td></tr>
{% else %}<tr><td colspan="3">none</td></tr>{% endfor %}</table></div>
<h2>Lowest totals</h2>
<div class="table-scroll"><table><tr><th>student</th><th>total</th></tr>
{% for sid, score in v.lowest %}<tr><td><a href="submissions/{{ sid|urlencode }}/report.html">{{ sid }}</a></td><td class="n">{{ score }}</td></tr>{% endfor %}</table></div>
<h2>Slowest submissions</h2>
<div class="table-scroll"><table><tr><th>student</th><th>seconds</th></tr>
{% for sid, seconds in v.slowest %}<tr><td><a href="submissions/{{ sid|urlencode }}/report.html">{{ sid }}</a></td><td class="n">{{ "%.1f"|format(seconds) }}</td></tr>{% endfor %}</table></div>
<p>Rebuilt from the submissions' results.json; the gradebook is <a href="gradebook.csv">gradebook.csv</a>.</p>
</body></html>
"""

_environment = Environment(autoescape=True, undefined=StrictUndefined, keep_trailing_newline=True, finalize=visible_text)


def render_summary(rows: list[dict]) -> str:
    return _environment.from_string(_TEMPLATE).render(v=summary_view(rows), csp_meta=CSP_META)


def rebuild(out: Path, assignment=None) -> tuple[Path, Path]:
    """Write DIR/gradebook.csv and DIR/summary.html from the result folders, the gradebook's parts
    in the order of `assignment`'s rubric (None: of the results)."""
    rows = load_rows(out)
    return (write_gradebook(out, rows, assignment.rubric if assignment is not None else None),
            write_atomically(Path(out) / SUMMARY, render_summary(rows)))

