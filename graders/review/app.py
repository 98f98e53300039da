"""The desk's web app (Flask): two pages rendered from jinja2 templates, and a JSON API that the
grading page's plain JavaScript (static/review.js, no build step) calls for every action.

    GET  /                          the questions: answers, graded, by whom, score distribution
    POST /name                      who you are (a cookie; shown beside your grades)
    GET  /q/CHECK                   grade CHECK: its first answer nobody has graded yet
    GET  /q/CHECK/KEY               grade CHECK at one answer (KEY: the answer's opaque address)
    GET  /api/q/CHECK/KEY           that answer, its grade, the question's items  (?names=1: the student too)
    POST /api/q/CHECK/KEY           one change to its grade (desk.Desk.act)
    POST /api/q/CHECK/items         a new item, applied to an answer at once
    GET  /api/items/ID              an item, with how many answers hold it
    POST /api/items/ID              change its points or text (re-scores those answers)
    POST /api/items/ID/delete       delete it
    GET  /api/status                whether the gradebook has caught up

Every request needs the token the command printed: the address with `?token=` sets a cookie
(HttpOnly, SameSite=Strict) and sends the browser on to the same page without it. Writes take
JSON only (a form of another site cannot send it) and refuse a foreign Origin. Every response
carries a Content-Security-Policy that lets the page run only its own script and load nothing
from elsewhere; student text is written as text (autoescaped templates, textContent in the script).
"""

from __future__ import annotations

import hmac
from urllib.parse import urlsplit

from flask import Flask, jsonify, redirect, render_template, request
from jinja2 import StrictUndefined
from markupsafe import Markup

from graders.review.desk import BAD_INPUT, Desk, ReviewError, reviewer_name
from graders.reports.html import visible_text

REVIEW_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
              "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
NAME_COOKIE = "review-name"


def create_app(desk: Desk, token: str, publisher=None) -> Flask:
    """The app of `desk`, open to whoever holds `token`. `publisher` (publish.Publisher), when
    given, is asked how far the gradebook has caught up."""
    app = Flask(__name__)
    # The templates are .j2 files: autoescaping everything, as every page of the product does,
    # and control characters replaced in every value written (graders.reports.html.visible_text).
    app.jinja_options = {"autoescape": True, "undefined": StrictUndefined, "finalize": visible_text,
                         "trim_blocks": True, "lstrip_blocks": True}
    app.json.sort_keys = False

    def token_cookie() -> str:
        # Cookies are per host, not per port: two desks on one machine keep apart.
        return f"review-token-{urlsplit(request.host_url).port or 80}"

    @app.before_request
    def require_token():
        given = request.args.get("token")
        if given is not None and request.method == "GET" and hmac.compare_digest(given, token):
            target = redirect(request.path)
            target.set_cookie(token_cookie(), token, httponly=True, samesite="Strict")
            return target
        if not hmac.compare_digest(request.cookies.get(token_cookie(), ""), token):
            return _refuse(403, "open the address `grade review` printed (it holds the desk's token)")
        if request.method == "POST":
            origin = request.headers.get("Origin")
            if origin is not None and origin.rstrip("/") != request.host_url.rstrip("/"):
                return _refuse(403, "a write from another site's page is refused")
        return None

    @app.after_request
    def secure(response):
        response.headers["Content-Security-Policy"] = REVIEW_CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "same-origin"  # the Origin of its own forms stays readable
        response.headers["Cache-Control"] = "no-store"
        return response

    @app.errorhandler(ReviewError)
    def refused(error: ReviewError):
        if request.path.startswith("/api/"):
            return jsonify({"error": error.message, "current": error.current}), error.status
        return render_template("message.html.j2", message=error.message), error.status

    def who() -> str:
        return request.cookies.get(NAME_COOKIE, "")

    def body() -> dict:
        data = request.get_json(silent=True)
        if not isinstance(data, dict):
            raise ReviewError(BAD_INPUT, "send the change as a JSON object (Content-Type: application/json)")
        return data

    @app.get("/")
    def questions():
        state = _publishing(desk, publisher)
        return render_template("questions.html.j2", questions=[{**q, "histogram": Markup(q["histogram"])}
                                                                for q in desk.overview()],
                               name=who(), state=state, out=str(desk.out), out_name=desk.out.resolve().name)

    @app.post("/name")
    def set_name():
        name = reviewer_name(request.form.get("name"))
        target = redirect("/")
        target.set_cookie(NAME_COOKIE, name, samesite="Strict", max_age=365 * 24 * 3600)
        return target

    @app.get("/q/<check_id>")
    def first_answer(check_id):
        return redirect(f"/q/{check_id}/{desk.first_answer(check_id)}")

    @app.get("/q/<check_id>/<key>")
    def grade_page(check_id, key):
        view = desk.view(check_id, key)
        return render_template("grade.html.j2", question=view["question"], key=key, name=who())

    @app.get("/api/q/<check_id>/<key>")
    def answer(check_id, key):
        return jsonify(desk.view(check_id, key, names=request.args.get("names") == "1"))

    @app.post("/api/q/<check_id>/<key>")
    def act(check_id, key):
        data = body()
        desk.act(who(), check_id, key, revision=data.get("revision"), answer_sha256=data.get("answer_sha256"),
                 action=str(data.get("action")), item=data.get("item"), comment=data.get("comment"),
                 adjustment=data.get("adjustment"))
        return jsonify(desk.view(check_id, key, names=request.args.get("names") == "1"))

    @app.post("/api/q/<check_id>/items")
    def create_item(check_id):
        data = body()
        apply_to = data.get("apply_to") if isinstance(data.get("apply_to"), dict) else None
        made = desk.create_item(who(), check_id, points=data.get("points"), text=data.get("text"), apply_to=apply_to)
        if apply_to is not None:
            made = desk.view(check_id, str(apply_to.get("key")), names=request.args.get("names") == "1")
        return jsonify(made)

    @app.get("/api/items/<int:item_id>")
    def item(item_id):
        return jsonify(desk.item(item_id))

    @app.post("/api/items/<int:item_id>")
    def update_item(item_id):
        data = body()
        return jsonify(desk.update_item(who(), item_id, version=data.get("version"), uses=data.get("uses"),
                                        points=data.get("points"), text=data.get("text")))

    @app.post("/api/items/<int:item_id>/delete")
    def delete_item(item_id):
        data = body()
        return jsonify(desk.delete_item(who(), item_id, version=data.get("version"), uses=data.get("uses")))

    @app.get("/favicon.ico")
    def no_icon():
        return "", 204  # the desk has no icon: said at once, rather than a 404 in every log

    @app.get("/api/status")
    def status():
        return jsonify(_publishing(desk, publisher))

    @app.errorhandler(404)
    def not_found(_error):
        return _refuse(404, "no such page of the desk")

    @app.errorhandler(405)
    def wrong_method(_error):
        return _refuse(405, "this address does not take that kind of request")

    return app


def _refuse(status: int, message: str):
    if request.path.startswith("/api/"):
        return jsonify({"error": message, "current": None}), status
    return render_template("message.html.j2", message=message), status


def _publishing(desk: Desk, publisher) -> dict:
    """How far the batch folder (results, reports, gradebook) has caught up with the database."""
    waiting = desk.waiting
    busy = bool(publisher is not None and publisher.busy)
    if not waiting:
        line = "every grade is in the gradebook"
    elif busy:
        line = (f"{waiting} student(s)' grades are saved and wait for the gradebook: the batch folder is busy "
                "(a grade batch or grade merge runs)")
    else:
        line = f"{waiting} student(s)' grades are saved and on their way to the gradebook"
    return {"waiting": waiting, "busy": busy, "line": line}
