// The policies and sessions pages: everything is read and changed through the JSON API with the page's CSRF
// token (Console.api), and every value from it reaches the page as text (Console.el), never as HTML.
"use strict";

(() => {
  const { api, el, say, errorText, onSubmit, button } = Console;
  const ACTION_WORDS = { approve: "approve", require_approval: "require approval", block: "block" };
  // Org rules first, then the visitor's own: the order the page lists them in (moves stay within an owner).
  const OWNERS = ["org", "user"];

  function badge(kind, words) {
    return el("span", { className: `badge ${kind}` }, words || kind);
  }

  function cell(label, ...children) {
    return el("td", { dataset: { label } }, ...children);
  }

  function emptyRow(columns, text) {
    return el("tr", {}, el("td", { colSpan: columns, className: "empty" }, text));
  }

  // -- policies ------------------------------------------------------------------------------------

  function policiesPage() {
    const root = document.getElementById("policies");
    const orgAdmin = root.dataset.orgAdmin === "true";
    const body = document.querySelector("#rules tbody");
    const status = document.getElementById("rules-status");

    async function load() {
      const answer = await api("GET", "/api/policies");
      if (!answer.ok) {
        say(status, errorText(answer.data), "error");
        return;
      }
      body.replaceChildren();
      const rows = OWNERS.flatMap((owner) => {
        const mine = answer.data.filter((policy) => policy.owner === owner); // already in evaluation order
        return mine.map((policy, index) => row(policy, index, mine.length));
      });
      body.append(...(rows.length ? rows : [emptyRow(5, "No rules yet: every call follows its tool's annotation.")]));
    }

    function row(policy, index, count) {
      const changeable = policy.owner === "user" || orgAdmin;
      const changes = el("td", { className: "row-actions" });
      if (changeable) {
        const move = (direction) => () => change("PATCH", policy, { owner: policy.owner, move: direction });
        changes.append(
          button("Up", { disabled: index === 0, title: "Move up", dataset: { action: "up" } }, move("up")),
          button("Down", { disabled: index === count - 1, title: "Move down", dataset: { action: "down" } }, move("down")),
          button("Remove", { className: "danger", dataset: { action: "remove" } }, () =>
            change("DELETE", policy, { owner: policy.owner }),
          ),
        );
      } else {
        changes.append(el("small", {}, "read-only"));
      }
      return el(
        "tr",
        { dataset: { id: policy.id, owner: policy.owner } },
        cell("Owner", policy.owner),
        cell("Position", el("span", { className: "order" }, String(index + 1)), " ",
          el("small", { className: "position" }, policy.position)),
        cell("Pattern", el("code", { className: "pattern" }, policy.pattern)),
        cell("Action", badge(policy.action, ACTION_WORDS[policy.action])),
        changes,
      );
    }

    async function change(method, policy, payload) {
      const answer = await api(method, `/api/policies/${encodeURIComponent(policy.id)}`, payload);
      if (!answer.ok) {
        say(status, errorText(answer.data), "error");
        return;
      }
      const done = method === "DELETE" ? "Removed" : `Moved ${payload.move}`;
      say(status, `${done}: ${policy.pattern}`, "done");
      await load();
    }

    const add = document.getElementById("add-rule");
    const addStatus = document.getElementById("add-status");
    onSubmit(add, async () => {
      const fields = add.elements;
      const payload = { owner: fields.owner.value, pattern: fields.pattern.value.trim(), action: fields.action.value };
      const answer = await api("POST", "/api/policies", payload);
      if (!answer.ok) {
        say(addStatus, errorText(answer.data), "error");
        return;
      }
      fields.pattern.value = "";
      say(addStatus, `Added: ${answer.data.pattern} (${ACTION_WORDS[answer.data.action]})`, "done");
      await load();
    });

    const evaluate = document.getElementById("evaluate");
    const verdict = document.getElementById("verdict");
    const evaluateStatus = document.getElementById("evaluate-status");
    onSubmit(evaluate, async () => {
      const path = evaluate.elements.path.value.trim();
      const answer = await api("GET", `/api/policies/evaluate?path=${encodeURIComponent(path)}`);
      if (!answer.ok) {
        verdict.hidden = true;
        say(evaluateStatus, errorText(answer.data), "error");
        return;
      }
      say(evaluateStatus, "");
      const action = document.getElementById("verdict-action");
      action.className = `badge ${answer.data.action}`;
      action.textContent = ACTION_WORDS[answer.data.action] || answer.data.action;
      document.getElementById("verdict-path").textContent = answer.data.path;
      document.getElementById("verdict-reason").textContent = answer.data.reason;
      verdict.dataset.action = answer.data.action;
      verdict.hidden = false;
    });

    load();
  }

  // -- sessions ------------------------------------------------------------------------------------

  const SHORT_ID = 12;

  function when(milliseconds) {
    return new Date(milliseconds).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
  }

  function sessionsPage() {
    const body = document.querySelector("#sessions tbody");
    const status = document.getElementById("sessions-status");

    async function load() {
      const answer = await api("GET", "/api/sessions");
      if (!answer.ok) {
        say(status, errorText(answer.data), "error");
        return;
      }
      body.replaceChildren();
      const rows = answer.data.map(row);
      body.append(...(rows.length ? rows : [emptyRow(8, "No sessions: connect an MCP client to this server.")]));
    }

    function row(session) {
      const client = session.client ? [session.client.name, session.client.version].filter(Boolean).join(" ") : "";
      const changes = el("td", { className: "row-actions" });
      if (session.state !== "condemned") {
        changes.append(
          button("Terminate", { className: "danger", dataset: { action: "terminate" } }, () => terminate(session)),
        );
      }
      return el(
        "tr",
        { dataset: { id: session.id, state: session.state } },
        cell("Session", el("code", { title: session.id }, `${session.id.slice(0, SHORT_ID)}…`)),
        cell("State", badge(session.state)),
        cell("Client", client || el("span", { className: "empty" }, "unknown")),
        cell("Protocol", session.protocolVersion || ""),
        cell("Approvals", session.elicitationMode || ""),
        cell("Created", when(session.createdAt)),
        cell("Last active", when(session.lastActivityAt)),
        changes,
      );
    }

    async function terminate(session) {
      const answer = await api("DELETE", `/api/sessions/${encodeURIComponent(session.id)}`);
      if (!answer.ok) say(status, errorText(answer.data), "error");
      else say(status, `Terminated session ${session.id.slice(0, SHORT_ID)}…`, "done");
      await load();
    }

    document.getElementById("refresh-sessions").addEventListener("click", () => {
      say(status, "");
      load();
    });
    load();
  }

  document.addEventListener("DOMContentLoaded", () => {
    if (document.body.dataset.page === "policies") policiesPage();
    if (document.body.dataset.page === "sessions") sessionsPage();
  });
})();
