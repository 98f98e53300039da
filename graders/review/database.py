"""The desk's database: SQLite in the batch folder, DIR/review/review.sqlite.

    items    a question's rubric items: points (up or down) and a text, made while grading and
             shared by every TA; `version` grows with each change, a deleted item stays (marked)
    grades   one row per (student, question) the desk has touched: the hash of the answer it is
             for, a point adjustment (or none), a free comment, and `revision`, which grows with
             each change and is what a page's edit must name: an edit based on another
             revision than the row's is refused with the row as it is now (never overwritten)
    applied  which items a grade holds

A grade counts once it holds an item or an adjustment, and only for the answer it was given to:
a regrade that changes the answer leaves it ungraded. Its score is the sum of its items' points
and the adjustment, clamped to [0, the question's points].

Every change is one transaction (`BEGIN IMMEDIATE`: a writer waits for the other, never fails
half-way), in WAL mode (readers never wait for a writer) with `synchronous=FULL` (a committed
action survives a power cut). Several processes may open the database at once.
"""

from __future__ import annotations

import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path

from graders.batch import store

DATABASE = "review.sqlite"
SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 10_000

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS items (
    id INTEGER PRIMARY KEY,
    check_id TEXT NOT NULL,
    points REAL NOT NULL,
    text TEXT NOT NULL,
    version INTEGER NOT NULL DEFAULT 1,
    deleted INTEGER NOT NULL DEFAULT 0,
    created_by TEXT NOT NULL,
    updated_by TEXT NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS items_of_question ON items (check_id, deleted, id);
CREATE TABLE IF NOT EXISTS grades (
    student_id TEXT NOT NULL,
    check_id TEXT NOT NULL,
    answer_sha256 TEXT NOT NULL,
    adjustment REAL,
    comment TEXT NOT NULL DEFAULT '',
    revision INTEGER NOT NULL,
    updated_by TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (student_id, check_id)
);
CREATE INDEX IF NOT EXISTS grades_of_question ON grades (check_id);
CREATE TABLE IF NOT EXISTS applied (
    student_id TEXT NOT NULL,
    check_id TEXT NOT NULL,
    item_id INTEGER NOT NULL REFERENCES items (id),
    PRIMARY KEY (student_id, check_id, item_id),
    FOREIGN KEY (student_id, check_id) REFERENCES grades (student_id, check_id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS applied_of_item ON applied (item_id);
"""


def database_path(out: Path) -> Path:
    return Path(out) / store.REVIEW / DATABASE


def exists(out: Path) -> bool:
    """Whether the batch at `out` has a review database (then it holds the batch's hand grades)."""
    return database_path(out).is_file()


class Database:
    """The database of one batch; a connection per thread (a server's requests run on several)."""

    def __init__(self, out: Path):
        self.path = database_path(out)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        with self.write() as connection:
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    connection.execute(statement)
            found = connection.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            if found is None:
                connection.execute("INSERT INTO meta (key, value) VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            elif int(found["value"]) > SCHEMA_VERSION:
                raise RuntimeError(f"{self.path} was written by a newer grader (schema {found['value']}): "
                                   "use that version of `grade review`")

    def connection(self) -> sqlite3.Connection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
            connection.row_factory = sqlite3.Row
            connection.execute("PRAGMA journal_mode = WAL")
            connection.execute("PRAGMA synchronous = FULL")
            connection.execute("PRAGMA foreign_keys = ON")
            connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._local.connection = connection
        return connection

    @contextmanager
    def write(self):
        """One transaction that writes: committed whole when the block ends, rolled back whole
        when it raises."""
        connection = self.connection()
        connection.execute("BEGIN IMMEDIATE")
        try:
            yield connection
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")

    @contextmanager
    def read(self):
        """One consistent snapshot to read from (a deferred transaction)."""
        connection = self.connection()
        connection.execute("BEGIN")
        try:
            yield connection
        finally:
            connection.execute("COMMIT")
