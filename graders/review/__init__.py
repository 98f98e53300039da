"""The review desk: the written answers of a batch graded by hand in the browser, question by
question, with rubric items shared by every TA (`grade review DIR`).

    index.py      the batch's written answers, read through the batch's store
    database.py   the hand grades: SQLite in the batch folder (DIR/review/review.sqlite)
    desk.py       what a TA does (grade an answer, make or change an item, import a CSV), with the
                  checks that keep two TAs from overwriting each other
    publish.py    the database into the batch through `grade merge`'s path: results.json, the
                  reports, manual.json, the gradebook
    app.py        the web app (Flask) over the desk; templates/ (jinja2) and static/ (plain JS, CSS)
    cli.py        `grade review`: the server (waitress), and the CSV import, export and publishing

It runs no student code and writes only what `grade merge` writes. See docs/batch.md.
"""
