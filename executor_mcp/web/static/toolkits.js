// The toolkits page: every toolkit the visitor can see, its connection patterns (with their levels) and its own
// rules, all read and changed through /api/toolkits with the page's CSRF token (Console.api); every value from
// the API reaches the page as text (Console.el), never as HTML.
"use strict";

(() => {
  const { api, el, say, errorText, onSubmit, button } = Console;
  const LEVELS = ["off", "read", "full"];
  const ACTIONS = { approve: "approve", require_approval: "require approval", block: "block" };

  function select(name, options, chosen, props = {}) {
    const node = el("select", { name, ...props });
    for (const [value, words] of options) node.append(el("option", { value, selected: value === chosen }, words));
    return node;
  }

  function field(label, control) {
    return el("label", {}, label, " ", control);
  }

  function toolkitsPage() {
    const root = document.getElementById("toolkits");
    const orgAdmin = root.dataset.orgAdmin === "true";
    const list = document.getElementById("toolkit-list");
    const status = document.getElementById("toolkits-status");

    async function call(method, path, payload) {
      const answer = await api(method, `/api/toolkits${path}`, payload);
      if (!answer.ok) say(status, errorText(answer.data), "error");
      return answer;
    }

    async function load() {
      const answer = await call("GET", "");
      if (!answer.ok) return;
      const articles = [];
      for (const toolkit of answer.data.toolkits) {
        const id = encodeURIComponent(toolkit.id);
        const [connections, rules] = await Promise.all([call("GET", `/${id}/connections`), call("GET", `/${id}/policies`)]);
        if (!connections.ok || !rules.ok) return;
        articles.push(article(toolkit, connections.data.connections, rules.data.policies));
      }
      list.replaceChildren(
        ...(articles.length ? articles : [el("p", { className: "empty" }, "No toolkits yet: create one below.")]),
      );
    }

    function article(toolkit, connections, rules) {
      const changeable = toolkit.owner === "user" || orgAdmin;
      const id = encodeURIComponent(toolkit.id);
      const endpoint = `${location.origin}/mcp/toolkits/${toolkit.slug}`;
      const changed = (done) => async (answer) => {
        if (answer.ok) {
          say(status, done, "done");
          await load();
        }
      };
      const rows = connections.map((row) => {
        const level = select("level", LEVELS.map((value) => [value, value]), row.level, { disabled: !changeable });
        level.addEventListener("change", async () => {
          changed(`${row.pattern}: ${level.value}`)(
            await call("PATCH", `/${id}/connections/${encodeURIComponent(row.id)}`, { level: level.value }),
          );
        });
        const remove = changeable
          ? button("Remove", { className: "danger", dataset: { action: "remove-connection" } }, async () =>
              changed(`Removed: ${row.pattern}`)(await call("DELETE", `/${id}/connections/${encodeURIComponent(row.id)}`)),
            )
          : el("small", {}, "read-only");
        return el(
          "tr",
          { dataset: { id: row.id, kind: "connection" } },
          el("td", { dataset: { label: "Pattern" } }, el("code", { className: "pattern" }, row.pattern)),
          el("td", { dataset: { label: "Level" } }, level),
          el("td", { className: "row-actions" }, remove),
        );
      });
      const ruleRows = rules.map((rule) =>
        el(
          "tr",
          { dataset: { id: rule.id, kind: "rule" } },
          el("td", { dataset: { label: "Pattern" } }, el("code", { className: "pattern" }, rule.pattern)),
          el("td", { dataset: { label: "Action" } }, el("span", { className: `badge ${rule.action}` }, ACTIONS[rule.action])),
          el(
            "td",
            { className: "row-actions" },
            changeable
              ? button("Remove", { className: "danger", dataset: { action: "remove-rule" } }, async () =>
                  changed(`Removed: ${rule.pattern}`)(await call("DELETE", `/${id}/policies/${encodeURIComponent(rule.id)}`)),
                )
              : el("small", {}, "read-only"),
          ),
        ),
      );
      const forms = [];
      if (changeable) {
        const connect = el(
          "form",
          { className: "inline add-connection" },
          field("Pattern", el("input", { name: "pattern", required: true, maxLength: 512, placeholder: "github.org.main.*" })),
          field("Level", select("level", LEVELS.map((value) => [value, value]), "full")),
          el("button", { type: "submit" }, "Add connection pattern"),
        );
        onSubmit(connect, async () => {
          const payload = { pattern: connect.elements.pattern.value.trim(), level: connect.elements.level.value };
          changed(`Added: ${payload.pattern}`)(await call("POST", `/${id}/connections`, payload));
        });
        const rule = el(
          "form",
          { className: "inline add-rule" },
          field("Pattern", el("input", { name: "pattern", required: true, maxLength: 512, placeholder: "*" })),
          field("Action", select("action", Object.entries(ACTIONS), "require_approval")),
          el("button", { type: "submit" }, "Add rule"),
        );
        onSubmit(rule, async () => {
          const payload = { pattern: rule.elements.pattern.value.trim(), action: rule.elements.action.value };
          changed(`Added rule: ${payload.pattern}`)(await call("POST", `/${id}/policies`, payload));
        });
        forms.push(connect, rule);
      }
      const table = (kind, head, body, empty) =>
        el(
          "div",
          { className: "table" },
          el(
            "table",
            { className: `stack ${kind}` },
            el("thead", {}, el("tr", {}, ...head.map((words) => el("th", {}, words)), el("th", {}, ""))),
            el("tbody", {}, ...(body.length ? body : [el("tr", {}, el("td", { colSpan: head.length + 1, className: "empty" }, empty))])),
          ),
        );
      return el(
        "article",
        { className: "toolkit", dataset: { id: toolkit.id, slug: toolkit.slug } },
        el("h2", {}, toolkit.name, " ", el("small", {}, toolkit.owner === "org" ? "org" : "yours")),
        el("p", {}, "Endpoint: ", el("code", { className: "endpoint" }, endpoint)),
        table("connections", ["Connection pattern", "Level"], rows, "No connection patterns: the endpoint shows no tools."),
        table("rules", ["Rule", "Action"], ruleRows, "No rules of its own: the org's and yours decide."),
        ...forms,
        changeable
          ? button("Remove toolkit", { className: "danger", dataset: { action: "remove-toolkit" } }, async () =>
              changed(`Removed toolkit ${toolkit.name}`)(await call("DELETE", `/${id}`)),
            )
          : el("p", { className: "hint" }, "Only an organization admin can change org toolkits."),
      );
    }

    const add = document.getElementById("add-toolkit");
    const addStatus = document.getElementById("add-toolkit-status");
    onSubmit(add, async () => {
      const fields = add.elements;
      const payload = { owner: fields.owner.value, name: fields.name.value.trim() };
      if (fields.slug.value.trim()) payload.slug = fields.slug.value.trim();
      const answer = await api("POST", "/api/toolkits", payload);
      if (!answer.ok) {
        say(addStatus, errorText(answer.data), "error");
        return;
      }
      fields.name.value = "";
      fields.slug.value = "";
      say(addStatus, `Created ${answer.data.name}: /mcp/toolkits/${answer.data.slug}`, "done");
      await load();
    });

    load();
  }

  document.addEventListener("DOMContentLoaded", () => {
    if (document.body.dataset.page === "toolkits") toolkitsPage();
  });
})();
