"""The batch dashboard's histogram: labelled at the bin edges, under the edges, without overlaps;
and its tables scroll inside their own box (tests/test_reports_browser.py measures both in Chromium)."""

import re

import pytest

from graders.batch.gradebook import AXIS_CHAR_PX, BINS, histogram_svg


def _rects(svg):
    return [(float(x), float(w)) for x, w in re.findall(r'<rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)"', svg)]


def _axis_labels(svg):
    return [(float(x), text) for x, text in re.findall(r'<text x="([\d.]+)" y="[\d.]+" text-anchor="middle" '
                                                       r'class="axis">([^<]*)</text>', svg)]


@pytest.mark.parametrize("top", [8.0, 45.0, 3.3, 100.0, 123.456, 1000.0])
def test_axis_labels_sit_on_bin_edges_and_do_not_overlap(top):
    svg = histogram_svg([0.0, top / 2, top], top)
    rects, labels = _rects(svg), _axis_labels(svg)
    assert len(rects) == BINS
    bar = rects[1][0] - rects[0][0]
    edges = [rects[0][0] - 2 + i * bar for i in range(BINS + 1)]  # a bar is inset 2 units in its bin
    for x, text in labels:
        index = min(range(BINS + 1), key=lambda i: abs(edges[i] - x))
        assert x == pytest.approx(edges[index]), f"label {text} is not under a bin edge"
        assert float(text) == pytest.approx(top * index / BINS, abs=0.006), f"label {text} is not edge {index}'s value"
    assert labels[0][1] == "0" and float(labels[-1][1]) == pytest.approx(top, abs=0.006)
    for (x1, t1), (x2, t2) in zip(labels, labels[1:]):
        assert x2 - x1 >= (len(t1) + len(t2)) / 2 * AXIS_CHAR_PX, f"labels {t1} and {t2} overlap"


def test_every_edge_is_labelled_when_there_is_room():
    assert [text for _, text in _axis_labels(histogram_svg([1.0], 45.0))] == \
           ["0", "4.5", "9", "13.5", "18", "22.5", "27", "31.5", "36", "40.5", "45"]


def test_bars_count_each_tenth_and_the_maximum_falls_in_the_last():
    svg = histogram_svg([0.0, 0.5, 7.9, 8.0], 8.0)
    counts = re.findall(r"<title>(\d+) with ([\d.]+)–([\d.]+)</title>", svg)
    assert counts[0] == ("2", "0", "0.8") and counts[-1] == ("2", "7.2", "8")
    assert "total points" in svg  # the axis says what it counts


def test_summary_tables_scroll_in_their_own_box(tmp_path):
    from test_html_pages import hostile_batch

    html = hostile_batch(tmp_path / "batch").read_text(encoding="utf-8")
    assert html.count("<table") == html.count('<div class="table-scroll"><table') > 0
    assert ".table-scroll{max-width:100%;overflow-x:auto}" in html
