"""The rubric (points per part, weights per check, from the assignment's manifest) and the
arithmetic of scores."""

from dataclasses import dataclass, field


@dataclass
class Part:
    id: str
    title: str
    module: str
    points: float
    weights: dict = field(default_factory=dict)
    own_worker: bool = False  # graded in a worker of its own, beside the other parts (a long part)
    # Grader-side modules its tasks import in the worker (seconds): a self-check gives the part a
    # worker of its own, started ahead with them imported, beside the other parts.
    preload: tuple = ()

    def check_points(self, check_ids):
        """{check id: max score}: the part's points shared by weight."""
        weights = {cid: float(self.weights.get(cid, 1.0)) for cid in check_ids}
        total = sum(weights.values())
        if total == 0:
            return {cid: 0.0 for cid in check_ids}
        return {cid: round(self.points * w / total, 4) for cid, w in weights.items()}


@dataclass
class Rubric:
    seed: int
    parts: list
    sha256: str

    def part(self, part_id):
        return next(p for p in self.parts if p.id == part_id)

    def points(self, only_parts=None):
        """The points of the given parts (all when None): what a grade of them is out of."""
        return sum(p.points for p in self.parts if not only_parts or p.id in only_parts)


def preload_of(parts):
    """What the worker of `parts` imports ahead (`preload` in the rubric), in a stable order."""
    return tuple(sorted({name for part in parts for name in part.preload}))


def part_score(part, check_results, every_check=()):
    """The part's points times the weighted share of credit its checks earned (computed from the
    weights, not from rounded per-check points, so a full part is exactly its points). The share
    is of every check of the part (`every_check`, when all that ran are among them): a self-check
    runs the public ones only, and they earn what they are worth in the instructor's grade."""
    ran = [r.check.id for r in check_results]
    weights = [float(part.weights.get(cid, 1.0)) for cid in ran]
    if not weights or sum(weights) == 0:
        return 0.0
    shared = every_check if set(ran) <= set(every_check) else ran
    total = sum(float(part.weights.get(cid, 1.0)) for cid in shared)
    earned = sum(w * r.fraction for w, r in zip(weights, check_results))
    return round(part.points * earned / total, 4)


# Statuses that keep `grade check` (and pytest) from succeeding. Written answers wait for a
# person (pending_manual); everything else that did not pass is something to fix.
NOT_PASSING = ("failed", "error", "skipped")


# ---------------------------------------------------------------------------- rubric queries


def public_checks(assignment, parts=None):
    """[(part id, Check)] of every public check, in rubric order, of the given parts (or all) of
    the assignment."""
    from graders.checks.framework import HIDDEN

    registry = assignment.registry()
    chosen = []
    for part in assignment.rubric.parts:
        if parts and part.id not in parts:
            continue
        chosen += [(part.id, c) for c in registry.get(part.id, []) if c.visibility != HIDDEN]
    return chosen


def part_ids(rubric):
    return [part.id for part in rubric.parts]


def part_modules(rubric):
    """{part id: the module file its checks exercise} (a module's name gets ".py"; a questions
    file keeps its own)."""
    return {p.id: p.module if "." in p.module else f"{p.module}.py" for p in rubric.parts}


def totals(parts, count_provisional=False):
    """score and max_score over the parts. A provisional part (smoke-mode fine-tuning) may still
    change, so its points stay out of the totals, where a TA would import them into a gradebook,
    unless the instructor asks for them; `provisional` says how many there are either way."""
    counted = [p for p in parts if count_provisional or not p.get("provisional")]
    provisional = [p for p in parts if p.get("provisional")]
    section = {"score": round(sum(p["score"] for p in counted), 4),
               "max_score": round(sum(p["max_score"] for p in counted), 4)}
    if provisional:
        section["provisional"] = {"parts": [p["id"] for p in provisional],
                                  "score": round(sum(p["score"] for p in provisional), 4),
                                  "max_score": round(sum(p["max_score"] for p in provisional), 4),
                                  "counted": count_provisional}
    return section
