"""Small inline-SVG drawings for the HTML report: score bars, heatmaps, proportion bars, curves.

The report must open offline and load nothing, so plots are drawn here as SVG markup instead of
with a plotting library. Every value comes from results.json and may be malformed (a student's
attention map can hold NaN, be ragged or the wrong shape): helpers take what they can draw and
never raise on bad numbers. The only text put into the markup is escaped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Sequence

from markupsafe import Markup, escape

from .summary import fraction

NAN_COLOUR = "#c7c7c7"
GOOD, PARTIAL, BAD = "#1a7f37", "#bf8700", "#cf222e"

# Anchor colours of viridis (perceptually uniform, readable when printed in grey) and of a
# white-to-brown ramp for differences, so that a difference map never looks like an attention map.
# report.css draws the same ramps as legends: change both together.
VIRIDIS = ["#440154", "#3b528b", "#21918c", "#5ec962", "#fde725"]
DIFFERENCE = ["#ffffff", "#fdd0a2", "#f16913", "#7f2704"]
PALETTE_STEPS = 64


def _hex_to_rgb(colour: str) -> tuple[int, int, int]:
    return tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))


def _ramp(anchors: Sequence[str], steps: int = PALETTE_STEPS) -> list[str]:
    rgb = [_hex_to_rgb(c) for c in anchors]
    colours = []
    for step in range(steps):
        position = step / (steps - 1) * (len(rgb) - 1)
        i = min(int(position), len(rgb) - 2)
        t = position - i
        mixed = (round(a + (b - a) * t) for a, b in zip(rgb[i], rgb[i + 1]))
        colours.append("#{:02x}{:02x}{:02x}".format(*mixed))
    return colours


VIRIDIS_RAMP = _ramp(VIRIDIS)
DIFFERENCE_RAMP = _ramp(DIFFERENCE)


def as_number(value) -> float:
    """A float, or NaN for anything that is not a number (including booleans)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def finite(values) -> list[float]:
    return [v for v in values if math.isfinite(v)]


def format_number(value: float) -> str:
    if not math.isfinite(value):
        return str(value)
    return f"{value:.4g}"


# --------------------------------------------------------------------------- score bar


def fraction_colour(share: float) -> str:
    if share >= 0.999:
        return GOOD
    return PARTIAL if share > 0 else BAD


def score_bar(score, max_score, label: str) -> Markup:
    """A filled share of a track; a part worth no points gets the bare track, neither good nor bad."""
    fill = ""
    if as_number(max_score) > 0:
        share = fraction(score, max_score)
        fill = f'<rect width="{share * 100:.2f}" height="10" rx="2" fill="{fraction_colour(share)}"/>'
    return Markup(
        '<svg class="score-bar" viewBox="0 0 100 10" preserveAspectRatio="none" role="img" '
        f'aria-label="{escape(label)}"><rect width="100" height="10" rx="2" fill="#e5e7eb"/>{fill}</svg>'
    )


# --------------------------------------------------------------------------- heatmaps


def to_matrix(value) -> list[list[float]] | None:
    """A rectangular matrix of floats (NaN where a cell is not a number), or None."""
    if not isinstance(value, list) or not value or not all(isinstance(r, list) for r in value):
        return None
    width = len(value[0])
    if width == 0 or any(len(row) != width for row in value):
        return None
    return [[as_number(v) for v in row] for row in value]


def crop(matrix: list[list[float]], side: int) -> list[list[float]]:
    return [row[:side] for row in matrix[:side]]


def matrix_range(*matrices: list[list[float]]) -> tuple[float, float]:
    values = finite(v for m in matrices for row in m for v in row)
    if not values:
        return 0.0, 1.0
    low, high = min(min(values), 0.0), max(values)
    return low, high if high > low else low + 1.0


def abs_difference(a: list[list[float]], b: list[list[float]]) -> list[list[float]]:
    return [[abs(x - y) for x, y in zip(ra, rb)] for ra, rb in zip(a, b)]


def argmax_cell(matrix: list[list[float]]) -> tuple[int, int] | None:
    best, where = -math.inf, None
    for i, row in enumerate(matrix):
        for j, v in enumerate(row):
            if math.isfinite(v) and v > best:
                best, where = v, (i, j)
    return where if best > 0 else None


def _colour(value: float, low: float, high: float, ramp: list[str]) -> str:
    if not math.isfinite(value):
        return NAN_COLOUR
    t = min(max((value - low) / (high - low), 0.0), 1.0)
    return ramp[int(t * (len(ramp) - 1) + 0.5)]


def _runs_by_colour(matrix, low: float, high: float, ramp: list[str]) -> dict[str, list[str]]:
    """Path commands per colour, one per run of equal colour along a row."""
    runs: dict[str, list[str]] = {}
    for i, row in enumerate(matrix):
        colours = [_colour(v, low, high, ramp) for v in row]
        start = 0
        for j in range(1, len(colours) + 1):
            if j == len(colours) or colours[j] != colours[start]:
                runs.setdefault(colours[start], []).append(f"M{start} {i}h{j - start}v1h-{j - start}z")
                start = j
    return runs


def heatmap(matrix, low: float, high: float, label: str, *, ramp=VIRIDIS_RAMP, mark=None) -> Markup:
    """Cells in a viewBox of cell units: the page scales it, and there is no text to resize.

    One path per colour rather than one rect per cell keeps a 32x32 map a few kilobytes.
    """
    rows, cols = len(matrix), len(matrix[0])
    cells = [
        f'<path fill="{colour}" d="{"".join(commands)}"/>'
        for colour, commands in _runs_by_colour(matrix, low, high, ramp).items()
    ]
    if mark is not None:
        i, j = mark
        cells.append(
            f'<rect x="{j}" y="{i}" width="1" height="1" fill="none" stroke="#e11d48" '
            'stroke-width="2" vector-effect="non-scaling-stroke"/>'
        )
    return Markup(
        f'<svg class="heatmap" viewBox="0 0 {cols} {rows}" shape-rendering="crispEdges" '
        f'role="img" aria-label="{escape(label)}">{"".join(cells)}</svg>'
    )


# --------------------------------------------------------------------------- proportions


def nice_step(span: float, count: int) -> float:
    raw = span / max(count, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    for multiple in (1, 2, 2.5, 5, 10):
        if raw <= multiple * magnitude:
            return multiple * magnitude
    return 10 * magnitude


def axis_end(largest: float) -> float:
    """A round right end for a 0-based axis, with room past the largest value.

    Rates never exceed 1, so an axis that would pass 1 for a rate stops at 1.
    """
    if not math.isfinite(largest) or largest <= 0:
        return 1.0
    step = nice_step(largest * 1.1, 4)
    end = math.ceil(largest * 1.1 / step) * step
    return 1.0 if largest <= 1.0 < end else end


def proportion_track(value: float, target: float, low: float, high: float, end: float) -> Markup:
    """The measured rate as a bar, the acceptance interval as a band, the target as a line."""

    def x(v: float) -> float:
        return min(max(v / end * 100, 0.0), 100.0)

    inside = math.isfinite(value) and low <= value <= high
    parts = ['<rect width="100" height="14" fill="#eef0f3"/>']
    if math.isfinite(low) and math.isfinite(high):
        parts.append(
            f'<rect x="{x(low):.2f}" width="{max(x(high) - x(low), 0.4):.2f}" height="14" '
            'fill="#a7e3b5"/>'
        )
    if math.isfinite(value):
        # A sliver even at 0, so that a rate of zero still shows as a (red) bar.
        parts.append(
            f'<rect y="4" width="{max(x(value), 0.6):.2f}" height="6" fill="{GOOD if inside else BAD}"/>'
        )
    if math.isfinite(target):
        parts.append(
            f'<line x1="{x(target):.2f}" x2="{x(target):.2f}" y1="0" y2="14" stroke="#111" '
            'stroke-width="2" vector-effect="non-scaling-stroke"/>'
        )
    return Markup(
        '<svg class="track" viewBox="0 0 100 14" preserveAspectRatio="none" aria-hidden="true">'
        + "".join(parts)
        + "</svg>"
    )


# --------------------------------------------------------------------------- line charts


@dataclass(frozen=True)
class Series:
    name: str
    values: list[float]
    colour: str
    dashed: bool = False


CHART_W, CHART_H = 360, 200
LEFT, RIGHT, TOP, BOTTOM = 48, 12, 10, 34


def ticks(low: float, high: float, count: int = 4) -> list[float]:
    step = nice_step(high - low, count)
    first = math.ceil(low / step - 1e-9) * step
    values, v = [], first
    while v <= high + step * 1e-9:
        values.append(round(v, 10))
        v += step
    return values


def padded_range(values: list[float]) -> tuple[float, float]:
    low, high = min(values), max(values)
    if high - low < 1e-12:
        pad = abs(low) * 0.1 or 1.0
        return low - pad, high + pad
    return low, high


def _segments(points: list[tuple[float, float]]) -> list[list[tuple[float, float]]]:
    """Split a series where a value is not finite, so a NaN epoch shows as a gap."""
    runs, run = [], []
    for x, y in points:
        if math.isfinite(x) and math.isfinite(y):
            run.append((x, y))
        elif run:
            runs.append(run)
            run = []
    if run:
        runs.append(run)
    return runs


def line_chart(xs: list[float], series: list[Series], y_range: tuple[float, float], label: str) -> Markup:
    x_low, x_high = padded_range(finite(xs) or [0.0])
    y_low, y_high = y_range
    plot_w, plot_h = CHART_W - LEFT - RIGHT, CHART_H - TOP - BOTTOM

    def px(v: float) -> float:
        return LEFT + (v - x_low) / (x_high - x_low) * plot_w

    def py(v: float) -> float:
        return TOP + (1 - (v - y_low) / (y_high - y_low)) * plot_h

    parts = []
    for t in ticks(y_low, y_high):
        parts.append(
            f'<line x1="{LEFT}" x2="{CHART_W - RIGHT}" y1="{py(t):.1f}" y2="{py(t):.1f}" '
            'stroke="#e5e7eb"/>'
            f'<text x="{LEFT - 6}" y="{py(t) + 4:.1f}" text-anchor="end">{format_number(t)}</text>'
        )
    for t in _x_ticks(xs, x_low, x_high):
        parts.append(
            f'<text x="{px(t):.1f}" y="{CHART_H - BOTTOM + 16}" text-anchor="middle">'
            f"{format_number(t)}</text>"
        )
    parts.append(
        f'<text x="{LEFT + plot_w / 2:.1f}" y="{CHART_H - 4}" text-anchor="middle">epoch</text>'
        f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#9ca3af"/>'
    )
    for s in series:
        parts.extend(_draw_series(s, xs, px, py))
    return Markup(
        f'<svg class="chart" viewBox="0 0 {CHART_W} {CHART_H}" role="img" '
        f'aria-label="{escape(label)}">{"".join(parts)}</svg>'
    )


def _x_ticks(xs: list[float], low: float, high: float) -> list[float]:
    whole = finite(xs)
    if len(whole) <= 12:
        return whole
    return [t for t in ticks(low, high, 6) if low <= t <= high]


def _draw_series(s: Series, xs: list[float], px, py) -> list[str]:
    dash = ' stroke-dasharray="6 4"' if s.dashed else ""
    drawn = []
    for run in _segments(list(zip(xs, s.values))):
        points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in run)
        drawn.append(
            f'<polyline points="{points}" fill="none" stroke="{s.colour}" stroke-width="2"{dash}/>'
        )
        if len(xs) <= 40:
            drawn.extend(
                f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5" fill="{s.colour}"/>' for x, y in run
            )
    return drawn
