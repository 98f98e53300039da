"""The review desk (`grade review`), without a browser: its pages and JSON API through Flask's
test client, the desk's operations, and what they publish into the batch (results.json, the
reports, manual.json, gradebook.csv, the LMS export), on small batches published through the
batch's store (tests/review_samples.py); nothing is graded."""

from __future__ import annotations

import csv
import json
import threading
import urllib.error
import urllib.request

from pathlib import Path

import pytest

import report_samples
import review_samples
from graders.batch import store
from graders.batch.merge import apply_stored_manual, merge_manual
from graders.cli import main
from graders.review.app import REVIEW_CSP, create_app
from graders.review.desk import BAD_INPUT, GONE, STALE, Desk, ReviewError
from graders.review.publish import Publisher

QUESTION = "answers.layer_norm"
TOKEN = "the-token"


@pytest.fixture
def batch(tmp_path):
    out = tmp_path / "batch"
    review_samples.publish_batch(out, 4)
    return out


@pytest.fixture
def desk(batch):
    return Desk(batch)


def browser(desk, name="Ann", publisher=None):
    """A test client that has opened the printed address and said who it is."""
    client = create_app(desk, TOKEN, publisher).test_client()
    assert client.get(f"/?token={TOKEN}").status_code == 302
    if name:
        client.post("/name", data={"name": name})
    return client


def written_key(desk, check_id=QUESTION):
    """The first answer of `check_id` that is not blank."""
    return next(key for key in desk.index.questions[check_id].keys if desk.index.answer(check_id, key).text)


def seen(view):
    """What a page sends back with each write: the revision and answer it showed."""
    return {"revision": view["grade"]["revision"], "answer_sha256": view["answer"]["sha256"]}


def gradebook(out):
    return {row["student_id"]: row for row in csv.DictReader((out / "gradebook.csv").read_text().splitlines())}


def check_of(out, student_id, check_id=QUESTION):
    results = store.read_results(out, student_id)
    return next(c for p in results["parts"] for c in p["checks"] if c["id"] == check_id)


def snapshot(desk):
    """Everything the database holds, to show that a refused write changed nothing."""
    with desk.db.read() as connection:
        return {table: [tuple(row) for row in connection.execute(f"SELECT * FROM {table} ORDER BY 1, 2")]
                for table in ("items", "grades", "applied")}


# ---------------------------------------------------------------------------- the door


def test_no_page_opens_without_the_token_and_the_address_sets_it_once(desk):
    client = create_app(desk, TOKEN).test_client()
    assert client.get("/").status_code == 403
    assert client.get("/api/status").status_code == 403
    assert client.get("/?token=wrong").status_code == 403
    opened = client.get(f"/?token={TOKEN}")
    assert opened.status_code == 302 and opened.headers["Location"] == "/"  # the token leaves the address bar
    cookie = opened.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    page = client.get("/")
    assert page.status_code == 200 and page.headers["Content-Security-Policy"] == REVIEW_CSP
    assert "script-src 'self'" in REVIEW_CSP and "unsafe" not in REVIEW_CSP and "default-src 'none'" in REVIEW_CSP


def test_a_write_from_another_sites_page_is_refused(desk):
    client = browser(desk)
    key = written_key(desk)
    view = client.get(f"/api/q/{QUESTION}/{key}").get_json()
    refused = client.post(f"/api/q/{QUESTION}/{key}", json={**seen(view), "action": "adjust", "adjustment": 1},
                          headers={"Origin": "http://evil.example"})
    assert refused.status_code == 403 and desk.view(QUESTION, key)["grade"]["graded"] is False
    assert client.post(f"/api/q/{QUESTION}/{key}", data="revision=0").status_code == BAD_INPUT  # JSON only


# ---------------------------------------------------------------------------- grading


def test_the_first_page_shows_each_question_with_its_counts_graders_and_scores(desk):
    client = browser(desk)
    page = client.get("/").get_data(as_text=True)
    assert "Why is Layer Normalization important" in page and "nobody yet" in page
    key = written_key(desk)
    view = desk.view(QUESTION, key)
    desk.create_item("Ann", QUESTION, points=4, text="normalises per token", apply_to={"key": key, **seen(view)})
    [question] = [q for q in desk.overview() if q["check_id"] == QUESTION]
    assert question["answers"] == 4 and question["graded"] == 1 and question["by"] == [("Ann", 1)]
    assert question["blank"] == sum(1 for k in desk.index.questions[QUESTION].keys if not desk.index.answer(QUESTION, k).text)
    assert question["mean"] == "4" and "<svg" in question["histogram"]
    assert "Ann: 1" in client.get("/").get_data(as_text=True)


def test_an_answer_is_graded_with_items_an_adjustment_and_a_comment(desk):
    client = browser(desk)
    key = written_key(desk)
    view = client.get(f"/api/q/{QUESTION}/{key}").get_json()
    assert view["answer"]["student"] is None  # names hidden unless asked
    assert view["question"]["rubric"] == review_samples.MODEL_ANSWERS[QUESTION]
    view = client.post(f"/api/q/{QUESTION}/items", json={"points": 3, "text": "names the axis",
                                                         "apply_to": {"key": key, **seen(view)}}).get_json()
    assert view["grade"]["score"] == 3 and view["items"][0]["key"] == "1" and view["items"][0]["uses"] == 1
    view = client.post(f"/api/q/{QUESTION}/items", json={"points": -1, "text": "no formula",
                                                         "apply_to": {"key": key, **seen(view)}}).get_json()
    assert view["grade"]["score"] == 2
    view = client.post(f"/api/q/{QUESTION}/{key}", json={**seen(view), "action": "adjust", "adjustment": "9"})
    assert view.status_code == BAD_INPUT and "from -5 to 5" in view.get_json()["error"]
    view = client.post(f"/api/q/{QUESTION}/{key}", json={**seen(desk.view(QUESTION, key)), "action": "adjust",
                                                          "adjustment": 0.5}).get_json()
    view = client.post(f"/api/q/{QUESTION}/{key}", json={**seen(view), "action": "comment", "comment": "say why"}).get_json()
    assert view["grade"]["score"] == 2.5 and view["grade"]["comment"] == "say why" and view["grade"]["by"] == "Ann"
    view = client.post(f"/api/q/{QUESTION}/{key}", json={**seen(view), "action": "remove",
                                                          "item": view["items"][0]["id"]}).get_json()
    assert view["grade"]["score"] == 0  # -1 + 0.5, clamped at 0
    named = client.get(f"/api/q/{QUESTION}/{key}?names=1").get_json()["answer"]["student"]
    assert named["id"] == desk.index.answer(QUESTION, key).student_id and named["name"].startswith("Student")


def test_next_previous_and_next_ungraded_walk_the_question(desk):
    keys = desk.index.questions[QUESTION].keys
    first = desk.view(QUESTION, keys[0])
    assert first["nav"]["previous"] is None and first["nav"]["next"] == keys[1] and first["answer"]["position"] == 1
    desk.act("Ann", QUESTION, keys[1], **seen(desk.view(QUESTION, keys[1])), action="adjust", adjustment=2)
    assert desk.view(QUESTION, keys[0])["nav"]["next_ungraded"] == keys[2]
    assert desk.view(QUESTION, keys[-1])["nav"]["next"] is None
    assert desk.first_answer(QUESTION) == keys[0]
    assert desk.view(QUESTION, keys[0])["ungraded"] == len(keys) - 1


def test_a_write_on_a_revision_another_ta_moved_on_is_refused_with_their_change(desk):
    key = written_key(desk)
    page_of_ann = desk.view(QUESTION, key)
    page_of_bob = desk.view(QUESTION, key)
    desk.act("Bob", QUESTION, key, **seen(page_of_bob), action="comment", comment="Bob's comment")
    before = snapshot(desk)
    with pytest.raises(ReviewError) as refused:
        desk.act("Ann", QUESTION, key, **seen(page_of_ann), action="comment", comment="Ann's comment")
    assert refused.value.status == STALE and "Bob changed this answer's grade" in refused.value.message
    assert refused.value.current["grade"]["comment"] == "Bob's comment"  # shown the other's change
    assert snapshot(desk) == before  # and nothing changed
    again = desk.act("Ann", QUESTION, key, **seen(refused.value.current), action="comment", comment="Ann's comment")
    assert again["grade"]["comment"] == "Ann's comment"  # made again, on purpose


def test_bad_input_gets_a_clear_message_and_changes_nothing(desk):
    key = written_key(desk)
    view = desk.view(QUESTION, key)
    desk.create_item("Ann", QUESTION, points=2, text="kept", apply_to={"key": key, **seen(view)})
    view = desk.view(QUESTION, key)
    before = snapshot(desk)
    attempts = [
        (lambda: desk.create_item("Ann", QUESTION, points=6, text="too many"), BAD_INPUT, "from -5 to 5"),
        (lambda: desk.create_item("Ann", QUESTION, points="nan", text="x"), BAD_INPUT, "must be a number"),
        (lambda: desk.create_item("Ann", QUESTION, points=1, text="   "), BAD_INPUT, "is empty"),
        (lambda: desk.act("Ann", QUESTION, key, **seen(view), action="adjust", adjustment="-7"), BAD_INPUT, "from -5 to 5"),
        (lambda: desk.act("Ann", QUESTION, key, **seen(view), action="comment", comment="x" * 6000), BAD_INPUT, "6000"),
        (lambda: desk.act("Ann", QUESTION, key, **seen(view), action="explode"), BAD_INPUT, "unknown action"),
        (lambda: desk.act("", QUESTION, key, **seen(view), action="clear"), BAD_INPUT, "give your name"),
        (lambda: desk.act("Ann", QUESTION, key, revision=view["grade"]["revision"], answer_sha256="0" * 64, action="clear"),
         STALE, "changed since the page was loaded"),
        (lambda: desk.act("Ann", "answers.gone", key, **seen(view), action="clear"), GONE, "not in this batch"),
        (lambda: desk.act("Ann", QUESTION, "0" * 16, **seen(view), action="clear"), GONE, "not in the batch any more"),
        (lambda: desk.act("Ann", QUESTION, key, **seen(view), action="apply", item=999), GONE, "no such rubric item"),
    ]
    for attempt, status, words in attempts:
        with pytest.raises(ReviewError) as refused:
            attempt()
        assert refused.value.status == status and words in refused.value.message, refused.value.message
        assert snapshot(desk) == before


def test_a_deleted_item_cannot_be_applied_from_a_stale_page(desk):
    key = written_key(desk)
    made = desk.create_item("Ann", QUESTION, points=1, text="short-lived")
    view = desk.view(QUESTION, key)
    desk.delete_item("Bob", made["id"], version=made["version"], uses=0)
    with pytest.raises(ReviewError) as refused:
        desk.act("Ann", QUESTION, key, **seen(view), action="apply", item=made["id"])
    assert refused.value.status == GONE and "deleted by Bob" in refused.value.message
    assert refused.value.current["items"] == []  # the page is shown the items as they are now


# ---------------------------------------------------------------------------- changing an item


def give_everyone(desk, item_id, check_id=QUESTION):
    for key in desk.index.questions[check_id].keys:
        desk.act("Ann", check_id, key, **seen(desk.view(check_id, key)), action="apply", item=item_id)


def test_changing_an_items_points_rescores_every_answer_it_was_applied_to_after_saying_how_many(desk, batch):
    publisher = Publisher(desk)
    made = desk.create_item("Ann", QUESTION, points=2, text="names the axis")
    give_everyone(desk, made["id"])
    publisher.sync()
    totals = {sid: float(row["total"]) for sid, row in gradebook(batch).items()}
    item = desk.item(made["id"])
    assert item["uses"] == 4
    before = snapshot(desk)
    for version, uses, words in ((item["version"], 3, "applied to 4 answers now, not 3"),
                                 (item["version"] + 1, 4, "changed this item")):
        with pytest.raises(ReviewError) as refused:
            desk.update_item("Bob", made["id"], version=version, uses=uses, points=3, text="names the axis")
        assert refused.value.status == STALE and words in refused.value.message
        assert snapshot(desk) == before
    changed = desk.update_item("Bob", made["id"], version=item["version"], uses=4, points=3, text="names the normalised axis")
    assert changed["rescored"] == 4 and changed["item"]["points"] == 3
    publisher.sync()
    moved = {sid: float(row["total"]) for sid, row in gradebook(batch).items()}
    assert all(moved[sid] == totals[sid] + 1 for sid in totals)
    for sid in totals:
        assert "names the normalised axis" in (store.result_dir(batch, sid) / "feedback.html").read_text()
    deleted = desk.delete_item("Ann", made["id"], version=changed["item"]["version"], uses=4)
    assert deleted["rescored"] == 4
    publisher.sync()
    assert {sid: float(row["total"]) for sid, row in gradebook(batch).items()} == {
        sid: total - 2 for sid, total in totals.items()}  # ungraded again: back to the automatic points
    assert all(row["pending_manual"] != "0" for row in gradebook(batch).values())


# ---------------------------------------------------------------------------- into the batch


def test_published_grades_reach_results_feedback_manual_json_gradebook_and_the_lms_export(desk, batch, capsys):
    publisher = Publisher(desk)
    key = written_key(desk)
    student = desk.index.answer(QUESTION, key).student_id
    marker = store.read_marker(batch, student)
    view = desk.create_item("Ann", QUESTION, points=3, text="names the axis", apply_to={"key": key, **seen(desk.view(QUESTION, key))})
    view = desk.create_item("Ann", QUESTION, points=-1, text="no formula", apply_to={"key": key, **seen(view)})
    desk.act("Ann", QUESTION, key, **seen(view), action="comment", comment="Good, but give the formula.")
    assert desk.waiting == 1
    assert publisher.sync() and desk.waiting == 0
    check = check_of(batch, student)
    assert check["score"] == 2 and check["details"]["comment"] == "Good, but give the formula."
    assert check["details"]["manual"]["items"] == [{"text": "names the axis", "points": 3.0}, {"text": "no formula", "points": -1.0}]
    feedback = (store.result_dir(batch, student) / "feedback.html").read_text()
    assert "names the axis" in feedback and "+3" in feedback and "-1" in feedback and "give the formula" in feedback
    assert review_samples.MODEL_ANSWERS[QUESTION] not in feedback  # the rubric stays the staff's
    results = store.read_results(batch, student)
    row = gradebook(batch)[student]
    assert float(row["total"]) == results["score"] and float(row["answers"]) == 2
    stored = json.loads((batch / "manual.json").read_text())[student][QUESTION]
    assert stored["score"] == 2 and stored["answer_sha256"] == desk.index.answer(QUESTION, key).sha256
    assert store.read_marker(batch, student)["key"] == marker["key"]  # nothing was regraded
    assert main(["export", str(batch), "--lms", "moodle"]) == 0
    capsys.readouterr()
    worksheet = {r["Identifier"]: r for r in csv.DictReader((batch / "moodle-worksheet.csv").read_text().splitlines())}
    assert float(worksheet[f"Participant {student}"]["Grade"]) == results["score"]


def test_a_grade_cleared_at_the_desk_is_taken_back_from_the_batch(desk, batch):
    publisher = Publisher(desk)
    key = written_key(desk)
    student = desk.index.answer(QUESTION, key).student_id
    publisher.sync()
    automatic = gradebook(batch)[student]["total"]
    view = desk.act("Ann", QUESTION, key, **seen(desk.view(QUESTION, key)), action="adjust", adjustment=4)
    publisher.sync()
    assert float(gradebook(batch)[student]["total"]) == float(automatic) + 4
    desk.act("Ann", QUESTION, key, **seen(view), action="clear")
    publisher.sync()
    assert gradebook(batch)[student]["total"] == automatic
    assert check_of(batch, student)["status"] == "pending_manual"
    assert QUESTION not in json.loads((batch / "manual.json").read_text()).get(student, {})


def test_a_regrade_keeps_every_hand_score_whose_answer_did_not_change(desk, batch):
    publisher = Publisher(desk)
    keys = [k for k in desk.index.questions[QUESTION].keys if desk.index.answer(QUESTION, k).text][:2]
    same, changed = (desk.index.answer(QUESTION, k).student_id for k in keys)
    for key in keys:
        desk.create_item("Ann", QUESTION, points=4, text=f"item {key}", apply_to={"key": key, **seen(desk.view(QUESTION, key))})
    publisher.sync()
    for student_id, new_answer in ((same, None), (changed, "a new answer, handed in again")):
        fresh = store.read_results(batch, student_id)  # as a regrade publishes it: the written answers pending
        for part in fresh["parts"]:
            for check in part["checks"]:
                if check["id"] == QUESTION:
                    text = new_answer or check["details"]["answer"]
                    check.clear()
                    check.update(review_samples.written_check(QUESTION, text))
        if new_answer:
            fresh["batch"]["input_sha256"] = "f" * 64
        apply_stored_manual(batch, student_id, fresh)  # what run_one does before it publishes
        store.publish(batch, student_id, fresh, {"key": "regraded"})
    assert check_of(batch, same)["score"] == 4  # same answer (same input): kept, with its items
    assert check_of(batch, same)["details"]["manual"]["items"] == [{"text": f"item {keys[0]}", "points": 4.0}]
    assert check_of(batch, changed)["status"] == "pending_manual"
    publisher.sync()
    view = desk.view(QUESTION, keys[1])
    assert not view["grade"]["graded"] and view["grade"]["earlier"]["by"] == "Ann"  # said, not counted
    assert view["answer"]["text"] == "a new answer, handed in again"
    assert check_of(batch, changed)["status"] == "pending_manual"


def test_a_score_kept_by_the_answers_hash_survives_a_new_input_with_the_same_answer(batch):
    desk = Desk(batch)
    key = written_key(desk)
    student = desk.index.answer(QUESTION, key).student_id
    desk.act("Ann", QUESTION, key, **seen(desk.view(QUESTION, key)), action="adjust", adjustment=3)
    Publisher(desk).sync()
    fresh = store.read_results(batch, student)
    fresh["batch"]["input_sha256"] = "e" * 64  # a new hand-in (other code), the same written answer
    for part in fresh["parts"]:
        for check in part["checks"]:
            if check["id"] == QUESTION:
                text = check["details"]["answer"]
                check.clear()
                check.update(review_samples.written_check(QUESTION, text))
    assert apply_stored_manual(batch, student, fresh) >= 1
    assert next(c for p in fresh["parts"] for c in p["checks"] if c["id"] == QUESTION)["score"] == 3


def test_hand_scores_merged_before_the_desk_are_adopted_not_taken_back(batch):
    manual = batch / "manual.csv"
    manual.write_text("student_id,check_id,score,comment\ns000,answers.residual_connection,4,merged by hand\n")
    assert merge_manual(manual, batch).ok
    desk = Desk(batch)
    Publisher(desk).sync()
    key = next(k for k in desk.index.questions["answers.residual_connection"].keys
               if desk.index.answer("answers.residual_connection", k).student_id == "s000")
    view = desk.view("answers.residual_connection", key)
    assert view["grade"]["graded"] and view["grade"]["score"] == 4 and view["grade"]["by"] == "grade merge"
    assert check_of(batch, "s000", "answers.residual_connection")["score"] == 4


def test_the_question_page_of_a_question_no_longer_in_the_batch_says_so(desk, batch):
    client = browser(desk)
    assert client.get(f"/q/{QUESTION}").status_code == 302
    for student_id in store.result_folders(batch):  # regraded without the question
        results = store.read_results(batch, student_id.name)
        for part in results["parts"]:
            part["checks"] = [c for c in part["checks"] if c["id"] != QUESTION]
        store.publish(batch, student_id.name, results, {"key": "other"})
    desk.refresh()
    page = client.get(f"/q/{QUESTION}")
    assert page.status_code == GONE and "is not in this batch" in page.get_data(as_text=True)
    api = client.get(f"/api/q/{QUESTION}/{'0' * 16}")
    assert api.status_code == GONE and "is not in this batch" in api.get_json()["error"]


# ---------------------------------------------------------------------------- the CSV path


def test_a_csv_filled_offline_goes_into_the_desk_and_the_desk_comes_out_as_one(desk, batch, capsys):
    key = written_key(desk)
    student = desk.index.answer(QUESTION, key).student_id
    desk.create_item("Ann", QUESTION, points=2, text="names the axis", apply_to={"key": key, **seen(desk.view(QUESTION, key))})
    filled = batch / "filled.csv"
    filled.write_text("student_id,check_id,score,comment\n"
                      f"{student},layer_norm,4.5,imported\n"  # the prefix may be left out, as for grade merge
                      "s001,answers.residual_connection,9,\n"  # clamped to 5
                      "zed,answers.layer_norm,1,\n"
                      "s002,attention.matches_reference,1,\n")
    assert main(["merge", str(filled), "--out", str(batch)]) == 1  # a batch with a desk: into the desk
    said = capsys.readouterr().out
    assert "merged 2 score(s)" in said and "zed" in said and "attention.matches_reference" in said
    view = desk.view(QUESTION, key)
    assert view["grade"]["score"] == 4.5 and view["grade"]["items"] and view["grade"]["adjustment"] == 2.5
    assert view["grade"]["comment"] == "imported" and view["grade"]["by"] == "grade merge"
    assert check_of(batch, student)["score"] == 4.5 and float(gradebook(batch)[student]["answers"]) >= 4.5

    exported = batch / "exported.csv"
    assert main(["review", str(batch), "--export", str(exported)]) == 0
    rows = list(csv.DictReader(exported.read_text().splitlines()))
    assert {(r["student_id"], r["check_id"], r["score"]) for r in rows if r["status"] == "graded"} == {
        (student, QUESTION, "4.5"), ("s001", "answers.residual_connection", "5")}
    before = snapshot(desk)
    assert main(["review", str(batch), "--import", str(exported)]) == 0  # the round trip changes nothing
    assert "merged 0 score(s)" in capsys.readouterr().out
    assert snapshot(desk) == before


def test_the_review_command_refuses_what_is_no_batch_and_bad_options(tmp_path, batch, capsys):
    assert main(["review", str(tmp_path)]) == 2
    assert "holds no batch results" in capsys.readouterr().err
    assert main(["review", str(batch), "--port", "70000"]) == 2
    assert "not a port" in capsys.readouterr().err
    assert main(["review", str(batch), "--import", str(tmp_path / "missing.csv")]) == 2
    assert main(["review", str(batch), "--publish"]) == 0
    with store.RunLock(batch):  # a grade batch holds the folder: the desk waits, loses nothing
        assert main(["review", str(batch), "--publish"]) == 1
    assert "busy" in capsys.readouterr().err


# ---------------------------------------------------------------------------- several TAs


def test_two_tas_grading_at_once_lose_no_work(batch):
    """Two desks (two servers on one batch, as two processes would be) and two threads each:
    every action lands, and the database agrees with the gradebook afterwards."""
    desks = [Desk(batch), Desk(batch)]
    items = [desks[0].create_item("Ann", QUESTION, points=1, text="Ann's"),
             desks[1].create_item("Bob", QUESTION, points=2, text="Bob's")]
    keys = desks[0].index.questions[QUESTION].keys
    failures = []

    def grade(desk, who, item, rounds=6):
        for _ in range(rounds):
            for key in keys:
                while True:
                    try:
                        desk.act(who, QUESTION, key, **seen(desk.view(QUESTION, key)), action="apply", item=item["id"])
                        desk.act(who, QUESTION, key, **seen(desk.view(QUESTION, key)), action="remove", item=item["id"])
                        desk.act(who, QUESTION, key, **seen(desk.view(QUESTION, key)), action="apply", item=item["id"])
                        break
                    except ReviewError as refused:  # the other changed it meanwhile: look again, do it again
                        if refused.status != STALE:
                            failures.append(refused.message)
                            return

    threads = [threading.Thread(target=grade, args=(desks[n], name, items[n])) for n, name in enumerate(("Ann", "Bob"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures
    for key in keys:
        assert desks[0].view(QUESTION, key)["grade"]["score"] == 3  # both items on every answer
    Publisher(desks[1]).sync()
    for key in keys:
        student = desks[0].index.answer(QUESTION, key).student_id
        assert check_of(batch, student)["score"] == 3


# ---------------------------------------------------------------------------- hostile text and the server


def test_student_text_stays_text_on_the_desks_pages(tmp_path):
    out = tmp_path / "batch"
    script = report_samples.SCRIPT
    results = review_samples.synthetic_results({QUESTION: f"{script}\x1b[31m\u202eevil"}, name=script)
    hostile = results["parts"][1]["checks"][0]
    hostile["title"] = hostile["details"]["question"] = hostile["details"]["rubric"] = script
    store.publish(out, "mallory", results, {"key": "m", "name": script})
    desk = Desk(out)
    client = browser(desk)
    questions = client.get("/").get_data(as_text=True)
    key = desk.index.questions[QUESTION].keys[0]
    page = client.get(f"/q/{QUESTION}/{key}").get_data(as_text=True)
    for html in (questions, page):
        assert script not in html and "&lt;script&gt;" in html
    answer = client.get(f"/api/q/{QUESTION}/{key}?names=1").get_json()["answer"]
    assert "\x1b" not in answer["text"] and "\u202e" not in answer["text"]
    assert answer["text"].startswith(script)  # JSON: text the page sets as textContent, never markup
    script_source = (Path(create_app.__code__.co_filename).parent / "static" / "review.js").read_text()
    assert "innerHTML" not in script_source and "insertAdjacentHTML" not in script_source
    desk.create_item("Ann", QUESTION, points=1, text=script, apply_to={"key": key, **seen(desk.view(QUESTION, key))})
    Publisher(desk).sync()
    feedback = (store.result_dir(out, "mallory") / "feedback.html").read_text()
    assert script not in feedback and "&lt;script&gt;alert(1)&lt;/script&gt;" in feedback  # an item's text too


def test_the_server_answers_over_http_with_the_token(desk):
    from graders.review.cli import start_server

    server = start_server(desk, Publisher(desk), "127.0.0.1", 0, TOKEN)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.effective_port}"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{base}/api/status", timeout=10)
        assert refused.value.code == 403
        cookie = f"review-token-{server.effective_port}={TOKEN}"
        request = urllib.request.Request(f"{base}/api/status", headers={"Cookie": cookie})
        with urllib.request.urlopen(request, timeout=10) as response:
            assert json.loads(response.read())["waiting"] == 0
            assert response.headers["Content-Security-Policy"] == REVIEW_CSP
    finally:
        server.close()


@pytest.mark.slow  # a process of its own: about 8 s
def test_the_command_prints_its_address_and_publishes_what_is_left_when_stopped(batch):
    """`grade review` as a TA runs it: the address with its token, a grade given over HTTP,
    Ctrl-C: the desk stops with exit status 0 and the grade in the gradebook."""
    import signal
    import subprocess
    import sys

    command = subprocess.Popen([sys.executable, "-m", "graders.cli", "review", str(batch)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        address = ""
        while not address.startswith("open: "):
            address = command.stdout.readline()
            assert address, command.stderr.read()
        url = address.split(" ", 1)[1].strip()
        assert url.startswith("http://127.0.0.1:") and "?token=" in url
        base, token = url.split("/?token=")
        cookie = f"review-token-{base.rsplit(':', 1)[1]}={token}; review-name=Ann"
        desk = Desk(batch)
        key = written_key(desk)
        request = urllib.request.Request(f"{base}/api/q/{QUESTION}/{key}", headers={
            "Cookie": cookie, "Content-Type": "application/json"},
            data=json.dumps({**seen(desk.view(QUESTION, key)), "action": "adjust", "adjustment": 3}).encode())
        with urllib.request.urlopen(request, timeout=30) as response:
            assert json.loads(response.read())["grade"]["score"] == 3
        command.send_signal(signal.SIGINT)
        assert command.wait(timeout=30) == 0, command.stderr.read()
    finally:
        command.kill()
    student = desk.index.answer(QUESTION, key).student_id
    assert check_of(batch, student)["score"] == 3
    assert float(gradebook(batch)[student]["answers"]) >= 3
