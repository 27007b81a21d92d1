// The approvals pages. The list keeps itself current by polling /api/approvals every 2 s while the tab is
// visible (never while hidden, backing off on errors, and for a bounded number of polls), and answers each
// approval in place; the detail page answers one approval with a JSON POST and then shows what it led to.
"use strict";

(() => {
  const POLL_MS = 2000;
  const MAX_BACKOFF_MS = 30000;
  const MAX_POLLS = 1800; // an hour of a visible tab; a reload (or coming back to the tab) starts again
  const FOLLOW_MS = 1000;
  const MAX_FOLLOWS = 15;
  const WORDS = {
    approved: "Approved. The tool call goes ahead; the agent gets the result when it resumes.",
    declined: "Declined. The tool call does not run; the agent is told you declined it.",
  };
  const LED_TO = {
    completed: "The execution has finished.",
    error: "The execution ended with an error.",
  };

  const { api, el, errorText, say } = Console;

  function localTimes(root) {
    for (const node of root.querySelectorAll("time[datetime]")) {
      const moment = new Date(node.getAttribute("datetime"));
      if (!Number.isNaN(moment.getTime())) node.textContent = moment.toLocaleString();
    }
  }

  function approvalPath(id) {
    return "/approvals/" + encodeURIComponent(id);
  }

  // -- the list --------------------------------------------------------------------------------------

  // One pending approval, as templates/approvals.html renders it.
  function item(approval) {
    return el(
      "li",
      { dataset: { executionId: approval.executionId, tool: approval.tool } },
      el(
        "a",
        { href: approvalPath(approval.executionId) },
        el("span", { className: "tool" }, approval.tool),
        el("span", { className: "question" }, approval.question),
        el(
          "span",
          { className: "meta" },
          "Asked by " + approval.policy.words + " · ",
          el("time", { dateTime: approval.createdAt }, approval.createdAt),
        ),
      ),
      el(
        "details",
        { className: "arguments" },
        el("summary", {}, "Arguments"),
        el("pre", {}, approval.arguments),
        approval.argumentsTruncated ? el("p", { className: "hint" }, "They are longer than shown here.") : null,
      ),
      el(
        "div",
        { className: "actions decide" },
        el("button", { type: "button", className: "approve", dataset: { action: "accept" } }, "Approve"),
        el("button", { type: "button", className: "danger", dataset: { action: "decline" } }, "Decline"),
      ),
    );
  }

  function watchList(list) {
    const empty = document.getElementById("empty");
    const status = document.getElementById("status");
    let timer = null;
    let busy = false;
    let polls = 0;
    let delay = POLL_MS;
    // Answered here: a poll that left before the answer may still list them, and must not bring them back.
    const answered = new Set();

    function show(approvals) {
      const waiting = approvals.filter((approval) => !answered.has(approval.executionId));
      list.replaceChildren(...waiting.map(item));
      empty.hidden = waiting.length > 0;
      localTimes(list);
    }

    // Approve or decline one approval from the list; a 409 (someone answered first) says who did.
    async function answerIn(entry, action) {
      const { executionId, tool } = entry.dataset;
      const buttons = entry.querySelectorAll("button");
      buttons.forEach((button) => (button.disabled = true));
      say(status, (action === "accept" ? "Approving " : "Declining ") + tool + "\u2026");
      const result = await api("POST", "/api/approvals/" + encodeURIComponent(executionId), { action });
      if (!result.ok && result.status !== 409) {
        buttons.forEach((button) => (button.disabled = false));
        say(status, errorText(result.data), "error");
        return;
      }
      answered.add(executionId);
      entry.remove();
      empty.hidden = list.children.length > 0;
      const words = result.ok ? WORDS[result.data.outcome] || result.data.outcome : errorText(result.data) + ".";
      say(status, tool + ": " + words, "outcome " + result.data.outcome);
    }

    list.addEventListener("click", (event) => {
      const button = event.target.closest("button[data-action]");
      if (button) answerIn(button.closest("li"), button.dataset.action);
    });

    function schedule() {
      if (timer === null && !busy && !document.hidden && polls < MAX_POLLS) timer = setTimeout(poll, delay);
    }

    async function poll() {
      timer = null;
      if (document.hidden || busy) return;
      busy = true;
      polls += 1;
      const answer = await api("GET", "/api/approvals");
      busy = false;
      if (answer.ok && Array.isArray(answer.data)) {
        show(answer.data);
        if (delay !== POLL_MS) say(status, ""); // the last poll's error is over; an answer's words stay
        delay = POLL_MS;
      } else if (answer.status === 401 || answer.status === 403) {
        say(status, "You are signed out. Reload the page to sign in again.", "error");
        return;
      } else {
        delay = Math.min(delay * 2, MAX_BACKOFF_MS);
        say(status, errorText(answer.data), "error");
      }
      if (polls >= MAX_POLLS) say(status, "Updates paused. Reload the page to see new approvals.", "hint");
      schedule();
    }

    document.addEventListener("visibilitychange", () => {
      if (document.hidden) {
        clearTimeout(timer);
        timer = null;
      } else {
        polls = 0;
        delay = POLL_MS;
        poll();
      }
    });
    localTimes(list);
    schedule();
  }

  // -- one approval ----------------------------------------------------------------------------------

  function watchApproval(section) {
    const id = section.dataset.executionId;
    const decide = document.getElementById("decide");
    const outcome = document.getElementById("outcome");
    const then = document.getElementById("then");

    function showLedTo(data) {
      if (data.nextExecutionId) {
        then.replaceChildren(
          "The execution asked for another approval: ",
          el("a", { href: approvalPath(data.nextExecutionId), id: "next" }, "open it"),
          ".",
        );
      } else if (LED_TO[data.ledTo]) {
        say(then, LED_TO[data.ledTo], "hint");
      }
    }

    // What the answer led to, once the execution got past the gate (a few short looks, then no more).
    async function follow() {
      for (let look = 0; look < MAX_FOLLOWS; look += 1) {
        await new Promise((done) => setTimeout(done, FOLLOW_MS));
        const answer = await api("GET", "/api/approvals/" + encodeURIComponent(id));
        if (!answer.ok) return;
        if (answer.data.ledTo) {
          showLedTo(answer.data);
          return;
        }
      }
    }

    function answered(outcomeName, text) {
      decide.hidden = true;
      section.dataset.outcome = outcomeName;
      section.querySelector("h1").textContent = "Approval";
      say(outcome, text, "outcome " + outcomeName);
      follow();
    }

    async function answer(action) {
      for (const button of decide.querySelectorAll("button")) button.disabled = true;
      say(outcome, action === "accept" ? "Approving\u2026" : "Declining\u2026", "outcome");
      const result = await api("POST", "/api/approvals/" + encodeURIComponent(id), { action });
      if (result.ok) {
        answered(result.data.outcome, WORDS[result.data.outcome] || result.data.outcome);
      } else if (result.status === 409) {
        answered(result.data.outcome, errorText(result.data) + ".");
      } else {
        for (const button of decide.querySelectorAll("button")) button.disabled = false;
        say(outcome, errorText(result.data), "outcome error");
      }
    }

    document.getElementById("approve").addEventListener("click", () => answer("accept"));
    document.getElementById("decline").addEventListener("click", () => answer("decline"));
    localTimes(section);
    if (section.dataset.follow === "yes") follow();
  }

  document.addEventListener("DOMContentLoaded", () => {
    const list = document.getElementById("approvals");
    if (list) watchList(list);
    const section = document.getElementById("approval");
    if (section) watchApproval(section);
  });
})();
