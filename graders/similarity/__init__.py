"""`grade similarity`: every pair of a batch's hand-ins compared on the code that was graded, for
the course staff (docs/batch.md, "Code similarity").

    code.py      a hand-in's modules as token streams of what the student wrote (ast, never run):
                 names, comments, layout, dead code and independent statement orders normalised,
                 the template's statements left out
    compare.py   winnowed fingerprints in an inverted index, the class's common code discounted,
                 pair scores, shared fragments, groups of three or more
    handins.py   the hand-ins: the batch through its store and the grader's own intake (zips,
                 folders, notebooks alike), the reference, a corpus folder
    report.py    index.html, a side-by-side page per pair shown, similarity.csv and .json
    pages.py     the two pages' templates and the histogram
    cli.py       the command

It runs no student code and writes only into its own folder: nothing of it reaches a student's
feedback, Gradescope or the student bundle, which leaves this package out (graders/bundle.py).
"""
