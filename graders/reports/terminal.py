"""The terminal summary: a line or a table per part, then what to fix in full, then the total.

A part whose checks all pass is one line, and so is a part stopped by a single problem (an
untouched function, a module that does not import): a student scans the parts, not every
check. The other parts get a table of their checks, where a failing row points at a numbered
finding under the tables; each finding says in full, wrapped to the terminal's width, what to
fix, on which smallest input, what was expected and what came back (graders/reports/findings.py).
`verbose` shows every table and every failing check on its own, with all its details.

Written answers are listed apart with their points: a person grades them after the deadline.

rich decides on colour: a Console on a terminal gets it, one writing to a pipe or a file gets
plain text. Student text is passed as `Text`, never as a markup string, so that "[bold]" in a
message stays literal, and it is reduced to printable characters (`one_line`, or `printable`
line by line for a traceback, whose caret must stay under its column), so that escape codes in
it never reach the terminal.
"""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from graders.integrity import flag_summary

from . import findings as found
from .figures import Points, figures
from .summary import (
    STATUS_LABELS,
    after_deadline_rows,
    format_points,
    headline,
    is_graded_by_hand,
    is_rejected,
    is_self_check,
    isolation_warning,
    merged_by_hand,
    one_line,
    printable,
    points_text,
    rejection_reason,
    provisional_note,
    score_label,
    shown_total,
    ungraded_title,
)

STATUS_STYLES = {
    "passed": "green",
    "failed": "red",
    "error": "bold red",
    "skipped": "dim",
    "pending_manual": "magenta",
}
# The table has no room for "awaiting manual grading"; the headline under it says it in full.
SHORT_LABELS = {**STATUS_LABELS, "pending_manual": "manual"}
TITLE_LIMIT = 160
TEXT_LIMIT = 2000


def print_summary(results: dict, console: Console | None = None, *, verbose: bool = False) -> None:
    console = console or Console()
    warning = isolation_warning(results)
    if warning:
        console.print(Text(warning, style="bold red"))
    if is_rejected(results):
        console.print(Text(f"{ungraded_title(results)}: {one_line(rejection_reason(results), 500)}", style="bold red"))
        # Out of nothing where no assignment could be told from the hand-in.
        out_of = f" / {format_points(shown_total(results)[1])}" if isinstance(results.get("assignment"), dict) else ""
        console.print(Text(f"{score_label(results)}: 0{out_of}"))
        return
    points = figures(results).parts
    parts = [(part, [c for c in part.get("checks") or [] if not is_graded_by_hand(c)])
             for part in results.get("parts") or []]
    titles = {id(part): _part_title(part, part_points) for part, part_points in zip(results.get("parts") or [], points)}
    to_fix = found.gather([c for _, checks in parts for c in checks], merge=not verbose)
    untouched = {} if verbose else {id(part): _untouched(checks, to_fix) for part, checks in parts}
    # A function named on its part's line is not listed again under "What to fix".
    named = {id(c) for part, checks in parts if untouched.get(id(part)) for c in checks}
    to_fix = [finding for finding in to_fix if any(id(c) not in named for c in finding.checks)]
    numbers = {id(check): n for n, finding in enumerate(to_fix, 1) for check in finding.checks}
    for part, checks in parts:
        if not checks:
            continue
        if untouched.get(id(part)):
            console.print(Text.assemble((titles[id(part)], "bold"), ": ", ("not implemented yet: ", "red"),
                                        one_line(", ".join(untouched[id(part)]), TEXT_LIMIT)))
        else:
            console.print(_part_view(titles[id(part)], checks, numbers, verbose))
    if to_fix:
        console.print()
        console.print(Text("What to fix", style="bold"))
        console.print(_findings_view(to_fix, verbose))
    by_hand = [c for part in results.get("parts") or [] for c in part.get("checks") or [] if is_graded_by_hand(c)]
    if by_hand:
        console.print()
        console.print(_by_hand_view(by_hand, is_self_check(results)))
    if later := after_deadline_rows(results):
        console.print()
        console.print(_after_deadline_view(later))
    console.print()
    score, max_score = shown_total(results)
    console.print(Text.assemble((f"{score_label(results)}: {points_text(score, max_score)}", "bold"),
                                "  ", headline(results)))
    provisional = provisional_note(results)
    if provisional:
        console.print(Text(f"Provisional: {provisional}", style="yellow"))
    if warning:
        console.print(Text(warning, style="bold red"))
    count, kinds = flag_summary(results)
    if count and not is_self_check(results):  # for the course staff to review, not for the student
        console.print(Text(f"{count} integrity flag{'s' if count != 1 else ''} for review ({one_line(', '.join(kinds), 200)}): "
                           "listed in the HTML report; no points depend on them", style="yellow"))


def _part_title(part: dict, points: Points) -> str:
    title = one_line(part.get("title") or part.get("id"), 120)
    if format_points(points.max_score) == "0":
        # Practice parts (the rubric gives positional encoding 0 points) are checked, not scored.
        return f"{title} — practice, 0 points"
    title += f" — {points_text(points.score, points.max_score)}"
    return title + (" (provisional)" if part.get("provisional") else "")


def _untouched(checks, to_fix) -> list[str]:
    """The untouched functions that stop every check of a part ([] when one passes or fails
    for another reason): the part is then one line, a student has nothing else to read there."""
    names = {id(c): f.not_implemented for f in to_fix for c in f.checks}
    stopped = [names.get(id(c)) for c in checks]
    return list(dict.fromkeys(stopped)) if all(stopped) else []


def _part_view(title, checks, numbers, verbose):
    if not verbose:
        if all(c.get("status") == "passed" for c in checks):
            passed = f"all {len(checks)} checks passed" if len(checks) > 1 else "its check passed"
            return Text.assemble((title, "bold"), (f": {passed}", "green"))
        shared = {numbers.get(id(c)) for c in checks}
        if len(shared) == 1 and None not in shared:
            # One problem stops every check of the part (a module that does not import): no table.
            return Text.assemble((title, "bold"), ": ", (f"no check passes, see [{shared.pop()}] below", "red"))
    table = Table(title=Text(title, style="bold"), title_justify="left", expand=True, show_edge=False,
                  pad_edge=False)
    table.add_column("check", ratio=1, overflow="fold")
    table.add_column("status", no_wrap=True)
    table.add_column("points", justify="right", no_wrap=True)
    table.add_column("fix", no_wrap=True)
    for check in checks:
        status = check.get("status") if check.get("status") in STATUS_LABELS else "error"
        number = numbers.get(id(check))
        table.add_row(
            Text(one_line(check.get("title") or check.get("id"), TITLE_LIMIT)),
            Text(SHORT_LABELS[status], style=STATUS_STYLES[status]),
            Text(points_text(check.get("score"), check.get("max_score"))),
            Text(f"[{number}]" if number else ""),
        )
    return table


def _findings_view(to_fix, verbose):
    """Numbered findings with a hanging indent: the number, then the text wrapped beside it."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(ratio=1, overflow="fold")
    for number, finding in enumerate(to_fix, 1):
        body = [Text(one_line(finding.headline, TEXT_LIMIT), style="bold")]
        for label, text in found.finding_lines(finding, verbose=verbose):
            body.append(_labelled(label, text))
        grid.add_row(Text(f"[{number}]", style="bold red"), Group(*body))
    return grid


def _labelled(label, text):
    if text.startswith("\n"):  # a block (traceback, printed output): kept line by line
        lines = [printable(line)[:TEXT_LIMIT] for line in text[1:].splitlines()]
        return Text.assemble((f"{label}:", "dim"), "\n", "\n".join("  " + line for line in lines))
    if not label:
        return Text(one_line(text, TEXT_LIMIT))
    return Text.assemble((f"{label}: ", "dim"), one_line(text, TEXT_LIMIT))


def _after_deadline_view(rows):
    """What a self-check does not grade (numeric answers, a part trained on the course's data):
    each with its points, so that no point of the homework goes unexplained."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(ratio=2, overflow="fold")
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column(ratio=3, overflow="fold")
    for title, points, state in rows:
        grid.add_row(Text(title), Text(points), Text(state, style="magenta"))
    return Group(Text("Graded after the due date, not in the score above", style="bold"), grid)


def _by_hand_view(checks, self_check):
    when = "after the deadline, not in the score above" if self_check else "by the course staff"
    grid = Table.grid(padding=(0, 1))
    grid.add_column(ratio=1, overflow="fold")
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column(no_wrap=True)
    problems = []  # why answers could not be read at all (the questions file missing or broken)
    for check in checks:
        if check.get("status") == "pending_manual":
            state = Text("written", style="magenta")
        elif merged_by_hand(check):
            state = Text("graded", style="cyan")
        elif check.get("status") == "failed":  # the only way a written answer fails unmerged: it is empty
            state = Text("not written yet", style="red")
        else:
            if found.needs_fixing(check) and check.get("message"):
                problems.append(one_line(check["message"], TEXT_LIMIT))
            state = Text(SHORT_LABELS.get(check.get("status"), ""), style=STATUS_STYLES.get(check.get("status"), ""))
        points = (f"{format_points(check.get('max_score'))} points" if check.get("status") == "pending_manual"
                  else points_text(check.get("score"), check.get("max_score")))
        grid.add_row(Text(one_line(check.get("title") or check.get("id"), TITLE_LIMIT)), Text(points), state)
    heading = Text(f"Written answers, graded by hand {when}", style="bold")
    return Group(heading, grid, *[Text(problem, style="red") for problem in dict.fromkeys(problems)])
