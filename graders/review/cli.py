"""`grade review DIR`: the review desk of a batch, in the browser.

    grade review DIR [--host 127.0.0.1] [--port 0]   serve the desk (prints its address, with its token)
    grade review DIR --import FILE.csv [--as NAME]    scores from a CSV (`grade answers`'s, filled in) into it
    grade review DIR --export FILE.csv                the hand grades as a CSV (`grade answers --all`'s columns)
    grade review DIR --publish                        bring the results and the gradebook up to date with it

Exit status: 0 when done (the server: stopped with Ctrl-C or SIGTERM, everything published),
1 when an import had rows it could not take (the others are imported) or the batch folder was
too busy to publish, 2 for bad usage.
"""

from __future__ import annotations

import ipaddress
import secrets
import signal
import socket
import sys
from contextlib import contextmanager
from pathlib import Path

from graders.options import command_parser

LOOPBACK = "127.0.0.1"
SERVER_THREADS = 8


def _parser():
    parser = command_parser("grade review", "Grade a batch's written answers in the browser: question by question, "
                            "with rubric items, several TAs at once.")
    parser.add_argument("out", type=Path, metavar="DIR", help="the batch output folder")
    parser.add_argument("--host", default=LOOPBACK,
                        help="the address to listen on (default 127.0.0.1: this machine only). Another one opens the desk "
                             "to the network, over plain HTTP: see docs/batch.md before you do")
    parser.add_argument("--port", type=int, default=0, help="the port (default: a free one, printed)")
    actions = parser.add_mutually_exclusive_group()
    actions.add_argument("--import", dest="import_csv", type=Path, metavar="FILE",
                         help="take the scores of a CSV (student_id, check_id, score[, comment]) into the desk, then publish")
    actions.add_argument("--export", dest="export_csv", type=Path, metavar="FILE",
                         help="write every written answer with its hand grade as a CSV (the columns of `grade answers`)")
    actions.add_argument("--publish", action="store_true",
                         help="bring results.json, the reports and the gradebook up to date with the desk, then exit")
    parser.add_argument("--as", dest="who", default=None, metavar="NAME",
                        help="who the imported grades are recorded as given by (default: the CSV's name)")
    return parser


def cmd_review(argv: list[str], given: str | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    from graders.batch import store

    if not (args.out / store.SUBMISSIONS).is_dir():
        print(f"grade review: {args.out} holds no batch results (no {store.SUBMISSIONS}/ folder)", file=sys.stderr)
        return 2
    if not 0 <= args.port <= 65535:
        print(f"grade review: --port {args.port} is not a port (0 to 65535; 0: a free one)", file=sys.stderr)
        return 2
    if args.import_csv is not None and not args.import_csv.is_file():
        print(f"grade review: no such file: {args.import_csv}", file=sys.stderr)
        return 2
    try:
        from graders.review.desk import Desk
        from graders.review.publish import Publisher
    except ModuleNotFoundError as error:
        return _missing(error)
    desk = Desk(args.out)
    publisher = Publisher(desk, _assignment(desk, given))
    if args.import_csv is not None:
        return import_csv(desk, publisher, args.import_csv, args.who or f"CSV {args.import_csv.name}")
    if args.export_csv is not None:
        return export_csv(desk, publisher, args.export_csv)
    if args.publish:
        return _published(publisher)
    try:
        return serve(desk, publisher, args.host, args.port)
    except ModuleNotFoundError as error:
        return _missing(error)


def _missing(error: ModuleNotFoundError) -> int:
    if error.name not in ("flask", "waitress", "werkzeug"):
        raise error
    print(f"grade review: {error.name} is not installed: run `pip install 'transformer-grader[review]'` (the review "
          "desk's web framework; a problem of the installation)", file=sys.stderr)
    return 2


def _assignment(desk, given):
    """The batch's pack, where it is installed: the gradebook's parts in its rubric's order."""
    from graders.assignment import installed, load

    name = given or desk.index.assignment
    return load(name) if name is not None and (given is not None or name in installed()) else None


def _published(publisher) -> int:
    if publisher.sync():
        print(f"published: {publisher.desk.out / 'gradebook.csv'}")
        return 0
    print("grade review: the batch folder is busy (a grade batch or grade merge runs): the grades stay in the database; "
          "run `grade review DIR --publish` once it ends", file=sys.stderr)
    return 1


def import_csv(desk, publisher, path: Path, who: str) -> int:
    """A CSV's scores into the desk (what `grade merge` does to a batch that has one), then published."""
    from graders.batch.merge import MergeReport, read_manual_csv
    from graders.review.desk import ReviewError

    report = MergeReport()
    try:
        grades = read_manual_csv(path, report)
        desk.import_grades(who, grades, report)
    except (ValueError, ReviewError) as error:
        print(f"grade review: {getattr(error, 'message', error)}", file=sys.stderr)
        return 2
    for line in report.lines():
        print(line)
    published = _published(publisher)
    return 0 if report.ok and published == 0 else 1


def export_csv(desk, publisher, path: Path) -> int:
    """Every written answer with its hand grade, as `grade answers --all` writes it, after publishing."""
    from graders.atomic import write_atomically
    from graders.batch.answers import answers_csv, written_answers

    if not publisher.sync():
        print("grade review: the batch folder is busy (a grade batch or grade merge runs): export again once it ends",
              file=sys.stderr)
        return 1
    answers = written_answers(desk.out, include_graded=True)
    written = write_atomically(path, answers_csv(answers))
    print(f"{len(answers)} written answer(s), {sum(a.status == 'graded' for a in answers)} graded: {written}")
    return 0


# ------------------------------------------------------------------------------------ the server


def start_server(desk, publisher, host: str, port: int, token: str):
    """The desk's WSGI server (waitress), listening but not yet serving: `.run()` serves,
    `.close()` stops; `.effective_port` is the port it got."""
    from waitress import create_server

    from graders.review.app import create_app

    return create_server(create_app(desk, token, publisher), host=host, port=port, threads=SERVER_THREADS,
                         ident="grade review", clear_untrusted_proxy_headers=True)


def serve(desk, publisher, host: str, port: int) -> int:
    from graders.review.publish import PublisherThread

    token = secrets.token_urlsafe(24)
    try:
        server = start_server(desk, publisher, host, port, token)
    except OSError as error:
        print(f"grade review: cannot listen on {host}:{port}: {error.strerror or error} (another program has the port? "
              "give another with --port)", file=sys.stderr)
        return 2
    publisher.sync()  # the batch as the database says, before anyone looks
    thread = PublisherThread(publisher)
    thread.start()
    shown = socket.gethostname() if _unspecified(host) else f"[{host}]" if ":" in host else host
    print(f"grade review: {len(desk.index.questions)} question(s), "
          f"{sum(len(a) for a in desk.index.answers.values())} answer(s) in {desk.out}")
    print(f"open: http://{shown}:{server.effective_port}/?token={token}")
    if not _loopback(host):
        print("grade review: listening beyond this machine, over plain HTTP: anyone on the network path can read the "
              "answers, the model answers and the token; anyone with the address can grade. Prefer an SSH tunnel to "
              "127.0.0.1 (docs/batch.md)", file=sys.stderr)
    print("Ctrl-C stops it (every grade is saved as it is given)", flush=True)
    with _stopping_on_signals():
        try:
            server.run()
        finally:
            server.close()
    done = thread.stop()
    print("grade review: stopped" + ("; every grade is in the gradebook" if done else ""))
    return 0 if done else 1


@contextmanager
def _stopping_on_signals():
    """Ctrl-C or SIGTERM end the server's loop (waitress returns from `run` on KeyboardInterrupt),
    and the command goes on to publish: stopping the desk is no interruption of it."""
    def stop(signum, frame):
        raise KeyboardInterrupt

    previous = {number: signal.signal(number, stop) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _unspecified(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
