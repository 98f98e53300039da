"""The output folder of one `grade SUBMISSION --out DIR`: whole or untouched, and never another
submission's grade replaced without a word.

The grade is written into a private sibling of DIR (`.DIR.grading-…`), which takes DIR's place
once results.json and the reports are all in it: a crash, a kill or Ctrl-C leaves DIR as it was,
and DIR never mixes this grade with files of an earlier one. Before anything runs, DIR is
refused (one line, with the fix) where it cannot be a grade's folder: a file, a path through a
file or a folder others may change (graders/atomic.py), inside the submission (its reports would
be read as part of the hand-in) or holding it, or a batch's folder. DIR holding another
submission's grade, or files that are no grade's, is replaced only with --force; the same
submission's earlier grade is replaced (a regrade), and the grade says so when its input has
changed since.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from graders.atomic import OutputFolderError, private_output_folder

# What a grade writes: results.json and the reports graders.reports.write_reports renders from it.
GRADE_FILES = frozenset({"results.json", "report.html", "feedback.html", "gradescope.json"})
# A batch's output folder holds this (graders/batch/store.py): never the folder of one grade.
BATCH_MARK = "submissions"


class OutputFolderRefused(OutputFolderError):
    """DIR cannot take this grade as it is; the message says why and what to do."""


@dataclass
class GradeFolder:
    final: Path  # DIR, resolved
    staging: Path  # where this grade is written until it is whole
    earlier: dict | None  # the results.json DIR held before, when it held one that reads

    @classmethod
    def prepare(cls, folder: Path, submission: Path, *, force: bool = False,
                untrusted_uids: range = range(0)) -> GradeFolder:
        """DIR made or taken for the grade of `submission`, with a private staging folder beside
        it; raises OutputFolderError (one line, with the fix) where it cannot be."""
        shown = folder
        folder = Path(os.path.abspath(folder))
        source = Path(os.path.realpath(submission))
        resolved = Path(os.path.realpath(folder))
        if source.is_dir() and resolved.is_relative_to(source):
            raise OutputFolderRefused(f"{shown} lies inside the submission {submission}: its reports would be read as "
                                      "part of the hand-in; choose --out outside it")
        if source.is_relative_to(resolved):
            raise OutputFolderRefused(f"{shown} holds the submission {submission}: a grade replaces its folder; "
                                      "choose --out elsewhere")
        if (resolved / BATCH_MARK).is_dir():
            raise OutputFolderRefused(f"{shown} is a batch's output folder (grade batch): give this grade a folder of "
                                      "its own with --out")
        final = private_output_folder(folder, untrusted_uids=untrusted_uids)
        earlier = _earlier_grade(final, submission, force, shown)
        staging = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.grading-"))
        return cls(final, staging, earlier)

    def secret_paths(self) -> list[Path]:
        """What no worker may read: DIR (an earlier grade, the rubric in its report) and the staging folder."""
        return [self.final, self.staging]

    def replacement_note(self, results: dict) -> str | None:
        """What to say of the earlier grade this one replaces: another submission's (--force), or
        another version of the same submission's; None for a plain regrade."""
        before, now = _submission(self.earlier), _submission(results)
        if not before:
            return None
        if before.get("name") != now.get("name"):
            return f"replaced the grade of {before.get('name')} in {self.final} (--force)"
        if before.get("sha256") != now.get("sha256"):
            return (f"replaced the earlier grade of {before.get('name')} in {self.final}: it was of another version "
                    f"of it (sha256 {str(before.get('sha256'))[:12]}…, now {str(now.get('sha256'))[:12]}…)")
        return None

    def publish(self) -> Path:
        """Put the staging folder in DIR's place: DIR is the earlier grade until this rename and
        this grade after it."""
        if any(self.final.iterdir()):
            aside = self.final.parent / f".{self.final.name}.replaced-{uuid.uuid4().hex[:8]}"
            os.rename(self.final, aside)
            os.rename(self.staging, self.final)
            shutil.rmtree(aside, ignore_errors=True)
        else:
            os.rename(self.staging, self.final)  # over the empty folder made before any worker started
        return self.final

    def discard(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


def _submission(results: dict | None) -> dict:
    section = results.get("submission") if isinstance(results, dict) else None
    return section if isinstance(section, dict) else {}


def _earlier_grade(final: Path, submission: Path, force: bool, shown: Path) -> dict | None:
    """The grade DIR holds (None: none, or one --force replaces), refused where it is another
    submission's or DIR holds files that are no grade's."""
    entries = sorted(entry.name for entry in final.iterdir() if not entry.name.startswith(".results.json."))
    foreign = [name for name in entries if name not in GRADE_FILES]
    if foreign and not force:
        listed = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise OutputFolderRefused(f"{shown} holds files that are no grade's ({listed}): choose an empty or new folder "
                                  "with --out, or give --force to replace the folder and everything in it")
    if "results.json" not in entries:
        return None
    try:
        earlier = json.loads((final / "results.json").read_text())
        name = _submission(earlier).get("name")
    except (OSError, ValueError, AttributeError):
        earlier, name = None, None
    if name != submission.name and not force:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime((final / "results.json").stat().st_mtime))
        whose = f"the grade of {name} ({when})" if isinstance(name, str) else f"a results.json that does not read ({when})"
        raise OutputFolderRefused(f"{shown} holds {whose}, not of {submission.name}: give --force to replace it, or "
                                  "choose another --out")
    return earlier
