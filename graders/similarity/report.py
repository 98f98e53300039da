"""The similarity report: index.html, a side-by-side page per pair shown, similarity.csv and
similarity.json, written together into one folder (by default the batch's `similarity/`).

Everything here is a function of the comparison: no time, no machine path, sorted throughout,
so the same batch gives the same bytes. The words are those of evidence for a person to read
(`WORDS`); nothing of it goes into a student's feedback, Gradescope or the bundle: the folder sits
beside the batch's staff outputs and no other output reads it.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from graders.similarity import pages
from graders.similarity.compare import (KGRAM, REFERENCE, WINDOW, Comparison, Fragment, HandIn, Pair,
                                        PairDetail, detail)
from graders.similarity.handins import NotCompared

INDEX, CSV_FILE, JSON_FILE, PAIRS = "index.html", "similarity.csv", "similarity.json", "pairs"
SCHEMA_VERSION = 1
SHOWN_AT_LEAST = 50  # student pairs shown with their own page, besides every flagged one
SHOWN_AT_MOST = 500
CORPUS_SHOWN = 30
HISTOGRAM_BINS = 20

WORDS = ("Evidence to look at, not a verdict: pairs of hand-ins that share more of their own code than "
         "hand-ins of this class usually do. Read each side-by-side view before drawing any conclusion: "
         "code can be alike for innocent reasons (a source the course allows, help it permits).")

# What the comparison does not see, said rather than promised (docs/batch.md says the same).
LIMITS = (
    "A loop rewritten as a comprehension, or a comprehension as a loop.",
    "A function split in two or inlined into its caller, a class turned into functions.",
    "Another library call for the same thing (view for reshape, torch.matmul for @, einsum for either).",
    "Operands swapped (a * b for b * a), an if turned around (if not x: ... else: ...), a condition rewritten.",
    "Statements reordered where one depends on the other (the program then computes something else).",
    "Copied code shorter than about two lines (19 tokens) in one place: single shared lines are not found.",
    "Code shared by more students than the common threshold: it counts as the class's common code, "
    "also where a large group copied one source.",
    "Code that is not Python the grader reads: notebook cells that are not definitions, text answers.",
)


@dataclass
class Shown:
    """A pair with its page: the detail of its shares and fragments."""
    detail: PairDetail
    page: str  # relative to the report folder


@dataclass
class Report:
    comparison: Comparison
    not_compared: list[NotCompared]
    assignment_name: str
    assignment_title: str
    shown: dict[tuple[str, str], Shown] = field(default_factory=dict)


def write_report(comparison: Comparison, not_compared: list[NotCompared], assignment, folder: Path) -> Path:
    """Write the report into `folder`, replacing the one there: complete under a temporary name
    beside it, then renamed into place. Returns the index page."""
    report = Report(comparison, not_compared, assignment.name, assignment.title)
    flagged = comparison.flagged()
    shown_pairs = comparison.pairs[:min(max(SHOWN_AT_LEAST, len(flagged)), SHOWN_AT_MOST)]
    shown_corpus = [p for p in comparison.corpus_pairs if p.shared][:max(CORPUS_SHOWN, sum(
        1 for p in comparison.corpus_pairs if p.score >= comparison.flag_at))]
    for pair in [*shown_pairs, *shown_corpus]:
        if pair.shared:
            report.shown[(pair.a, pair.b)] = Shown(detail(comparison, pair), f"{PAIRS}/{_page_name(pair)}")
    files = {INDEX: pages.index_page(_index_view(report)), CSV_FILE: _csv(report), JSON_FILE: _json(report)}
    for shown in report.shown.values():
        files[shown.page] = pages.pair_page(_pair_view(report, shown))
    return _replace_folder(Path(folder), files) / INDEX


def _page_name(pair: Pair) -> str:
    safe = [re.sub(r"[^A-Za-z0-9._@+-]", "_", name) for name in (pair.a, pair.b)]
    return f"{'' if pair.kind == 'students' else pair.kind + '~'}{safe[0]}~{safe[1]}.html"


def _replace_folder(folder: Path, files: dict[str, str]) -> Path:
    folder = Path(os.path.abspath(folder))
    folder.parent.mkdir(parents=True, exist_ok=True)
    temporary = folder.parent / f".{folder.name}.{uuid.uuid4().hex[:8]}.tmp"
    temporary.mkdir(mode=0o700)
    try:
        for name, text in files.items():
            path = temporary / name
            path.parent.mkdir(exist_ok=True)
            path.write_text(text, encoding="utf-8")
        if folder.exists():
            aside = folder.parent / f".{folder.name}.{uuid.uuid4().hex[:8]}.old"
            os.rename(folder, aside)
            os.rename(temporary, folder)
            shutil.rmtree(aside, ignore_errors=True)
        else:
            os.rename(temporary, folder)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return folder


# --------------------------------------------------------------------------- what the pages and files say

def _percent(share: float) -> str:
    return f"{round(share * 100)}%"


def _module_shares(shown: Shown | None) -> dict[str, dict[str, dict[str, float | int]]]:
    if shown is None:
        return {}
    out = {}
    for module, sides in shown.detail.modules.items():
        out[module] = {side: {"own": own, "shared": shared, "share": round(shared / own, 4) if own else 0.0}
                       for side, (own, shared) in ((side, sides.get(side, (0, 0))) for side in ("a", "b"))}
    return out


def _where(hand_in: HandIn, stream: int, lines: set[int]) -> dict:
    """Where a fragment lies on one side: its file and lines, and the notebook cells for a notebook."""
    module = hand_in.streams[stream].module
    first, last = min(lines), max(lines)
    where: dict = {"file": module, "first_line": first, "last_line": last}
    cells = hand_in.cells.get(module)
    if cells:
        found = sorted({cells[line - 1] for line in lines if 0 < line <= len(cells) and cells[line - 1] is not None})
        where.update(notebook=hand_in.notebook, cells=found)
    return where


def _fragment_lines(hand_in: HandIn, stream: int, start: int, tokens: int) -> set[int]:
    return set(hand_in.streams[stream].lines[start:start + tokens])


def _fragment_json(report: Report, pair: Pair, fragment: Fragment) -> dict:
    hand_ins = report.comparison.by_id()
    a, b = hand_ins[pair.a], hand_ins[pair.b]
    return {"tokens": fragment.tokens,
            "a": _where(a, fragment.a_stream, _fragment_lines(a, fragment.a_stream, fragment.a_start, fragment.tokens)),
            "b": _where(b, fragment.b_stream, _fragment_lines(b, fragment.b_stream, fragment.b_start, fragment.tokens))}


def _where_text(where: dict) -> str:
    lines = (f"line {where['first_line']}" if where["first_line"] == where["last_line"]
             else f"lines {where['first_line']}–{where['last_line']}")
    if where.get("notebook"):
        cells = ", ".join(str(c) for c in where.get("cells", []))
        return f"{where['notebook']} cell {cells} ({where['file']} {lines})" if cells else f"{where['file']} {lines}"
    return f"{where['file']} {lines}"


def _pair_json(report: Report, pair: Pair, rank: int) -> dict:
    shown = report.shown.get((pair.a, pair.b))
    entry = {"rank": rank, "kind": pair.kind, "a": pair.a, "b": pair.b, "score": pair.score,
             "share_a": pair.share_a, "share_b": pair.share_b, "shared_fingerprints": pair.shared,
             "flagged": pair.score >= report.comparison.flag_at, "page": shown.page if shown else None}
    if shown is not None:
        entry["modules"] = _module_shares(shown)
        entry["units"] = {unit: {side: {"own": own, "shared": shared}
                                 for side, (own, shared) in ((side, sides.get(side, (0, 0))) for side in ("a", "b"))}
                          for unit, sides in shown.detail.units.items()}
        fragments = shown.detail.fragments
        entry["longest_fragment"] = _fragment_json(report, pair, fragments[0]) if fragments else None
    return entry


def _method(report: Report) -> dict:
    comparison = report.comparison
    return {"kgram_tokens": KGRAM, "window": WINDOW, "students": len(comparison.students()),
            "common_threshold": comparison.common, "discounted_fingerprints": comparison.discounted,
            "floor_fingerprints": comparison.floor, "flag_at": comparison.flag_at}


def _histogram(comparison: Comparison) -> list[int]:
    counts = [0] * HISTOGRAM_BINS
    for pair in comparison.pairs:
        counts[min(HISTOGRAM_BINS - 1, int(pair.score * HISTOGRAM_BINS))] += 1
    return counts


def _json(report: Report) -> str:
    comparison = report.comparison
    pairs = [p for p in comparison.pairs if p.shared]
    data = {
        "schema_version": SCHEMA_VERSION,
        "about": WORDS,
        "assignment": {"name": report.assignment_name, "title": report.assignment_title},
        "method": _method(report),
        "hand_ins": [{"id": h.id, "kind": h.kind, "handed_in_as": h.source_kind, "fingerprints": len(h.fingerprints),
                      "notes": h.code.notes} for h in comparison.hand_ins],
        "not_compared": [{"id": n.id, "kind": n.kind, "reason": n.reason} for n in report.not_compared],
        "histogram": {"bin_width": 1 / HISTOGRAM_BINS, "counts": _histogram(comparison), "pairs": len(comparison.pairs)},
        "pairs": [_pair_json(report, p, rank) for rank, p in enumerate(pairs, 1)],
        "corpus_matches": [_pair_json(report, p, rank) for rank, p in
                           enumerate([p for p in comparison.corpus_pairs if p.shared], 1)],
        "clusters": [_cluster_json(comparison, members) for members in comparison.clusters()],
        "limits": list(LIMITS),
    }
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def _cluster_json(comparison: Comparison, members: list[str]) -> dict:
    inside = [p for p in comparison.flagged() if p.a in members and p.b in members]
    return {"members": members, "flagged_pairs": len(inside),
            "highest_score": max(p.score for p in inside), "lowest_score": min(p.score for p in inside)}


def _csv(report: Report) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["rank", "kind", "a", "b", "score", "share_a", "share_b", "shared_fingerprints", "flagged",
                     "modules", "longest_fragment_tokens", "longest_fragment_a", "longest_fragment_b", "page"])
    comparison = report.comparison
    for kind_pairs in ([p for p in comparison.pairs if p.shared], [p for p in comparison.corpus_pairs if p.shared]):
        for rank, pair in enumerate(kind_pairs, 1):
            entry = _pair_json(report, pair, rank)
            modules = "; ".join(f"{m} {_percent(s['a']['share'])}/{_percent(s['b']['share'])}"
                                for m, s in entry.get("modules", {}).items())
            longest = entry.get("longest_fragment")
            writer.writerow([rank, pair.kind, _cell(pair.a), _cell(pair.b), pair.score, pair.share_a, pair.share_b,
                             pair.shared, "yes" if entry["flagged"] else "", modules,
                             longest["tokens"] if longest else "", _where_text(longest["a"]) if longest else "",
                             _where_text(longest["b"]) if longest else "", entry["page"] or ""])
    return buffer.getvalue()


def _cell(text: str) -> str:
    """A corpus entry's name as a spreadsheet cell: never read as a formula."""
    return f"'{text}" if text[:1] in ("=", "+", "-", "@") else text


# --------------------------------------------------------------------------- the pages' views

def _index_view(report: Report) -> dict:
    comparison = report.comparison
    flagged = comparison.flagged()
    hand_ins = comparison.by_id()
    rows = []
    for rank, pair in enumerate(comparison.pairs, 1):
        shown = report.shown.get((pair.a, pair.b))
        if shown is None:
            break
        rows.append(_row(report, pair, rank, shown))
    corpus_rows = [_row(report, pair, rank, report.shown[(pair.a, pair.b)])
                   for rank, pair in enumerate(comparison.corpus_pairs, 1) if (pair.a, pair.b) in report.shown]
    sentences = []
    for row in corpus_rows:
        for module, sides in row["modules"].items():
            share = sides["a"]["share"]
            if share >= comparison.flag_at:
                label = "the reference solution" if row["kind"] == REFERENCE else f"corpus entry {row['b']}"
                sentences.append({"a": row["a"], "page": row["page"],
                                  "text": f"shares {_percent(share)} of {module} with {label}"})
    return {
        "title": report.assignment_title, "words": WORDS, "method": _method(report),
        "students": len(comparison.students()), "pairs": len(comparison.pairs), "flagged": len(flagged),
        "others": [h for h in comparison.hand_ins if h.kind != "student"],
        "histogram": pages.histogram_svg(_histogram(comparison), comparison.flag_at),
        "rows": rows, "corpus_rows": corpus_rows, "corpus_sentences": sentences,
        "clusters": [_cluster_json(comparison, members) for members in comparison.clusters()],
        "not_compared": report.not_compared, "limits": LIMITS,
        "notebooks": sorted(h.id for h in hand_ins.values() if h.source_kind == "notebook"),
        "files": (CSV_FILE, JSON_FILE),
    }


def _row(report: Report, pair: Pair, rank: int, shown: Shown) -> dict:
    entry = _pair_json(report, pair, rank)
    longest = entry.get("longest_fragment")
    return {**entry, "score_text": _percent(pair.score), "share_a_text": _percent(pair.share_a),
            "share_b_text": _percent(pair.share_b),
            "longest_text": (f"{longest['tokens']} tokens: {_where_text(longest['a'])} ↔ {_where_text(longest['b'])}"
                             if longest else "")}


def _pair_view(report: Report, shown: Shown) -> dict:
    pair = shown.detail.pair
    hand_ins = report.comparison.by_id()
    a, b = hand_ins[pair.a], hand_ins[pair.b]
    fragments = []
    marks: dict[str, dict[str, dict[int, int]]] = {"a": defaultdict(dict), "b": defaultdict(dict)}
    for number, fragment in enumerate(shown.detail.fragments, 1):
        found = _fragment_json(report, pair, fragment)
        fragments.append({"number": number, "tokens": fragment.tokens, "a": _where_text(found["a"]),
                          "b": _where_text(found["b"])})
        for side, hand_in, stream, start in (("a", a, fragment.a_stream, fragment.a_start),
                                             ("b", b, fragment.b_stream, fragment.b_start)):
            module = hand_in.streams[stream].module
            for line in sorted(_fragment_lines(hand_in, stream, start, fragment.tokens)):
                marks[side][module].setdefault(line, number)
    modules = sorted(set(a.code.modules) | set(b.code.modules))
    columns = []
    for module in modules:
        columns.append({"module": module, "sides": [_side(side, hand_in, module, marks[side].get(module, {}),
                                                          shown.detail.common_lines[side].get(module, set()))
                                                    for side, hand_in in (("a", a), ("b", b))]})
    return {"pair": _row(report, pair, 0, shown), "a": a, "b": b, "words": WORDS, "fragments": fragments,
            "columns": columns, "flag_at": report.comparison.flag_at,
            "common": report.comparison.common}


def _side(side: str, hand_in: HandIn, module: str, marks: dict[int, int], common: set[int]) -> dict:
    text = hand_in.code.modules.get(module)
    if text is None:
        return {"side": side, "id": hand_in.id, "missing": True, "notebook": None}
    given = set().union(*(s.template_lines for s in hand_in.streams if s.module == module))
    cells = hand_in.cells.get(module) or []
    lines = []
    first_of: dict[int, int] = {}  # fragment -> its first line here, where its anchor goes
    for line, number in sorted(marks.items()):
        first_of.setdefault(number, line)
    for number, content in enumerate(text.splitlines(), 1):
        fragment = marks.get(number)
        kind = "shared" if fragment else "given" if number in given else "common" if number in common else ""
        lines.append({"number": number, "text": content, "kind": kind, "fragment": fragment,
                      "anchor": f"{side}-f{fragment}" if fragment and first_of[fragment] == number else None,
                      "cell": cells[number - 1] if number - 1 < len(cells) else None})
    return {"side": side, "id": hand_in.id, "missing": False, "notebook": hand_in.notebook,
            "rows": pages.code_rows(side, module, lines, hand_in.notebook is not None)}
