"""Fingerprints, the inverted index, pair scores, shared fragments and clusters.

A hand-in's fingerprints are the winnowed k-grams of its streams (Schleimer, Wilkerson and
Aiken, "Winnowing", SIGMOD 2003): of every WINDOW consecutive k-gram hashes the smallest is
kept, so any shared run of KGRAM + WINDOW - 1 tokens shares at least one fingerprint, while a
hand-in keeps about a fifth of its k-grams. Pairs are scored from an inverted index
{fingerprint: the students holding it}: the work grows with the fingerprints shared by few
students, not with the number of pairs, and a fingerprint held by more than `common` students is
the class's common code and counts for no pair.

A hand-in's own code is its fingerprints less the common ones (the template's code left none).
A pair's share of X is the fraction of X's own fingerprints that Y holds too; its score is the
larger of its two shares, so code inserted into a copy (which lowers the copy's share) leaves the
original's share whole. A hand-in with less own code than a quarter of the class's median is
scored as if it had that quarter (`floor`): a few shared lines in an almost empty hand-in, or in
one written wholly the class's common way, are not a high score.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from itertools import combinations

from graders.similarity.code import HandInCode, Stream

KGRAM = 12  # tokens a fingerprint covers: about one line of code
WINDOW = 8  # any shared run of KGRAM + WINDOW - 1 = 19 tokens (two lines or so) is found
# A fingerprint held by more than this many students, or by more than half of a small class,
# is the class's common code (Moss's default is 10 programs); 5% of a large class, if more.
COMMON_AT_LEAST, COMMON_SHARE = 10, 0.05
FLOOR_SHARE = 0.25  # of the class's median amount of own code
FLAG_AT = 0.5  # a pair at this score or above is marked on the histogram and forms clusters
# A fingerprint that occurs more often than this in one hand-in starts no fragment there.
MAX_STARTS = 8

STUDENT, REFERENCE, CORPUS = "student", "reference", "corpus"


@dataclass
class HandIn:
    """One hand-in as compared: a student's (from the batch), the reference or a corpus entry."""
    id: str
    kind: str  # STUDENT, REFERENCE or CORPUS
    code: HandInCode
    source_kind: str = "folder"  # zip, folder or notebook
    notebook: str | None = None  # the notebook's file name, for a notebook hand-in
    cells: dict[str, list[int | None]] = field(default_factory=dict)  # per module: each line's notebook cell
    kgrams: list[tuple[int, ...]] = field(default_factory=list)  # per stream: the hash at each position
    fingerprints: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # hash -> [(stream, position)]

    def __post_init__(self) -> None:
        for index, stream in enumerate(self.code.streams):
            hashes = tuple(hash(stream.tokens[i:i + KGRAM]) for i in range(len(stream.tokens) - KGRAM + 1))
            self.kgrams.append(hashes)
            for position in _winnow(hashes):
                self.fingerprints.setdefault(hashes[position], []).append((index, position))

    @property
    def streams(self) -> list[Stream]:
        return self.code.streams


def _winnow(hashes: tuple[int, ...]) -> list[int]:
    """The positions winnowing keeps: in each window the rightmost smallest hash, each once."""
    if not hashes:
        return []
    if len(hashes) <= WINDOW:
        return [min(range(len(hashes)), key=lambda i: (hashes[i], -i))]
    chosen: list[int] = []
    for start in range(len(hashes) - WINDOW + 1):
        window = range(start, start + WINDOW)
        best = min(window, key=lambda i: (hashes[i], -i))
        if not chosen or chosen[-1] != best:
            chosen.append(best)
    return chosen


@dataclass(frozen=True)
class Pair:
    a: str
    b: str
    kind: str  # "students", "reference" or "corpus" (b is then the reference or the entry)
    shared: int  # fingerprints both hold, common ones left out
    share_a: float  # of a's fingerprints
    share_b: float

    @property
    def score(self) -> float:
        return max(self.share_a, self.share_b)


@dataclass
class Comparison:
    hand_ins: list[HandIn]
    common: int  # a fingerprint held by more students than this counts for no pair
    floor: int
    flag_at: float
    pairs: list[Pair]  # every pair of students, ranked (score, then ids)
    corpus_pairs: list[Pair]  # each student with the reference and each corpus entry, ranked
    discounted: int  # fingerprints left out as common
    frequency: Counter  # students holding each fingerprint

    def by_id(self) -> dict[str, HandIn]:
        return {hand_in.id: hand_in for hand_in in self.hand_ins}

    def students(self) -> list[HandIn]:
        return [h for h in self.hand_ins if h.kind == STUDENT]

    def flagged(self) -> list[Pair]:
        return [pair for pair in self.pairs if pair.score >= self.flag_at]

    def clusters(self) -> list[list[str]]:
        """Groups of three or more students joined by flagged pairs, largest first."""
        parent: dict[str, str] = {}

        def find(x: str) -> str:
            while parent.setdefault(x, x) != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for pair in self.flagged():
            first, second = find(pair.a), find(pair.b)
            if first != second:
                parent[max(first, second)] = min(first, second)
        groups: dict[str, list[str]] = defaultdict(list)
        for member in sorted(parent):
            groups[find(member)].append(member)
        return sorted((g for g in groups.values() if len(g) >= 3), key=lambda g: (-len(g), g))

    def rare(self, fingerprint: int) -> bool:
        """Not the class's common code. A k-gram winnowing kept in no hand-in (it keeps about a
        fifth of them) is judged with its neighbours, which are fingerprints: taken as rare here."""
        return self.frequency.get(fingerprint, 0) <= self.common


def common_threshold(students: int) -> int:
    return min(max(COMMON_AT_LEAST, math.ceil(COMMON_SHARE * students)), max(2, math.ceil(students / 2)))


def compare(hand_ins: list[HandIn], *, common: int | None = None, flag_at: float = FLAG_AT) -> Comparison:
    students = [h for h in hand_ins if h.kind == STUDENT]
    others = [h for h in hand_ins if h.kind != STUDENT]
    common = common_threshold(len(students)) if common is None else common
    holders: dict[int, list[int]] = defaultdict(list)
    for index, student in enumerate(students):
        for fingerprint in student.fingerprints:
            holders[fingerprint].append(index)
    frequency = Counter({fingerprint: len(held) for fingerprint, held in holders.items()})
    own = {h.id: sum(1 for f in h.fingerprints if frequency.get(f, 0) <= common) for h in hand_ins}
    sizes = [own[s.id] for s in students]
    floor = max(1, round(FLOOR_SHARE * statistics.median(sizes))) if sizes else 1

    shared: Counter = Counter()
    for held in holders.values():
        if 2 <= len(held) <= common:
            shared.update(combinations(held, 2))
    pairs = []
    for first, second in combinations(range(len(students)), 2):
        count = shared.get((first, second), 0)
        pairs.append(_pair(students[first], students[second], "students", count, own, floor))
    corpus_pairs = []
    for other in others:
        counts: Counter = Counter()
        for fingerprint in other.fingerprints:
            held = holders.get(fingerprint, ())
            if len(held) <= common:
                counts.update(held)
        for index, student in enumerate(students):
            corpus_pairs.append(_pair(student, other, other.kind, counts.get(index, 0), own, floor))
    rank = _rank_key
    return Comparison(hand_ins, common, floor, flag_at, sorted(pairs, key=rank), sorted(corpus_pairs, key=rank),
                      sum(1 for held in holders.values() if len(held) > common), frequency)


def _pair(a: HandIn, b: HandIn, kind: str, shared: int, own: dict[str, int], floor: int) -> Pair:
    return Pair(a.id, b.id, kind, shared, _share(shared, own[a.id], floor), _share(shared, own[b.id], floor))


def _share(shared: int, own: int, floor: int) -> float:
    return round(min(1.0, shared / max(own, floor, 1)), 4)


def _rank_key(pair: Pair) -> tuple:
    return (-pair.score, -min(pair.share_a, pair.share_b), -pair.shared, pair.a, pair.b)


# --------------------------------------------------------------------------- one pair in detail

@dataclass(frozen=True)
class Fragment:
    """A run of tokens the two hand-ins share: where it is on each side."""
    a_stream: int
    a_start: int  # first token
    b_stream: int
    b_start: int
    tokens: int


@dataclass
class PairDetail:
    pair: Pair
    # per module of either side: (a's own fingerprints there, those b holds too), and the same of b;
    # own: neither the template's nor the class's common code
    modules: dict[str, dict[str, tuple[int, int]]]
    units: dict[str, dict[str, tuple[int, int]]]  # "model.py:Block" -> {side: (own, shared)}
    fragments: list[Fragment]  # longest first, none overlapping another on either side
    common_lines: dict[str, dict[str, set[int]]]  # side -> module -> lines of the class's common code


def detail(comparison: Comparison, pair: Pair) -> PairDetail:
    hand_ins = comparison.by_id()
    a, b = hand_ins[pair.a], hand_ins[pair.b]
    shared = {h for h in a.fingerprints.keys() & b.fingerprints.keys() if comparison.rare(h)}
    modules: dict[str, dict[str, tuple[int, int]]] = {}
    units: dict[str, dict[str, tuple[int, int]]] = {}
    for side, hand_in in (("a", a), ("b", b)):
        own_by_module: dict[str, set[int]] = defaultdict(set)
        own_by_unit: dict[str, set[int]] = defaultdict(set)
        for fingerprint, places in hand_in.fingerprints.items():
            if not comparison.rare(fingerprint):
                continue
            for stream, _ in places:
                where = hand_in.streams[stream]
                own_by_module[where.module].add(fingerprint)
                own_by_unit[f"{where.module}:{where.unit}"].add(fingerprint)
        for module, own in own_by_module.items():
            modules.setdefault(module, {})[side] = (len(own), len(own & shared))
        for unit, own in own_by_unit.items():
            units.setdefault(unit, {})[side] = (len(own), len(own & shared))
    return PairDetail(pair, dict(sorted(modules.items())), dict(sorted(units.items())), _fragments(comparison, a, b),
                      {"a": _common_lines(comparison, a), "b": _common_lines(comparison, b)})


def _fragments(comparison: Comparison, a: HandIn, b: HandIn) -> list[Fragment]:
    """Maximal runs of equal k-grams (rare ones only), then tiled longest first."""
    places: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for stream, hashes in enumerate(b.kgrams):
        for position, h in enumerate(hashes):
            places[h].append((stream, position))
    rare_in_b = {h for h in places if len(places[h]) <= MAX_STARTS}
    found = []
    for stream, hashes in enumerate(a.kgrams):
        for position, h in enumerate(hashes):
            if h not in rare_in_b or not comparison.rare(h):
                continue
            for other_stream, other_position in places[h]:
                other = b.kgrams[other_stream]
                if position > 0 and other_position > 0 and hashes[position - 1] == other[other_position - 1]:
                    continue  # inside a run that started earlier
                length = 1
                while (position + length < len(hashes) and other_position + length < len(other)
                       and hashes[position + length] == other[other_position + length]):
                    length += 1
                found.append(Fragment(stream, position, other_stream, other_position, length + KGRAM - 1))
    found.sort(key=lambda f: (-f.tokens, f.a_stream, f.a_start, f.b_stream, f.b_start))
    taken_a: dict[int, list[tuple[int, int]]] = defaultdict(list)
    taken_b: dict[int, list[tuple[int, int]]] = defaultdict(list)
    tiles = []
    for fragment in found:
        span_a = (fragment.a_start, fragment.a_start + fragment.tokens)
        span_b = (fragment.b_start, fragment.b_start + fragment.tokens)
        if _overlaps(taken_a[fragment.a_stream], span_a) or _overlaps(taken_b[fragment.b_stream], span_b):
            continue
        taken_a[fragment.a_stream].append(span_a)
        taken_b[fragment.b_stream].append(span_b)
        tiles.append(fragment)
    return tiles


def _overlaps(spans: list[tuple[int, int]], span: tuple[int, int]) -> bool:
    return any(start < span[1] and span[0] < end for start, end in spans)


def _common_lines(comparison: Comparison, hand_in: HandIn) -> dict[str, set[int]]:
    lines: dict[str, set[int]] = defaultdict(set)
    for stream, hashes in enumerate(hand_in.kgrams):
        where = hand_in.streams[stream]
        for position, h in enumerate(hashes):
            if not comparison.rare(h):
                lines[where.module].update(where.lines[position:position + KGRAM])
    return lines
