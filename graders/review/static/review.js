// The grading page of the review desk: plain JavaScript, no build step, no library.
// It renders one answer from the desk's JSON API and sends each action as one request. Every
// action is queued behind the one before it, so that each names the revision the last answer
// gave (two quick keys never refuse each other). Student text is only ever set as textContent.
"use strict";

(() => {
  const desk = document.getElementById("desk");
  const checkId = desk.dataset.check;
  const $ = (id) => document.getElementById(id);
  let key = desk.dataset.key;
  let view = null;
  let names = localStorage.getItem("review-names") === "1";
  let editNext = false; // "e" was pressed: the next item key opens that item's form
  let queue = Promise.resolve();

  const points = (value) => String(Number(Number(value).toFixed(2)));
  const signed = (value) => (value > 0 ? "+" : "") + points(value);
  const answerUrl = (k) => `/api/q/${encodeURIComponent(checkId)}/${encodeURIComponent(k)}${names ? "?names=1" : ""}`;

  function enqueue(task) {
    queue = queue.then(task).catch((error) => showAlert(`the desk could not be reached: ${error.message}`));
    return queue;
  }

  async function call(method, url, data) {
    const options = { method, headers: { Accept: "application/json" }, credentials: "same-origin" };
    if (data !== undefined) {
      options.headers["Content-Type"] = "application/json";
      options.body = JSON.stringify(data);
    }
    const response = await fetch(url, options);
    let payload;
    try {
      payload = await response.json();
    } catch (error) {
      payload = { error: `the desk answered ${response.status}`, current: null };
    }
    return { ok: response.ok, payload };
  }

  function showAlert(message, info = false) {
    const box = $("alert");
    box.textContent = message;
    box.className = info ? "alert info" : "alert";
    box.hidden = !message;
  }

  // ---------------------------------------------------------------------------- showing an answer

  function show(k, how = "push") {
    return enqueue(async () => {
      const { ok, payload } = await call("GET", answerUrl(k));
      if (!ok) {
        showAlert(payload.error);
        return;
      }
      showAlert("");
      view = payload;
      key = k;
      const address = `/q/${encodeURIComponent(checkId)}/${encodeURIComponent(k)}`;
      if (how === "push") history.pushState({ key: k }, "", address);
      else if (how === "replace") history.replaceState({ key: k }, "", address);
      render(true);
    });
  }

  function render(fresh) {
    const { question, answer, grade, items, nav } = view;
    $("position").textContent = `· answer ${answer.position} of ${question.count} · ${view.ungraded} ungraded`;
    $("student").textContent = answer.student
      ? `· ${answer.student.name ? `${answer.student.name} (${answer.student.id})` : answer.student.id}`
      : "· name hidden (h shows it)";
    const text = $("answer-text");
    text.textContent = answer.blank ? "(nothing written)" : answer.text;
    text.classList.toggle("blank", answer.blank);
    $("grade-note").textContent = grade.graded
      ? `graded by ${grade.by} at ${grade.at}`
      : grade.earlier
        ? `not graded yet; an earlier answer of this student was graded by ${grade.earlier.by} at ${grade.earlier.at}`
        : "not graded yet";
    const score = $("score");
    score.textContent = grade.graded ? `${points(grade.score)} / ${points(question.max_score)}` : `– / ${points(question.max_score)}`;
    score.classList.toggle("ungraded", !grade.graded);
    renderItems(items, grade.items);
    const adjustment = $("adjustment");
    if (fresh || document.activeElement !== adjustment) adjustment.value = grade.adjustment === null ? "" : points(grade.adjustment);
    const comment = $("comment");
    if (fresh || document.activeElement !== comment) comment.value = grade.comment;
    $("previous").disabled = !nav.previous;
    $("next").disabled = !nav.next;
    $("next-ungraded").disabled = !nav.next_ungraded;
    $("names").setAttribute("aria-pressed", String(names));
    $("names").textContent = names ? "Hide names" : "Show names";
  }

  function renderItems(items, applied) {
    const list = $("items");
    list.replaceChildren();
    for (const item of items) {
      const entry = document.createElement("li");
      entry.dataset.id = item.id;
      entry.classList.toggle("applied", applied.includes(item.id));
      entry.setAttribute("aria-checked", String(applied.includes(item.id)));
      entry.setAttribute("role", "checkbox");
      const keyCap = document.createElement("kbd");
      keyCap.textContent = item.key || " ";
      const value = document.createElement("span");
      value.className = `points ${item.points < 0 ? "minus" : "plus"}`;
      value.textContent = signed(item.points);
      const words = document.createElement("span");
      words.className = "text";
      words.textContent = item.text;
      const uses = document.createElement("span");
      uses.className = "uses";
      uses.textContent = `×${item.uses}`;
      uses.title = `given to ${item.uses} answer(s)`;
      entry.append(keyCap, value, words, uses);
      entry.addEventListener("click", (event) => {
        if (!event.target.closest("form")) toggle(item);
      });
      entry.addEventListener("dblclick", (event) => {
        event.preventDefault();
        openEditor(item);
      });
      list.append(entry);
    }
  }

  // ---------------------------------------------------------------------------- changing the grade

  async function settle(request) {
    const { ok, payload } = await request;
    if (ok) {
      view = payload;
      render(false);
      return true;
    }
    if (payload.current && payload.current.answer) {
      view = payload.current;
      render(true);
    }
    showAlert(payload.error);
    return false;
  }

  function act(action, extra = {}) {
    return enqueue(() => settle(call("POST", answerUrl(key), {
      revision: view.grade.revision, answer_sha256: view.answer.sha256, action, ...extra,
    })));
  }

  function toggle(item) {
    return act(view.grade.items.includes(item.id) ? "remove" : "apply", { item: item.id });
  }

  function createItem(event) {
    event.preventDefault();
    const value = $("new-points").value;
    const text = $("new-text").value;
    enqueue(async () => {
      const done = await settle(call("POST", `/api/q/${encodeURIComponent(checkId)}/items${names ? "?names=1" : ""}`, {
        points: value, text, apply_to: { key, revision: view.grade.revision, answer_sha256: view.answer.sha256 },
      }));
      if (done) {
        $("new-item").reset();
        $("new-points").blur();
        $("new-text").blur();
      }
    });
  }

  let commentTimer = null;
  const COMMENT_PAUSE_MS = 700; // a comment is saved when typing pauses, and when the box is left

  function saveComment() {
    clearTimeout(commentTimer);
    const comment = $("comment").value;
    if (view && comment !== view.grade.comment) act("comment", { comment });
  }

  function saveAdjustment() {
    const raw = $("adjustment").value.trim();
    const now = view.grade.adjustment === null ? "" : points(view.grade.adjustment);
    if (raw !== now) act("adjust", { adjustment: raw === "" ? null : raw });
  }

  // ---------------------------------------------------------------------------- changing an item

  function openEditor(item) {
    const entry = $("items").querySelector(`li[data-id="${item.id}"]`);
    if (!entry || entry.querySelector("form")) return;
    const form = document.createElement("form");
    form.className = "edit-item";
    const value = document.createElement("input");
    value.type = "number";
    value.step = "any";
    value.value = points(item.points);
    value.setAttribute("aria-label", "points");
    const words = document.createElement("input");
    words.value = item.text;
    words.maxLength = 500;
    words.setAttribute("aria-label", "text");
    const save = document.createElement("button");
    save.type = "submit";
    save.textContent = "Save";
    const remove = document.createElement("button");
    remove.type = "button";
    remove.textContent = "Delete";
    const cancel = document.createElement("button");
    cancel.type = "button";
    cancel.textContent = "Cancel";
    form.append(value, words, save, remove, cancel);
    entry.append(form);
    value.focus();
    value.select();
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      changeItem(item, { points: value.value, text: words.value });
    });
    form.addEventListener("keydown", (event) => {
      if (event.key === "Escape") render(false);
    });
    remove.addEventListener("click", () => changeItem(item, null));
    cancel.addEventListener("click", () => render(false));
  }

  // Changing an item re-scores every answer that holds it: the page first asks how many that is
  // now, says so, and sends that count with the version it showed; the desk refuses when either
  // has moved on since (another TA), and nothing changes.
  function changeItem(item, change) {
    enqueue(async () => {
      const { ok, payload } = await call("GET", `/api/items/${item.id}`);
      if (!ok) {
        showAlert(payload.error);
        return;
      }
      const many = `${payload.uses} answer${payload.uses === 1 ? "" : "s"}`;
      const question = change === null
        ? `Delete "${item.text}"? It is taken off the ${many} that hold it.`
        : `Change "${item.text}" to ${signed(Number(change.points))} "${change.text}"? ` +
          (payload.uses ? `It is applied to ${many}: their scores are recomputed.` : "It is applied to no answer yet.");
      if (!window.confirm(question)) {
        render(false);
        return;
      }
      const url = change === null ? `/api/items/${item.id}/delete` : `/api/items/${item.id}`;
      const answer = await call("POST", url, { version: item.version, uses: payload.uses, ...(change || {}) });
      const reload = await call("GET", answerUrl(key));
      if (reload.ok) {
        view = reload.payload;
        render(false);
      }
      if (answer.ok) {
        showAlert(`${change === null ? "deleted" : "changed"}: ${answer.payload.rescored} answer(s) re-scored`, true);
      } else {
        showAlert(answer.payload.error);
      }
    });
  }

  // ---------------------------------------------------------------------------- the keyboard

  const FIELDS = new Set(["INPUT", "TEXTAREA", "SELECT", "BUTTON"]);

  function onFieldKey(event) {
    const field = event.target;
    if (event.key === "Escape") {
      event.preventDefault();
      if (field.form && field.form.id === "new-item") field.form.reset();
      field.blur();
    } else if (field.id === "comment" && event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      field.blur();
    } else if (field.id === "adjustment" && event.key === "Enter") {
      event.preventDefault();
      field.blur();
    }
  }

  function itemWithKey(pressed) {
    return view.items.find((item) => item.key === pressed);
  }

  document.addEventListener("keydown", (event) => {
    if (!view || $("help").open || event.altKey || event.ctrlKey || event.metaKey) return;
    if (FIELDS.has(event.target.tagName) && event.target.tagName !== "BUTTON") {
      onFieldKey(event);
      return;
    }
    const pressed = event.key;
    if (editNext) {
      editNext = false;
      const item = itemWithKey(pressed);
      if (item) {
        event.preventDefault();
        openEditor(item);
      }
      return;
    }
    const nav = view.nav;
    const actions = {
      j: () => nav.next && show(nav.next), ArrowRight: () => nav.next && show(nav.next),
      k: () => nav.previous && show(nav.previous), ArrowLeft: () => nav.previous && show(nav.previous),
      u: () => nav.next_ungraded && show(nav.next_ungraded), Enter: () => nav.next_ungraded && show(nav.next_ungraded),
      i: () => $("new-points").focus(), a: () => $("adjustment").focus(), c: () => $("comment").focus(),
      x: () => act("clear"), h: () => toggleNames(), e: () => { editNext = true; }, "?": () => $("help").showModal(),
    };
    if (actions[pressed]) {
      event.preventDefault();
      actions[pressed]();
      return;
    }
    const item = itemWithKey(pressed);
    if (item) {
      event.preventDefault();
      toggle(item);
    }
  });

  function toggleNames() {
    names = !names;
    localStorage.setItem("review-names", names ? "1" : "0");
    show(key, "none");
  }

  // ---------------------------------------------------------------------------- wiring

  $("new-item").addEventListener("submit", createItem);
  $("comment").addEventListener("blur", saveComment);
  $("comment").addEventListener("input", () => {
    clearTimeout(commentTimer);
    commentTimer = setTimeout(saveComment, COMMENT_PAUSE_MS);
  });
  $("adjustment").addEventListener("blur", saveAdjustment);
  $("previous").addEventListener("click", () => view.nav.previous && show(view.nav.previous));
  $("next").addEventListener("click", () => view.nav.next && show(view.nav.next));
  $("next-ungraded").addEventListener("click", () => view.nav.next_ungraded && show(view.nav.next_ungraded));
  $("clear").addEventListener("click", () => act("clear"));
  $("names").addEventListener("click", toggleNames);
  window.addEventListener("popstate", (event) => {
    if (event.state && event.state.key) show(event.state.key, "none");
  });

  async function publishing() {
    const { ok, payload } = await call("GET", "/api/status");
    if (ok) $("publishing").textContent = payload.line;
  }
  setInterval(() => publishing().catch(() => {}), 3000);
  publishing().catch(() => {});
  show(key, "replace");
})();
