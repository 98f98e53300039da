"""The similarity report's two pages (jinja2, self-contained: inline CSS and SVG, no script, nothing
loaded) and its histogram. Every string from a hand-in (its code, its id) is escaped."""

from __future__ import annotations

import math

from jinja2 import DictLoader, Environment, StrictUndefined
from markupsafe import Markup, escape

from graders.reports.html import CSP_META, visible_text

_STYLE = """
body{font:15px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:1em;color:#222;overflow-wrap:anywhere}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;width:100%;font-size:.92em}th,td{text-align:left;padding:.25em .5em;border-bottom:1px solid #eee;vertical-align:top}
th,td.n{white-space:nowrap}td.n{text-align:right;font-variant-numeric:tabular-nums}.table-scroll{max-width:100%;overflow-x:auto}
table.wide{min-width:44em}a{color:#2a5db0}code{font-size:.9em}
.about{border-left:4px solid #2a5db0;background:#f4f6f8;padding:.5em 1em}
.kpi{display:flex;flex-wrap:wrap;gap:1em}.kpi div{background:#f4f6f8;padding:.5em 1em;border-radius:6px}.kpi b{display:block;font-size:1.4em}
svg{max-width:100%;height:auto}.histogram{display:block;width:100%;max-width:640px}svg text{font-size:12px}
.bar{fill:#4a78b5}.threshold{stroke:#c33;stroke-width:2;stroke-dasharray:5 3}.threshold-label{fill:#c33}
svg .axis,svg .axis-title{fill:#555}svg .axis-line{stroke:#888}
.flag{color:#b3261e;font-weight:600;white-space:nowrap}td.pair{min-width:11em}.kind{font-size:.8em;background:#eef;border-radius:4px;padding:0 .3em}
.legend span{display:inline-block;padding:0 .4em;margin-right:.6em;border-radius:3px}
.code-pair{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:.75em}
@media (max-width:760px){.code-pair{grid-template-columns:minmax(0,1fr)}}
.code{overflow-x:auto;border:1px solid #ddd;border-radius:4px;background:#fff}
.code h3{font-size:.95em;margin:0;padding:.3em .6em;background:#f4f6f8;border-bottom:1px solid #ddd}
.code table{font:12.5px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace;width:auto;min-width:100%}
.code td{border:0;padding:0 .5em;white-space:pre}.code td.ln{color:#888;text-align:right;user-select:none}
.code td.cell{color:#888;font-size:.85em}
tr.shared td.src{background:#fff2a8}tr.shared.f1 td.src{background:#ffe0b2}tr.shared.f2 td.src{background:#c8f7c5}
tr.shared.f3 td.src{background:#d6e4ff}tr.shared.f4 td.src{background:#f5d0f7}tr.shared.f5 td.src{background:#ffd6d6}
tr.given td.src{color:#999;background:#f6f6f6}tr.common td.src{background:#e8f4fb}
tr:target td{outline:2px solid #b3261e}
"""

_BASE = """<!doctype html>
<html lang="en"><head>{{ csp_meta }}<meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{% block title %}{% endblock %}</title><style>{{ style }}</style></head><body>
{% block body %}{% endblock %}
</body></html>
"""

_INDEX = """{% extends "base" %}
{% block title %}Code similarity: {{ v.students }} hand-ins of {{ v.title }}{% endblock %}
{% block body %}
<h1>Code similarity: {{ v.title }}</h1>
<p class="about" role="note"><strong>For the course staff.</strong> {{ v.words }}</p>
<div class="kpi">
<div><b>{{ v.students }}</b>hand-ins compared</div><div><b>{{ v.pairs }}</b>pairs of hand-ins</div>
<div><b>{{ v.flagged }}</b>pairs at {{ (v.method.flag_at * 100)|round|int }}% or more</div>
<div><b>{{ v.clusters|length }}</b>groups of three or more</div>
<div><b>{{ v.not_compared|length }}</b>not compared</div>
</div>
<h2>How the pairs are scored</h2>
<p>Only what the students wrote counts: the template's code (signatures, docstrings, provided helpers, files
handed in unchanged) is left out, and so is code found in more than <strong id="common-threshold">{{ v.method.common_threshold }}
of the {{ v.method.students }} hand-ins</strong>: the class's common code ({{ v.method.discounted_fingerprints }}
fingerprints were discounted so). Names, comments, docstrings, whitespace, the order of functions and of independent
statements, and dead code do not change a score. A hand-in's <em>share</em> is the part of its own code (its code less
the template's and the class's common code) that is found in the other hand-in too; a pair's <em>score</em> is the
larger of its two shares (a hand-in with less own code than {{ v.method.floor_fingerprints }} fingerprints, a quarter
of the class's median, is scored as if it had that much).
Pairs at {{ (v.method.flag_at * 100)|round|int }}% or more are marked, and groups of three or more are formed from them.
Per module, the shares are over that module's code. A notebook and a folder are read the same way, through the grader's
own intake{% if v.notebooks %} (notebooks here: {{ v.notebooks|join(", ") }}){% endif %}.</p>
<h2>All pair scores</h2>
{{ v.histogram }}
<h2>Pairs, highest score first</h2>
<div class="table-scroll"><table class="wide"><tr><th>#</th><th>pair</th><th>score</th><th>share of each</th><th>per module (first / second)</th><th>longest shared fragment</th></tr>
{% for r in v.rows %}<tr><td class="n">{{ r.rank }}</td>
<td class="pair"><a href="{{ r.page }}">{{ r.a }} &amp; {{ r.b }}</a>{% if r.flagged %} <span class="flag">look at this</span>{% endif %}</td>
<td class="n">{{ r.score_text }}</td><td class="n">{{ r.share_a_text }} / {{ r.share_b_text }}</td>
<td>{% for module, sides in r.modules.items() if sides.a.own or sides.b.own %}<code>{{ module }}</code> {{ sides.a|share }} / {{ sides.b|share }}<br>{% endfor %}</td>
<td>{{ r.longest_text }}</td></tr>
{% else %}<tr><td colspan="6">no two hand-ins share code beyond the class's common code</td></tr>{% endfor %}</table></div>
<p>Every pair, also those not listed here, is in <a href="{{ v.files[0] }}">{{ v.files[0] }}</a> and <a href="{{ v.files[1] }}">{{ v.files[1] }}</a>.</p>
<h2>Groups of three or more</h2>
{% for c in v.clusters %}<p>{{ c.members|join(", ") }}: {{ c.flagged_pairs }} marked pairs, scores {{ (c.lowest_score * 100)|round|int }}%–{{ (c.highest_score * 100)|round|int }}%</p>
{% else %}<p>none</p>{% endfor %}
<h2>The reference solution and the corpus</h2>
{% if v.others %}<p>Compared with {{ v.others|map(attribute="id")|join(", ") }}.</p>
{% for s in v.corpus_sentences %}<p><a href="{{ s.page }}">{{ s.a }}</a> {{ s.text }}</p>{% else %}<p>No hand-in shares {{ (v.method.flag_at * 100)|round|int }}% of a module with them.</p>{% endfor %}
<div class="table-scroll"><table class="wide"><tr><th>#</th><th>hand-in</th><th>compared with</th><th>score</th><th>share of each</th><th>per module (hand-in / other)</th></tr>
{% for r in v.corpus_rows %}<tr><td class="n">{{ r.rank }}</td><td class="pair"><a href="{{ r.page }}">{{ r.a }}</a></td><td>{{ r.b }} <span class="kind">{{ r.kind }}</span></td>
<td class="n">{{ r.score_text }}</td><td class="n">{{ r.share_a_text }} / {{ r.share_b_text }}</td>
<td>{% for module, sides in r.modules.items() if sides.a.own or sides.b.own %}<code>{{ module }}</code> {{ sides.a|share }} / {{ sides.b|share }}<br>{% endfor %}</td></tr>{% endfor %}</table></div>
{% else %}<p>Not asked for: <code>--reference</code> adds the reference solution, <code>--corpus FOLDER</code> earlier years or public solutions.</p>{% endif %}
<h2>Not compared</h2>
<div class="table-scroll"><table><tr><th>hand-in</th><th>why</th></tr>
{% for n in v.not_compared %}<tr><td>{{ n.id }}</td><td>{{ n.reason }}</td></tr>{% else %}<tr><td colspan="2">none</td></tr>{% endfor %}</table></div>
<h2>What this does not catch</h2>
<ul>{% for limit in v.limits %}<li>{{ limit }}</li>{% endfor %}</ul>
{% endblock %}
"""

_PAIR = """{% extends "base" %}
{% block title %}{{ v.pair.a }} & {{ v.pair.b }}: shared code{% endblock %}
{% block body %}
<p><a href="../index.html">All pairs</a></p>
<h1>{{ v.pair.a }} &amp; {{ v.pair.b }}</h1>
<p class="about" role="note"><strong>For the course staff.</strong> {{ v.words }}</p>
<div class="kpi"><div><b id="score">{{ v.pair.score_text }}</b>score</div>
<div><b>{{ v.pair.share_a_text }}</b>of {{ v.pair.a }}'s own code is shared</div>
<div><b>{{ v.pair.share_b_text }}</b>of {{ v.pair.b }}'s own code is shared</div>
<div><b>{{ v.fragments|length }}</b>shared fragments</div></div>
<h2>Per module and per function or class</h2>
<div class="table-scroll"><table><tr><th>where</th><th>{{ v.pair.a }}: shared / own fingerprints</th><th>{{ v.pair.b }}: shared / own fingerprints</th></tr>
{% for module, sides in v.pair.modules.items() %}<tr><td><strong><code>{{ module }}</code></strong></td>
{% for side in (sides.a, sides.b) %}<td class="n">{% if side.own %}{{ side.shared }} / {{ side.own }} ({{ (side.share * 100)|round|int }}%){% else %}–{% endif %}</td>{% endfor %}</tr>
{% for unit, parts in v.pair.units.items() if unit.startswith(module + ":") %}<tr><td>&nbsp;&nbsp;<code>{{ unit.partition(":")[2] }}</code></td>
{% for side in (parts.a, parts.b) %}<td class="n">{% if side.own %}{{ side.shared }} / {{ side.own }}{% else %}–{% endif %}</td>{% endfor %}</tr>{% endfor %}{% endfor %}
</table></div>
<h2>Shared fragments, longest first</h2>
<div class="table-scroll"><table><tr><th>#</th><th>tokens</th><th>{{ v.pair.a }}</th><th>{{ v.pair.b }}</th></tr>
{% for f in v.fragments %}<tr><td class="n">{{ f.number }}</td><td class="n">{{ f.tokens }}</td>
<td><a href="#a-f{{ f.number }}">{{ f.a }}</a></td><td><a href="#b-f{{ f.number }}">{{ f.b }}</a></td></tr>{% endfor %}</table></div>
<h2>Side by side</h2>
<p class="legend"><span style="background:#fff2a8">shared fragment</span><span style="background:#e8f4fb">common to the class (more than {{ v.common }} hand-ins; not counted)</span><span style="background:#f6f6f6;color:#999">given by the template (not counted)</span>
The number beside a shared line leads to the same fragment on the other side.</p>
{% for column in v.columns %}<div class="code-pair">
{% for s in column.sides %}<div class="code" id="{{ s.side }}-{{ column.module }}"><h3>{{ s.id }}: {{ column.module }}{% if s.notebook %} (from {{ s.notebook }}){% endif %}</h3>
{% if s.missing %}<p>not handed in</p>{% else %}<table>{{ s.rows }}</table>{% endif %}</div>
{% endfor %}</div>
{% endfor %}
{% endblock %}
"""

def _share(side: dict) -> str:
    return f"{round(side['share'] * 100)}%" if side["own"] else "–"


_environment = Environment(loader=DictLoader({"base": _BASE, "index": _INDEX, "pair": _PAIR}), autoescape=True,
                           undefined=StrictUndefined, keep_trailing_newline=True, finalize=visible_text,
                           trim_blocks=True, lstrip_blocks=True)
_environment.filters["share"] = _share


def code_rows(side: str, module: str, lines: list[dict], notebook: bool) -> Markup:
    """The rows of one side's file: line number, notebook cell, the fragment's link to the other
    side, the code. Built here rather than in the template: a pair page holds thousands of them."""
    other = "b" if side == "a" else "a"
    rows = []
    for line in lines:
        fragment = line["fragment"]
        kind = line["kind"] + (f" f{fragment % 6}" if fragment else "")
        anchor = f' id="{line["anchor"]}"' if line["anchor"] else ""
        cell_label = f"cell {line['cell']}" if line["cell"] else ""
        cell = f'<td class="cell">{cell_label}</td>' if notebook else ""
        link = (f'<a href="#{other}-f{fragment}" title="the same fragment on the other side">{fragment}</a>'
                if fragment else "")
        rows.append(f'<tr{anchor} class="{kind}"><td class="ln" id="{side}-{escape(module)}-L{line["number"]}">'
                    f'{line["number"]}</td>{cell}<td class="ln">{link}</td>'
                    f'<td class="src">{escape(visible_text(line["text"]))}</td></tr>')
    return Markup("\n".join(rows))


def index_page(view: dict) -> str:
    return _environment.get_template("index").render(v=view, csp_meta=CSP_META, style=Markup(_STYLE))


def pair_page(view: dict) -> str:
    return _environment.get_template("pair").render(v=view, csp_meta=CSP_META, style=Markup(_STYLE))


# Histogram geometry, in SVG units.
_WIDTH, _HEIGHT, _LEFT, _TOP = 560, 180, 40, 22


def histogram_svg(counts: list[int], flag_at: float) -> Markup:
    """One bar per bin of pair scores, 0% to 100%, on a log scale (most pairs of a class share
    almost nothing, a few share much), with the line at which pairs are marked."""
    bins = len(counts)
    tallest = math.log10(1 + max(counts or [0])) or 1.0
    bar = _WIDTH / bins
    axis_y = _TOP + _HEIGHT
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_WIDTH + _LEFT + 20} {axis_y + 42}" class="histogram" '
             f'role="img" aria-label="histogram of all pair scores, marked at {round(flag_at * 100)}%">']
    for index, count in enumerate(counts):
        height = round(_HEIGHT * math.log10(1 + count) / tallest)
        x = _LEFT + index * bar
        low, high = round(100 * index / bins), round(100 * (index + 1) / bins)
        parts.append(f'<rect x="{x + 1:g}" y="{axis_y - height}" width="{bar - 2:g}" height="{height}" class="bar">'
                     f'<title>{count} pairs scored {low}–{high}%</title></rect>')
        if count:
            parts.append(f'<text x="{x + bar / 2:g}" y="{axis_y - height - 3}" text-anchor="middle" class="count">{count}</text>')
    parts.append(f'<line x1="{_LEFT}" y1="{axis_y}" x2="{_LEFT + _WIDTH}" y2="{axis_y}" class="axis-line"/>')
    for percent in range(0, 101, 10):
        x = _LEFT + _WIDTH * percent / 100
        parts.append(f'<line x1="{x:g}" y1="{axis_y}" x2="{x:g}" y2="{axis_y + 4}" class="axis-line"/>')
        parts.append(f'<text x="{x:g}" y="{axis_y + 16}" text-anchor="middle" class="axis">{percent}%</text>')
    marker = _LEFT + _WIDTH * flag_at
    parts.append(f'<line x1="{marker:g}" y1="{_TOP - 12}" x2="{marker:g}" y2="{axis_y}" class="threshold"/>')
    parts.append(f'<text x="{marker + 4:g}" y="{_TOP - 2}" class="threshold-label">marked from {round(flag_at * 100)}%</text>')
    parts.append(f'<text x="{_LEFT + _WIDTH / 2:g}" y="{axis_y + 36}" text-anchor="middle" class="axis-title">'
                 'pair score (bars: number of pairs, on a log scale)</text>')
    parts.append("</svg>")
    return Markup("".join(parts))
