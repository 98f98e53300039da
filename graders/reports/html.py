"""The self-contained HTML report, rendered from results.json alone.

Any string in results.json may come from a hostile student (messages, tracebacks, captured
output, written answers), so the template autoescapes everything, and the pictures are SVG
that `svg.py` builds from numbers with escaped labels. The page loads nothing: inline CSS,
inline SVG, no script. Control characters, which no page shows but a terminal obeys when the
file is printed (`cat report.html`: an escape sequence, a BEL), and the ones that reorder text
(bidi overrides), are replaced in every value the template writes (`visible_text`).

The template only lays out; this module turns results.json into plain view objects first, so
that malformed or missing fields are dealt with in Python, once.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from . import svg
from .figures import Points, figures
from .findings import gather, not_implemented_name
from .summary import (
    GRADED_BY_HAND,
    MANUAL,
    STATUS_LABELS,
    all_checks,
    as_text,
    clip,
    count_checks,
    format_points,
    headline,
    is_rejected,
    isolation_warning,
    merged_by_hand,
    ungraded_title,
    is_self_check,
    one_line,
    points_text,
    provisional_note,
    provisional_reason,
    rejection_reason,
    score_label,
    shown_total,
    visible_only,
)

TEMPLATES = Path(__file__).parent / "templates"

# Every HTML page the product writes (this report, the batch summary) starts its <head> with
# this policy, so that even text that slipped past escaping could neither run a script nor load
# anything. No page has a script or loads a resource: the CSS is inline (<style> and a few
# style attributes, hence 'unsafe-inline' for styles only, harmless when nothing can be
# fetched) and the plots are inline SVG, which is markup, not a load, so no img-src is needed.
CONTENT_SECURITY_POLICY = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
CSP_META = Markup(f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">')

# Longest text shown per field: enough to act on, small enough that a student who prints
# megabytes cannot make the report unreadable or slow.
LIMITS = {
    "title": 300,
    "message": 4_000,
    "diagnosis": 1_000,
    "counterexample": 4_000,
    "value": 3_000,
    "traceback": 8_000,
    "output": 4_000,
    "answer": 20_000,
    "rubric": 8_000,
    "note": 2_000,
    "flag": 400,
}
# Integrity flags listed in the report; results.json holds them all.
MAX_FLAGS_SHOWN = 50
# A bigger attention map is shown by its top-left corner: counterexamples are shrunk, so the
# interesting part of a map is small.
HEATMAP_SIDE = 48

STATUS_ICONS = {"passed": "✓", "failed": "✗", "error": "!", "skipped": "–", MANUAL: "✎"}

# C0 but newline and tab, DEL, C1, and the bidi embeddings, overrides and isolates.
_CONTROL_CHARACTERS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
REPLACEMENT = "\ufffd"


def visible_text(value):
    """`value` with every control character that is not a line break or a tab replaced by U+FFFD
    (Markup stays Markup); anything else as it is. Every page's template environment writes
    its values through it, and the CSV files their cells."""
    if not isinstance(value, str):
        return value
    cleaned = _CONTROL_CHARACTERS.sub(REPLACEMENT, value)
    return Markup(cleaned) if isinstance(value, Markup) else cleaned


_environment = Environment(
    loader=FileSystemLoader(TEMPLATES),
    autoescape=True,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    finalize=visible_text,
)


@dataclass
class Figure:
    caption: str
    picture: Markup


@dataclass
class AttentionView:
    figures: list[Figure]
    scale_low: str
    scale_high: str
    difference_high: str | None
    notes: list[str]


@dataclass
class ProportionRow:
    name: str
    value: str
    target: str
    interval: str
    inside: bool
    axis_end: str
    track: Markup


@dataclass
class Legend:
    name: str
    colour: str
    dashed: bool


@dataclass
class CurvesView:
    charts: list[Figure]
    legend: list[Legend]
    notes: list[str]


@dataclass
class CheckView:
    anchor: str
    title: str
    status: str
    status_label: str
    icon: str
    points: str
    hidden: bool
    message: str
    diagnosis: str
    diagnosis_id: str
    counterexample: str
    expected: str
    got: str
    comparisons: list[tuple[str, str, str]]
    numbers: list[tuple[str, str]]
    attention: AttentionView | None
    proportions: list[ProportionRow]
    curves: CurvesView | None
    traceback: str
    output: str
    answer: str
    rubric: str
    elapsed: str
    worker_measured: bool = False
    # The rubric items a person gave a written answer (`grade review`): (points, text) each.
    marks: list[tuple[str, str]] = field(default_factory=list)
    forgeable: bool = False  # worker-measured and worth points: the report says the points could be forged
    # The "Mistakes found" entry of this check's diagnosis, and whether an earlier check already
    # showed it in full (then only a link is shown: one mistake, one explanation).
    mistake_anchor: str = ""
    diagnosis_repeated: bool = False


@dataclass
class NotAttemptedView:
    """Checks that show nothing of the student's work for one reason (`not_attempted_label`),
    shown as one line: their messages and tracebacks all say the same thing."""

    label: str  # "not implemented yet: NAME", why the checks did not run, "no written answer given"
    points: str
    titles: list[str]


@dataclass
class MistakeView:
    """One distinct thing that went wrong, with the checks it failed and the points it cost."""

    anchor: str
    headline: str
    known: bool  # a diagnosis (a known mistake) rather than a message
    points_lost: str
    checks: list[tuple[str, str]]  # (title, anchor)


@dataclass
class FlagView:
    kind: str
    reason: str
    where: str
    code: str


@dataclass
class PartView:
    anchor: str
    title: str
    points: str
    bar: Markup
    passed_line: str
    provisional: bool
    note: str
    checks: list[CheckView] = field(default_factory=list)
    not_attempted: list[NotAttemptedView] = field(default_factory=list)


def render_html(results: dict) -> str:
    """The course staff's report: every check, the rubric's model answers, integrity flags."""
    template = _environment.get_template("report.html.j2")
    return template.render(report=build_report_view(results), csp_meta=CSP_META)


def render_feedback_html(results: dict, *, after_due_date: bool = False) -> str:
    """The report a student may be sent (`feedback.html`): `for_students(results)`, and a line
    saying how many checks are shown after the due date."""
    template = _environment.get_template("report.html.j2")
    view = build_report_view(for_students(results, after_due_date=after_due_date))
    later = 0 if after_due_date else count_checks(results).hidden
    return template.render(report={**view, "audience": "student", "later_count": later}, csp_meta=CSP_META)


def for_students(results: dict, *, after_due_date: bool = False) -> dict:
    """What a student may see: no rubric (the model answers of the written questions), no
    integrity flags (a person reviews them first), and before the due date no hidden check, nor
    points or counts that would give one away (`visible_only`)."""
    shown = copy.deepcopy(results if after_due_date else visible_only(results))
    for check in all_checks(shown):
        if isinstance(check.get("details"), dict):
            check["details"].pop("rubric", None)
    if isinstance(shown.get("integrity"), dict):
        shown["integrity"] = {**shown["integrity"], "flags": []}
    return shown


def build_report_view(results: dict) -> dict:
    submission = _mapping(results.get("submission"))
    anchors = _check_anchors(results)
    mistakes, not_attempted = _mistakes_view(results, anchors)
    parts = [_part_view(i, part, points) for i, (part, points) in enumerate(zip(results.get("parts") or [],
                                                                                figures(results).parts))]
    _link_diagnoses(parts, mistakes)
    counts = count_checks(results)
    score, max_score = shown_total(results)
    return {
        "audience": "staff",  # render_feedback_html's is "student"
        "later_count": 0,
        "rejected": is_rejected(results),
        "isolation_warning": isolation_warning(results),
        "ungraded_title": ungraded_title(results),
        "reason": clip(rejection_reason(results), LIMITS["message"]),
        "self_check": is_self_check(results),
        "assignment": clip(as_text(_mapping(results.get("assignment")).get("title")) or "Assignment", LIMITS["title"]),
        "mode": as_text(results.get("mode")),
        "submission_name": clip(submission.get("name") or "submission", LIMITS["title"]),
        "submission_kind": as_text(submission.get("kind")),
        "sha256": as_text(submission.get("sha256")),
        "notes": [clip(n, LIMITS["note"]) for n in submission.get("notes") or []],
        "origin": _origin_view(submission.get("origin")),
        "mistakes": mistakes,
        "not_attempted": not_attempted,
        "score": format_points(0 if is_rejected(results) else score),
        "max_score": format_points(max_score),
        "score_label": score_label(results),
        "total_bar": svg.score_bar(score, max_score, f"{points_text(score, max_score)} points"),
        "headline": headline(results),
        "hidden_count": counts.hidden,
        "provisional_parts": [p.title for p in parts if p.provisional],
        "provisional_total": provisional_note(results),
        **_flags_view(results),
        "worker_measured": _worker_measured_total(results),
        "parts": parts,
        "versions": _flat_items(results.get("versions")),
        **_timings_view(results.get("timings")),
        "schema_version": as_text(results.get("schema_version")),
    }


def _check_anchors(results: dict) -> dict[int, tuple[str, str]]:
    """id() of each check dict -> (its title, its anchor), as the parts render them."""
    anchors = {}
    for part_index, part in enumerate(results.get("parts") or []):
        for index, check in enumerate(part.get("checks") or [] if isinstance(part, dict) else []):
            if isinstance(check, dict):
                title = clip(check.get("title") or check.get("id") or "check", LIMITS["title"])
                anchors[id(check)] = (title, f"part-{part_index}-check-{index}")
    return anchors


def _points_lost(checks: list[dict]) -> str:
    lost = 0.0
    for check in checks:
        score, maximum = svg.as_number(check.get("score", 0)), svg.as_number(check.get("max_score", 0))
        if math.isfinite(score) and math.isfinite(maximum):
            lost += max(0.0, maximum - score)
    return format_points(lost)


def _mistakes_view(results: dict, anchors: dict[int, tuple[str, str]]
                   ) -> tuple[list[MistakeView], list[NotAttemptedView]]:
    """The "Mistakes found" box: each diagnosis (or repeated message) once, known mistakes first,
    with the checks it failed and the points it cost; what was not attempted apart, one line each."""
    checks = [c for c in all_checks(results) if isinstance(c, dict) and id(c) in anchors]
    unattempted: dict[str, list[dict]] = {}
    attempted = []
    for check in checks:
        label = not_attempted_label(check)
        if label:
            unattempted.setdefault(label, []).append(check)
        else:
            attempted.append(check)
    findings = gather(attempted)
    known = [f for f in findings if _diagnosis_id(f.checks[0])]
    others = [f for f in findings if not _diagnosis_id(f.checks[0])]
    mistakes = [
        MistakeView(anchor=f"mistake-{number}", headline=clip(finding.headline, LIMITS["diagnosis"]),
                    known=finding in known, points_lost=_points_lost(finding.checks),
                    checks=[anchors[id(c)] for c in finding.checks])
        for number, finding in enumerate(known + others, start=1)
    ]
    not_attempted = [NotAttemptedView(label=clip(label, LIMITS["message"]), points=_points_lost(members),
                                      titles=[anchors[id(c)][0] for c in members])
                     for label, members in unattempted.items()]
    return mistakes, not_attempted


def not_attempted_label(check: dict) -> str | None:
    """Why a check shows nothing of the student's work, when that is so: an untouched TODO stub,
    a check that could not run (its module is missing), a written answer left blank. Such checks
    are one line per reason: their messages and tracebacks would all say the same."""
    status = check.get("status")
    if status not in ("failed", "error", "skipped"):
        return None
    untouched = not_implemented_name(check)
    if untouched:
        return f"not implemented yet: {untouched}"
    if status == "skipped":
        return as_text(check.get("message")) or "not run"
    # A written answer fails before a person grades it only when nothing was written.
    if check.get("graded_by_hand") is True and status == "failed" and "manual" not in _mapping(check.get("details")):
        return "no written answer given"
    return None


def _diagnosis_id(check: dict) -> str:
    diagnosis = _mapping(check.get("diagnosis"))
    return as_text(diagnosis.get("id")) if diagnosis.get("text") else ""


def _link_diagnoses(parts: list[PartView], mistakes: list[MistakeView]) -> None:
    """Point each check's diagnosis at its "Mistakes found" entry; show it in full only once."""
    entry_of = {anchor: mistake for mistake in mistakes if mistake.known for _, anchor in mistake.checks}
    shown = set()
    for part in parts:
        for check in part.checks:
            mistake = entry_of.get(check.anchor)
            if mistake is None or not check.diagnosis:
                continue
            check.mistake_anchor = mistake.anchor
            check.diagnosis_repeated = mistake.anchor in shown
            shown.add(mistake.anchor)


def _origin_view(origin) -> dict | None:
    """A notebook hand-in's map: which cell gave each graded definition and each answer."""
    origin = _mapping(origin)
    if not origin:
        return None

    def rows(key, fields):
        items = origin.get(key) if isinstance(origin.get(key), list) else []
        return [tuple(clip(_mapping(item).get(name), LIMITS["title"]) for name in fields) for item in items]

    return {
        "notebook": clip(origin.get("notebook"), LIMITS["title"]),
        "definitions": rows("definitions", ("name", "cell", "module")),
        "answers": rows("answers", ("key", "cell")),
    }


def _flags_view(results: dict) -> dict:
    """results.json's `integrity` flags, for the "Flags for review" box (none: no box)."""
    integrity = _mapping(results.get("integrity"))
    flags = [f for f in integrity.get("flags") or [] if isinstance(f, dict)]
    dropped = integrity.get("dropped")
    dropped = dropped if type(dropped) is int and dropped > 0 else 0
    return {
        "flags": [FlagView(kind=one_line(f.get("kind"), 60), reason=one_line(f.get("reason"), LIMITS["flag"]),
                           where=one_line(f.get("where"), LIMITS["title"]), code=one_line(f.get("code"), LIMITS["flag"]))
                  for f in flags[:MAX_FLAGS_SHOWN]],
        "flag_count": len(flags) + dropped,
        "flags_more": len(flags[MAX_FLAGS_SHOWN:]) + dropped,
    }


def _mapping(value) -> dict:
    return value if isinstance(value, dict) else {}


def _worker_measured_total(results: dict) -> dict | None:
    """How many of the points rest on the worker's own measurement of the submission's code
    (checks marked `worker_measured` that are worth points): None when no point does."""
    checks = [c for c in all_checks(results) if isinstance(c, dict) and _rests_on_the_worker(c)]
    if not checks:
        return None
    score = sum(svg.as_number(c.get("score", 0)) for c in checks if math.isfinite(svg.as_number(c.get("score", 0))))
    max_score = sum(svg.as_number(c.get("max_score", 0)) for c in checks
                    if math.isfinite(svg.as_number(c.get("max_score", 0))))
    return {"checks": len(checks), "score": format_points(score), "max_score": format_points(max_score)}


def _rests_on_the_worker(check: dict) -> bool:
    """A check worth points whose score the worker measured: what the report warns of."""
    maximum = svg.as_number(check.get("max_score", 0))
    return check.get("worker_measured") is True and math.isfinite(maximum) and maximum > 0


def _flat_items(mapping) -> list[tuple[str, str]]:
    return [(as_text(k), clip(v, LIMITS["title"])) for k, v in _mapping(mapping).items()]


def _timings_view(timings) -> dict:
    """The total time, shown; every other timing (one per check: 75 rows) folded away."""
    items = _timing_items(timings)
    total = [value for name, value in items if name == "total time"]
    return {"total_time": total[0] if total else "", "timings": [item for item in items if item[0] != "total time"]}


def _timing_items(timings) -> list[tuple[str, str]]:
    items = []
    for key, value in _mapping(timings).items():
        if isinstance(value, dict):
            items.extend((f"{_timing_name(key)}: {k}", _seconds(v)) for k, v in value.items())
        else:
            items.append((_timing_name(key), _seconds(value)))
    return items


def _timing_name(key) -> str:
    """total_s -> "total time", worker_start_s -> "worker start time"."""
    return as_text(key).removesuffix("_s").replace("_", " ") + " time"


def _seconds(value) -> str:
    number = svg.as_number(value)
    return f"{number:.2f} s" if math.isfinite(number) else as_text(value)


def _part_view(index: int, part: dict, points: Points) -> PartView:
    raw_checks = list(part.get("checks") or [])
    checks = [_check_view(index, i, c) for i, c in enumerate(raw_checks)]
    automatic = [c for c in checks if c.status != MANUAL]
    groups: dict[str, list[tuple[dict, CheckView]]] = {}
    for raw, view in zip(raw_checks, checks):
        label = not_attempted_label(raw) if isinstance(raw, dict) else None
        if label:
            groups.setdefault(label, []).append((raw, view))
    collapsed = {id(view) for members in groups.values() for _, view in members}
    not_attempted = [NotAttemptedView(label=clip(label, LIMITS["message"]), points=_points_lost([r for r, _ in members]),
                                      titles=[view.title for _, view in members])
                     for label, members in groups.items()]
    passed = sum(1 for c in automatic if c.status == "passed")
    score, max_score = points.score, points.max_score
    title = clip(part.get("title") or part.get("id") or f"Part {index + 1}", LIMITS["title"])
    return PartView(
        anchor=f"part-{index}",
        title=title,
        points=points_text(score, max_score),
        bar=svg.score_bar(score, max_score, f"{title}: {points_text(score, max_score)} points"),
        passed_line=f"{passed}/{len(automatic)} checks passed" if automatic else "",
        provisional=bool(part.get("provisional")),
        note=clip(provisional_reason(part) if part.get("provisional") else part.get("note"), LIMITS["note"]),
        checks=[c for c in checks if id(c) not in collapsed],
        not_attempted=not_attempted,
    )


def _check_view(part_index: int, index: int, check: dict) -> CheckView:
    details = _mapping(check.get("details"))
    diagnosis = _mapping(check.get("diagnosis"))
    status = check.get("status") if check.get("status") in STATUS_LABELS else "error"
    merged = merged_by_hand(check)
    return CheckView(
        anchor=f"part-{part_index}-check-{index}",
        title=clip(check.get("title") or check.get("id") or "check", LIMITS["title"]),
        status="graded" if merged else status,
        status_label=GRADED_BY_HAND if merged else STATUS_LABELS[status],
        icon=STATUS_ICONS[MANUAL] if merged else STATUS_ICONS[status],
        points=points_text(check.get("score", 0), check.get("max_score", 0)),
        hidden=check.get("visibility") == "hidden",
        message=clip(check.get("message"), LIMITS["message"]),
        diagnosis=clip(diagnosis.get("text"), LIMITS["diagnosis"]),
        diagnosis_id=clip(diagnosis.get("id"), LIMITS["title"]),
        counterexample=clip(check.get("counterexample"), LIMITS["counterexample"]),
        expected=clip(details.get("expected"), LIMITS["value"]),
        got=clip(details.get("got"), LIMITS["value"]),
        comparisons=_comparisons(_mapping(details.get("numbers"))),
        numbers=_error_numbers(_mapping(details.get("numbers"))),
        attention=_attention_view(details.get("attention_maps")),
        proportions=_proportion_rows(details.get("proportions")),
        curves=_curves_view(details.get("training_curve")),
        traceback=clip(details.get("traceback"), LIMITS["traceback"]),
        output=clip(details.get("output"), LIMITS["output"]),
        answer=clip(details.get("answer"), LIMITS["answer"]),
        rubric=clip(details.get("rubric"), LIMITS["rubric"]),
        elapsed=_seconds(details["elapsed_s"]) if "elapsed_s" in details else "",
        worker_measured=check.get("worker_measured") is True,
        marks=_marks(_mapping(details.get("manual"))),
        forgeable=_rests_on_the_worker(check),
    )


def _marks(manual: dict) -> list[tuple[str, str]]:
    items = manual.get("items") if isinstance(manual.get("items"), list) else []
    marks = []
    for item in items:
        if isinstance(item, dict):
            points = format_points(item.get("points"))
            marks.append((points if points.startswith("-") or points in ("0", "?") else f"+{points}",
                          clip(item.get("text"), LIMITS["message"])))
    return marks


# --------------------------------------------------------------------------- numbers


def _show_value(value) -> str:
    if value is None:
        return "none"
    if isinstance(value, list):
        return "(" + ", ".join(_show_value(v) for v in value) + ")"
    if isinstance(value, float):
        return svg.format_number(value)
    return clip(value, LIMITS["title"])


def _comparisons(numbers: dict) -> list[tuple[str, str, str]]:
    rows = []
    for label, key in (("shape", "shape"), ("dtype", "dtype")):
        expected, got = numbers.get(f"expected_{key}"), numbers.get(f"got_{key}")
        if expected is not None or got is not None:
            rows.append((label, _show_value(expected), _show_value(got)))
    return rows


ERROR_LABELS = {
    "max_abs_error": "largest absolute error",
    "max_rel_error": "largest relative error",
    "first_mismatch_index": "first mismatching index",
}


def _error_numbers(numbers: dict) -> list[tuple[str, str]]:
    return [(label, _show_value(numbers[key])) for key, label in ERROR_LABELS.items() if key in numbers]


# --------------------------------------------------------------------------- attention maps


def _attention_view(maps) -> AttentionView | None:
    if not isinstance(maps, dict):
        return None
    notes: list[str] = []
    matrices = {}
    for name in ("expected", "got"):
        if name not in maps:
            continue
        matrix = svg.to_matrix(maps[name])
        if matrix is None:
            notes.append(f"The {name} map is not a rectangular (T, T) matrix, so it is not drawn.")
        else:
            matrices[name] = matrix
    if not matrices:
        return AttentionView([], "", "", None, notes) if notes else None

    shapes = {name: (len(m), len(m[0])) for name, m in matrices.items()}
    if any(rows > HEATMAP_SIDE or cols > HEATMAP_SIDE for rows, cols in shapes.values()):
        notes.append(f"Only the first {HEATMAP_SIDE} queries and keys are drawn.")
        matrices = {name: svg.crop(m, HEATMAP_SIDE) for name, m in matrices.items()}
    if any(not math.isfinite(v) for m in matrices.values() for row in m for v in row):
        notes.append("Grey cells are not finite numbers (NaN or infinity).")

    low, high = svg.matrix_range(*matrices.values())
    figures = [
        Figure(
            f"{name} {_shape_text(shapes[name])}",
            svg.heatmap(matrix, low, high, f"{name} attention weights"),
        )
        for name, matrix in matrices.items()
    ]
    difference_high = _add_difference(matrices, figures, notes)
    return AttentionView(figures, svg.format_number(low), svg.format_number(high), difference_high, notes)


def _shape_text(shape: tuple[int, int]) -> str:
    return f"({shape[0]} × {shape[1]})"


def _add_difference(matrices: dict, figures: list[Figure], notes: list[str]) -> str | None:
    """Append |got − expected| with its largest cell outlined; return its scale's top."""
    expected, got = matrices.get("expected"), matrices.get("got")
    if expected is None or got is None:
        return None
    if (len(expected), len(expected[0])) != (len(got), len(got[0])):
        notes.append("The maps have different shapes, so no difference is drawn.")
        return None
    difference = svg.abs_difference(got, expected)
    values = svg.finite(v for row in difference for v in row)
    if not values:
        return None
    top = max(values)
    figures.append(
        Figure(
            "|got − expected|",
            svg.heatmap(
                difference,
                0.0,
                top or 1.0,
                "absolute difference",
                ramp=svg.DIFFERENCE_RAMP,
                mark=svg.argmax_cell(difference),
            ),
        )
    )
    return svg.format_number(top)


# --------------------------------------------------------------------------- proportions


def _proportion_rows(items) -> list[ProportionRow]:
    rows = []
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        value, target = svg.as_number(item.get("value")), svg.as_number(item.get("target"))
        low, high = svg.as_number(item.get("low")), svg.as_number(item.get("high"))
        end = svg.axis_end(max(svg.finite([value, target, high]), default=1.0))
        rows.append(
            ProportionRow(
                name=clip(item.get("name") or "rate", LIMITS["title"]),
                value=svg.format_number(value),
                target=svg.format_number(target),
                interval=f"[{svg.format_number(low)}, {svg.format_number(high)}]",
                inside=math.isfinite(value) and low <= value <= high,
                axis_end=svg.format_number(end),
                track=svg.proportion_track(value, target, low, high, end),
            )
        )
    return rows


# --------------------------------------------------------------------------- training curves

TRAIN_COLOUR, VALID_COLOUR = "#2563eb", "#d97706"
CHARTS = (
    ("loss", ("train_loss", "valid_loss")),
    ("accuracy", ("train_acc", "valid_acc")),
)


def _curves_view(curve) -> CurvesView | None:
    if not isinstance(curve, dict):
        return None
    columns = {
        key: [svg.as_number(v) for v in values]
        for key, values in curve.items()
        if isinstance(values, list)
    }
    length = max((len(v) for v in columns.values()), default=0)
    epochs = columns.get("epoch") or [float(i + 1) for i in range(length)]
    charts, legend, notes = [], {}, []
    for quantity, keys in CHARTS:
        series = [_series(key, columns[key]) for key in keys if key in columns]
        values = svg.finite(v for s in series for v in s.values)
        if not values:
            continue
        y_range = _y_range(quantity, values)
        label = f"{quantity} per epoch"
        charts.append(Figure(quantity, svg.line_chart(epochs, series, y_range, label)))
        legend.update({_role(s.name): Legend(_role(s.name), s.colour, s.dashed) for s in series})
        notes.extend(_not_finite_notes(series, epochs))
    if not charts:
        return None
    return CurvesView(charts, list(legend.values()), notes)


def _series(key: str, values: list[float]) -> svg.Series:
    validation = key.startswith("valid")
    name = ("validation" if validation else "training") + (" loss" if key.endswith("loss") else " accuracy")
    return svg.Series(name, values, VALID_COLOUR if validation else TRAIN_COLOUR, dashed=validation)


def _role(series_name: str) -> str:
    """Charts are captioned loss and accuracy, so the legend only says which split."""
    return series_name.split()[0]


def _y_range(quantity: str, values: list[float]) -> tuple[float, float]:
    if quantity == "accuracy" and min(values) >= 0 and max(values) <= 1:
        return 0.0, 1.0
    low, high = svg.padded_range(values)
    step = svg.nice_step(high - low, 4)
    return math.floor(low / step) * step, math.ceil(high / step) * step


def _not_finite_notes(series: list[svg.Series], epochs: list[float]) -> list[str]:
    notes = []
    for s in series:
        bad = [svg.format_number(e) for e, v in zip(epochs, s.values) if not math.isfinite(v)]
        if bad:
            notes.append(f"{s.name} is not a finite number at epoch {', '.join(bad)}.")
    return notes
