"""`pytest` in the student's homework folder runs the public checks, one test per check.

The student bundle puts `STUDENT_CONFTEST` (graders/handin.py) into the homework folder as `conftest.py`. pytest
then collects every file of the folder that the assignment grades (its modules and questions
file) as a file of tests: one test per public check of the parts that live in it, named by the
check's id (`model.py::layer.padding`), so `pytest model.py` and `pytest -k padding` work as usual.

The folder is graded once, by the same self-check as `grade check` (one worker, golden
answers), when the first test runs, for exactly the parts of the tests that were selected; each
test then reports its check: a failure shows the likely mistake, the check's message, the
smallest input that shows it, expected and got and, for an exception in the student's code, the
end of its traceback (`pytest -v`: every detail). An untouched function fails the first test
that needs it with one line and skips the others, so that the untouched template reads as a
short list of functions to write. The results also go to `.grade/results.json` and
`.grade/report.html`, as with `grade check`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from graders.reports.findings import check_detail_lines, not_implemented_name, where_lines

_STATE_KEY = pytest.StashKey[dict]()
_REPORTED_KEY = pytest.StashKey[dict]()  # {what went wrong: the check whose failure reported it}
# A skipped test repeats the start of the failure it points at, no more.
SKIP_REASON_LIMIT = 120


def _parts_by_file(assignment):
    """{module file name: [part ids]}, from the rubric of `assignment`."""
    from graders.scoring import part_modules

    files = {}
    for part, module in part_modules(assignment.rubric).items():
        files.setdefault(module, []).append(part)
    return files


def pytest_collect_file(file_path, parent):
    from graders.assignment import for_submission

    if not (file_path.parent / "conftest.py").is_file():
        return None
    assignment = for_submission(file_path.parent)  # the homework folder's: the bundle's only pack
    parts = _parts_by_file(assignment).get(file_path.name)
    if not parts:
        return None
    return SelfCheckFile.from_parent(parent, path=file_path, parts=tuple(parts), assignment=assignment)


class SelfCheckFile(pytest.File):
    def __init__(self, *, parts, assignment, **kwargs):
        super().__init__(**kwargs)
        self.parts = parts
        self.assignment = assignment

    def collect(self):
        from graders.scoring import public_checks

        for part, chk in public_checks(self.assignment, self.parts):
            yield CheckItem.from_parent(self, name=chk.id, check=chk, part=part)


class CheckNotPassed(Exception):
    """A check that did not pass; its text is the check's own report."""


class CheckItem(pytest.Item):
    def __init__(self, *, check, part, **kwargs):
        super().__init__(**kwargs)
        self.check = check
        self.part = part

    def runtest(self):
        result = _graded(self)
        if isinstance(result, str):  # the folder could not be graded at all: one failure says why
            self._fail_once(("folder", Path(self.path).parent), result, "your folder could not be checked")
        if result.get("graded_by_hand") is True:
            # Written answers are graded by a person after the deadline and count nowhere here.
            written = "written" if result.get("status") == "pending_manual" else "not written yet"
            pytest.skip(f"written answer ({written}): graded by hand after the deadline")
        if result.get("status") == "passed":
            return
        untouched = not_implemented_name(result)
        if untouched:
            # An untouched function stops every check that needs it: the first of them fails
            # with one line, the others are skipped, so that the TODO is reported once.
            self._fail_once(("untouched", untouched), describe_check(result, verbose=self.config.option.verbose > 0),
                            f"not implemented yet: {untouched}")
        # A file that does not import fails each of its checks with the same message: reported once.
        message = str(result.get("message") or "")
        self._fail_once(("message", self.path, message), describe_check(result, verbose=self.config.option.verbose > 0),
                        message.splitlines()[0][:SKIP_REASON_LIMIT] if message else "the same failure")

    def _fail_once(self, key, text, short):
        """Fail with `text` the first time `key` comes up in this session; skip, pointing at
        that failure, every later time."""
        reported = self.session.stash.setdefault(_REPORTED_KEY, {})
        if key in reported:
            pytest.skip(f"{short} (failed in {reported[key]})")
        reported[key] = self.check.id
        raise CheckNotPassed(text)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, CheckNotPassed):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, f"{self.check.id}: {self.check.title}"


def describe_check(check, *, verbose=False):
    """The text of a check that did not pass, as a failing test shows it: first what to fix (the
    line pytest's short summary repeats), then what the check saw, the smallest input, expected
    and got, and where the student's code failed; with `verbose` (pytest -v) every detail."""
    untouched = not_implemented_name(check)
    if untouched and not verbose:
        return f"not implemented yet: {untouched}"
    diagnosis = check["diagnosis"].get("text") if isinstance(check.get("diagnosis"), dict) else None
    message = check.get("message") or f"{check.get('status')} (no message)"
    lines = [f"likely mistake: {diagnosis}", f"  {message}"] if diagnosis else [message]
    details = check_detail_lines(check, verbose=verbose) + ([] if verbose else where_lines([check]))
    for label, text in details:
        if text.startswith("\n"):
            lines.append(f"  {label}:\n" + _indent(text[1:]))
        else:
            lines.append(f"  {label}: {text}" if label else f"  {text}")
    return "\n".join(lines)


def _indent(text, prefix="    "):
    return "\n".join(prefix + line for line in text.splitlines())


def _graded(item):
    """This item's check in the self-check results of its folder (graded on first use), or a
    string saying why the folder could not be graded."""
    state = item.session.stash.setdefault(_STATE_KEY, {})
    folder = Path(item.path).parent
    if folder not in state:
        state[folder] = _grade_folder(item.session, folder)
    graded = state[folder]
    if isinstance(graded, str):
        return graded
    for part in graded.get("parts", []):
        for check in part.get("checks", []):
            if check.get("id") == item.check.id:
                return check
    if graded.get("status") != "graded":
        return f"your folder could not be graded: {graded.get('reason')}"
    return f"{item.check.id} was not run"


def _grade_folder(session, folder):
    from graders.selfcheck import DEFAULT_OUT, SelfCheckError, self_check, write_self_check_reports

    parts = sorted({i.part for i in session.items if isinstance(i, CheckItem) and Path(i.path).parent == folder})
    try:
        results = self_check(folder, parts)
    except SelfCheckError as error:
        return str(error)
    except ImportError as error:  # the grader's own dependency, not the student's code
        from graders.dependencies import missing_dependency_message, missing_module

        if missing_module(error) is None:
            raise
        return f"your folder could not be checked: {missing_dependency_message(missing_module(error))}"
    paths = write_self_check_reports(results, folder / DEFAULT_OUT)
    session.config.stash.setdefault(_STATE_KEY, {})[folder] = (results, paths)
    return results


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    from graders.reports.summary import headline

    for results, paths in config.stash.get(_STATE_KEY, {}).values():
        terminalreporter.write_sep("-", "self-check")
        terminalreporter.write_line(headline(results))
        terminalreporter.write_line(f"report: {paths['html']}")
