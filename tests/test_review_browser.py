"""The review desk in a real browser: headless Chromium through Selenium (tests/chromium.py)
against `grade review`'s own server (waitress, the publisher thread) on a small batch. A TA
grades by keyboard, makes an item and applies it, changes its points and sees the scores and
the gradebook move; two TAs at once; a reload, and a restart of the desk, find everything.

Screenshots of the pages go to $REVIEW_SCREENSHOT_DIR (default: a pytest temporary folder; the
docs' own, docs/review-*.png, are these, made with REVIEW_SCREENSHOT_DIR=docs)."""

from __future__ import annotations

import csv
import os
import threading
import time
from pathlib import Path

import pytest

import chromium
import report_samples
import review_samples
from graders.batch import store
from graders.review.cli import start_server
from graders.review.desk import Desk
from graders.review.publish import Publisher, PublisherThread

pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install selenium)")
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

pytestmark = [pytest.mark.slow, *chromium.SKIP]

QUESTION = "answers.residual_connection"
TOKEN = "browser-token"
WAIT_S = 15


class ServedDesk:
    """`grade review` serving a batch in this process: its server and its publisher thread."""

    def __init__(self, out: Path):
        self.desk = Desk(out)
        self.publisher = Publisher(self.desk)
        self.server = start_server(self.desk, self.publisher, "127.0.0.1", 0, TOKEN)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        self.publishing = PublisherThread(self.publisher)
        self.publishing.start()
        self.url = f"http://127.0.0.1:{self.server.effective_port}"

    def stop(self):
        if self.publishing.is_alive():
            self.server.close()
            self.publishing.stop()


@pytest.fixture
def batch(tmp_path):
    out = tmp_path / "batch"
    review_samples.publish_batch(out, 6)
    hostile = store.read_results(out, "s005")  # one student writes script into the answer
    hostile["parts"][1]["checks"][0]["details"]["answer"] = f"{report_samples.SCRIPT} <img src=x onerror=alert(2)>"
    store.publish(out, "s005", hostile, {"key": "s005"})
    return out


@pytest.fixture
def served(batch):
    desk = ServedDesk(batch)
    yield desk
    desk.stop()


@pytest.fixture
def screenshots(tmp_path_factory) -> Path:
    folder = os.environ.get("REVIEW_SCREENSHOT_DIR")
    path = Path(folder) if folder else tmp_path_factory.mktemp("review-screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def browsers(tmp_path):
    started = []

    def start():
        driver = chromium.start(tmp_path / f"profile-{len(started)}", (1400, 900))
        started.append(driver)
        return driver

    yield start
    for driver in started:
        driver.quit()


def sign_in(driver, desk: ServedDesk, name: str) -> None:
    driver.get(f"{desk.url}/?token={TOKEN}")
    field = driver.find_element(By.ID, "name")
    field.clear()
    field.send_keys(name, Keys.ENTER)
    WebDriverWait(driver, WAIT_S).until(lambda d: d.find_element(By.ID, "name").get_attribute("value") == name)


def open_question(driver, desk: ServedDesk, key: str | None = None) -> None:
    driver.get(f"{desk.url}/q/{QUESTION}" + (f"/{key}" if key else ""))
    wait_for(driver, lambda d: d.find_element(By.ID, "answer-text").text)


def wait_for(driver, condition):
    return WebDriverWait(driver, WAIT_S).until(condition)


def keys(driver, *typed) -> None:
    ActionChains(driver).send_keys(*typed).perform()


def score(driver) -> str:
    return driver.find_element(By.ID, "score").text


def answer_key(driver) -> str:
    return driver.current_url.rsplit("/", 1)[1]


def gradebook_totals(out: Path) -> dict[str, float]:
    return {row["student_id"]: float(row["total"])
            for row in csv.DictReader((out / "gradebook.csv").read_text().splitlines())}


def until_published(desk: ServedDesk) -> None:
    deadline = time.monotonic() + WAIT_S
    while desk.desk.waiting and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not desk.desk.waiting, "the publisher did not catch up"
    time.sleep(0.2)  # its rebuild of the gradebook, after the results


def test_a_ta_grades_by_keyboard_makes_and_applies_an_item_and_changes_its_points(served, batch, browsers, screenshots):
    driver = browsers()
    sign_in(driver, served, "Ann")
    open_question(driver, served)
    assert "name hidden" in driver.find_element(By.ID, "student").text
    first = answer_key(driver)

    keys(driver, "i", "3", Keys.TAB, "names the gradient path", Keys.ENTER)  # a new item, applied at once
    wait_for(driver, lambda d: score(d) == "3 / 5")
    keys(driver, "i", "-1", Keys.TAB, "no reason given", Keys.ENTER)
    wait_for(driver, lambda d: score(d) == "2 / 5")
    keys(driver, "c", "Say why the identity path helps.", Keys.ESCAPE)  # the comment, saved on leaving
    wait_for(driver, lambda d: served.desk.view(QUESTION, first)["grade"]["comment"] == "Say why the identity path helps.")
    (screenshots / "review-grade.png").write_bytes(driver.get_screenshot_as_png())

    keys(driver, "u")  # the next answer nobody has graded
    wait_for(driver, lambda d: answer_key(d) != first and score(d) == "– / 5")
    second = answer_key(driver)
    keys(driver, "1")  # the first item, by its key
    wait_for(driver, lambda d: score(d) == "3 / 5")
    keys(driver, "a", "0.5", Keys.ENTER)  # a point adjustment
    wait_for(driver, lambda d: score(d) == "3.5 / 5")
    keys(driver, "k")  # back: the first answer as it was left
    wait_for(driver, lambda d: answer_key(d) == first and score(d) == "2 / 5")
    assert driver.find_element(By.ID, "comment").get_attribute("value") == "Say why the identity path helps."

    until_published(served)
    before = gradebook_totals(batch)
    keys(driver, "e", "1")  # change item 1: +3 becomes +4, on both answers that hold it
    editor = wait_for(driver, lambda d: d.find_element(By.CSS_SELECTOR, "form.edit-item input[type=number]"))
    editor.clear()
    editor.send_keys("4", Keys.ENTER)
    confirm = wait_for(driver, expected_conditions.alert_is_present())
    assert "applied to 2 answers" in confirm.text and "recomputed" in confirm.text  # how many, before it changes
    confirm.accept()
    wait_for(driver, lambda d: "2 answer(s) re-scored" in d.find_element(By.ID, "alert").text)
    assert score(driver) == "3 / 5"
    until_published(served)
    after = gradebook_totals(batch)
    moved = {sid for sid in before if after[sid] != before[sid]}
    assert moved == {served.desk.index.answer(QUESTION, key).student_id for key in (first, second)}
    assert all(after[sid] == before[sid] + 1 for sid in moved)  # the totals moved by the point

    driver.get(f"{served.url}/")
    page = driver.find_element(By.TAG_NAME, "body").text
    assert "Ann: 2" in page and "3.75" in page  # graded by whom, and the mean of 3 and 4.5
    (screenshots / "review-questions.png").write_bytes(driver.get_screenshot_as_png())


def test_two_tas_at_once_see_each_others_change_and_lose_nothing(served, browsers, screenshots):
    ann, bob = browsers(), browsers()
    sign_in(ann, served, "Ann")
    sign_in(bob, served, "Bob")
    open_question(ann, served)
    key = answer_key(ann)
    open_question(bob, served, key)  # the same answer, in two browsers
    keys(ann, "i", "2", Keys.TAB, "Ann's item", Keys.ENTER)
    wait_for(ann, lambda d: score(d) == "2 / 5")
    keys(bob, "a", "1", Keys.ENTER)  # from a page that has not seen Ann's change
    alert = wait_for(bob, lambda d: d.find_element(By.ID, "alert").text)
    assert "Ann changed this answer's grade" in alert and "not saved" in alert
    assert score(bob) == "2 / 5"  # Bob is shown Ann's change, not his own over it
    assert "Ann's item" in bob.find_element(By.ID, "items").text
    (screenshots / "review-conflict.png").write_bytes(bob.get_screenshot_as_png())
    keys(bob, "a", "1", Keys.ENTER)  # done again, on purpose: now on top of Ann's
    wait_for(bob, lambda d: score(d) == "3 / 5")
    ann.refresh()
    wait_for(ann, lambda d: score(d) == "3 / 5")


def test_a_reload_and_a_restart_of_the_desk_find_everything(served, batch, browsers):
    driver = browsers()
    sign_in(driver, served, "Ann")
    open_question(driver, served)
    key = answer_key(driver)
    keys(driver, "i", "4", Keys.TAB, "complete", Keys.ENTER)
    wait_for(driver, lambda d: score(d) == "4 / 5")
    keys(driver, "c", "Well argued.")  # no Esc: saved when the typing pauses
    wait_for(driver, lambda d: served.desk.view(QUESTION, key)["grade"]["comment"] == "Well argued.")
    driver.refresh()
    wait_for(driver, lambda d: score(d) == "4 / 5")
    assert answer_key(driver) == key and "complete" in driver.find_element(By.ID, "items").text
    served.stop()

    again = ServedDesk(batch)  # `grade review` started anew: a new token, the same database
    try:
        sign_in(driver, again, "Ann")
        open_question(driver, again, key)
        wait_for(driver, lambda d: score(d) == "4 / 5")
        assert driver.find_element(By.ID, "comment").get_attribute("value") == "Well argued."
    finally:
        again.stop()


def test_script_in_an_answer_stays_text(served, browsers):
    driver = browsers()
    sign_in(driver, served, "Ann")
    key = next(k for k in served.desk.index.questions[QUESTION].keys
               if served.desk.index.answer(QUESTION, k).student_id == "s005")
    open_question(driver, served, key)
    assert report_samples.SCRIPT in driver.find_element(By.ID, "answer-text").text
    assert driver.find_elements(By.CSS_SELECTOR, "#answer-text script, #answer-text img") == []
    assert driver.execute_script("return document.querySelectorAll('script').length") == 1  # the desk's own
    keys(driver, "h")  # names shown on request
    wait_for(driver, lambda d: "s005" in d.find_element(By.ID, "student").text)
