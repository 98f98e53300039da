"""A compact terminal summary: one table per part, then the total.

rich decides on colour: a Console on a terminal gets it, one writing to a pipe or a file gets
plain text. Student text is passed as `Text`, never as a markup string, so that "[bold]" in a
message stays literal, and it is flattened by `one_line`, so that escape codes in it never
reach the terminal.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from graders.integrity import flag_summary

from .summary import (
    STATUS_LABELS,
    check_summary_line,
    format_points,
    headline,
    is_rejected,
    isolation_warning,
    ungraded_title,
    one_line,
    points_text,
    rejection_reason,
    provisional_note,
    score_label,
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
LINE_LIMIT = 160


def print_summary(results: dict, console: Console | None = None) -> None:
    console = console or Console()
    warning = isolation_warning(results)
    if warning:
        console.print(Text(warning, style="bold red"))
    if is_rejected(results):
        console.print(Text(f"{ungraded_title(results)}: {one_line(rejection_reason(results), 500)}", style="bold red"))
        console.print(Text(f"{score_label(results)}: 0 / {format_points(results.get('max_score'))}"))
        return
    for part in results.get("parts") or []:
        console.print(_part_table(part))
    console.print(
        Text.assemble(
            (f"{score_label(results)}: {points_text(results.get('score'), results.get('max_score'))}", "bold"),
            "  ",
            headline(results),
        )
    )
    provisional = provisional_note(results)
    if provisional:
        console.print(Text(f"Provisional: {provisional}", style="yellow"))
    if warning:
        console.print(Text(warning, style="bold red"))
    count, kinds = flag_summary(results)
    if count:
        console.print(Text(f"{count} integrity flag{'s' if count != 1 else ''} for review ({one_line(', '.join(kinds), 200)}): "
                           "listed in the HTML report; no points depend on them", style="yellow"))


def _part_table(part: dict) -> Table:
    points = points_text(part.get("score"), part.get("max_score"))
    title = f"{one_line(part.get('title') or part.get('id'), 120)} — {points}"
    if part.get("provisional"):
        title += " (provisional)"
    # Status and points keep their width; titles and diagnoses are cut with an ellipsis, so
    # that each check stays one line on an 80-column terminal.
    table = Table(title=Text(title), title_justify="left", expand=True, show_edge=False, pad_edge=False)
    table.add_column("check", overflow="ellipsis", no_wrap=True, ratio=2, min_width=14)
    table.add_column("status", no_wrap=True)
    table.add_column("points", justify="right", no_wrap=True)
    table.add_column("diagnosis", overflow="ellipsis", no_wrap=True, ratio=3, min_width=20)
    for check in part.get("checks") or []:
        status = check.get("status") if check.get("status") in STATUS_LABELS else "error"
        table.add_row(
            Text(one_line(check.get("title") or check.get("id"), 80)),
            Text(SHORT_LABELS[status], style=STATUS_STYLES[status]),
            Text(points_text(check.get("score"), check.get("max_score"))),
            Text("" if status == "passed" else one_line(check_summary_line(check), LINE_LIMIT)),
        )
    return table
