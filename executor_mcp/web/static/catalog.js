// The integrations and connections pages: add an OpenAPI spec (preview first), create and remove connections
// with pasted values, and create one-time connect links. Every change is a JSON call through Console.api; a
// pasted value leaves its field only for the one request that stores it, and the field is emptied after.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const { api, el, errorText, say, onSubmit } = Console;
  const MIB = 1024 * 1024;

  // -- /integrations ------------------------------------------------------------------------------------

  // The spec the form names, as the API takes it: {kind: "url", url} or {kind: "blob", value: "<text>"}.
  async function specOf(form) {
    const url = form.elements.url.value.trim();
    const file = form.elements.file.files[0];
    if (url && file) return { error: "Give the spec's URL or a file, not both." };
    if (!url && !file) return { error: "Give the spec's URL, or choose a file." };
    if (url) return { spec: { kind: "url", url } };
    const limit = Number(form.dataset.maxBytes);
    if (file.size > limit) return { error: `That file is larger than ${Math.floor(limit / MIB)} MiB.` };
    return { spec: { kind: "blob", value: await file.text() } };
  }

  function tooLarge(form, body) {
    const limit = Number(form.dataset.maxBytes);
    return new Blob([JSON.stringify(body)]).size > limit
      ? `The spec is larger than ${Math.floor(limit / MIB)} MiB once sent as JSON text.`
      : null;
  }

  function showPreview(box, summary) {
    const facts = el("dl", { className: "facts" });
    const fact = (term, ...value) => facts.append(el("dt", {}, term), el("dd", {}, ...value));
    fact("Title", summary.title || "(untitled)");
    if (summary.version) fact("Version", summary.version);
    fact("Operations", String(summary.operationCount));
    const auth = [
      ...(summary.headerPresets || []).map((preset) => {
        const headers = Object.keys(preset.headers || {});
        return headers.length ? `${preset.label} (header ${headers.join(", ")})` : preset.label;
      }),
      ...(summary.oauth2Presets || []).map((preset) => `OAuth2 (${preset.flow || "flow"})`),
    ];
    fact("Auth templates", auth.length ? auth.join(", ") : "none");
    const names = summary.toolNames || [];
    const list = el("ul", { className: "names", id: "preview-tools" });
    for (const name of names) list.append(el("li", {}, el("code", {}, name)));
    const more = summary.operationCount > names.length ? `and ${summary.operationCount - names.length} more` : null;
    const parts = [el("h3", {}, "Preview"), facts];
    if (names.length) parts.push(list);
    if (more) parts.push(el("p", { className: "hint" }, more));
    box.replaceChildren(...parts);
    box.hidden = false;
  }

  function addSpecPage(form) {
    const status = $("status");
    const box = $("preview-box");
    const add = $("add");
    const stale = () => {
      add.disabled = true;
      box.hidden = true;
    };
    form.elements.url.addEventListener("input", stale);
    form.elements.file.addEventListener("change", stale);
    $("preview").addEventListener("click", async () => {
      const found = await specOf(form);
      if (found.error) return say(status, found.error, "error");
      const body = { spec: found.spec };
      const large = tooLarge(form, body);
      if (large) return say(status, large, "error");
      say(status, "Reading the spec\u2026");
      const answer = await api("POST", `/api/openapi/preview?toolNames=${form.dataset.previewNames}`, body);
      if (!answer.ok) return say(status, errorText(answer.data), "error");
      showPreview(box, answer.data);
      say(status, "This is what adding it gives. Add it, or change the source.", "done");
      add.disabled = false;
    });
    onSubmit(form, async () => {
      const found = await specOf(form);
      if (found.error) return say(status, found.error, "error");
      const body = { spec: found.spec };
      const slug = form.elements.slug.value.trim();
      if (slug) body.slug = slug;
      const large = tooLarge(form, body);
      if (large) return say(status, large, "error");
      say(status, "Adding\u2026");
      const answer = await api("POST", "/api/openapi/specs", body);
      if (!answer.ok) return say(status, errorText(answer.data), "error");
      location.assign(`/integrations/${encodeURIComponent(answer.data.slug)}`);
    });
  }

  // -- /connections -------------------------------------------------------------------------------------

  // Integrations with a template the form can use: any for a connection, pasted ones for a connect link.
  function usable(choices, pastedOnly) {
    const out = [];
    for (const [slug, choice] of Object.entries(choices)) {
      const templates = choice.templates.filter((template) => !pastedOnly || template.inputs.length > 0);
      if (templates.length) out.push({ slug, name: choice.name, templates });
    }
    return out;
  }

  function choosing(form, choices, onTemplate) {
    const integration = form.querySelector(".integration-choice");
    const template = form.querySelector(".template-choice");
    const options = usable(choices, integration.dataset.pasted === "1");
    for (const option of options) {
      integration.append(el("option", { value: option.slug }, `${option.name} (${option.slug})`));
    }
    if (form.dataset.selected && options.some((option) => option.slug === form.dataset.selected)) {
      integration.value = form.dataset.selected;
    }
    const current = () => options.find((option) => option.slug === integration.value);
    const templateOf = () => (current()?.templates || []).find((item) => item.slug === template.value);
    const fillTemplates = () => {
      template.replaceChildren(...(current()?.templates || []).map((item) => el("option", { value: item.slug }, item.label)));
      onTemplate(templateOf());
    };
    integration.addEventListener("change", fillTemplates);
    template.addEventListener("change", () => onTemplate(templateOf()));
    fillTemplates();
    if (!options.length) form.querySelectorAll("select, input, button").forEach((field) => (field.disabled = true));
    return templateOf;
  }

  function secretFields(holder, template) {
    const fields = (template?.inputs || []).map(([input, where], index) => [
      el("label", { htmlFor: `secret-${index}` }, input, where ? el("small", {}, where) : null),
      el("input", {
        id: `secret-${index}`,
        type: "password",
        required: true,
        autocomplete: "off",
        spellcheck: false,
        autocapitalize: "off",
        dataset: { input },
      }),
    ]);
    holder.replaceChildren(...fields.flat());
  }

  function newConnection(form, choices, status) {
    const holder = $("secret-fields");
    const templateOf = choosing(form, choices, (template) => secretFields(holder, template));
    onSubmit(form, async () => {
      const secrets = Array.from(holder.querySelectorAll("input[data-input]"));
      const body = {
        owner: form.elements.owner.value,
        name: form.elements.name.value.trim(),
        integration: form.elements.integration.value,
        template: templateOf()?.slug || "",
      };
      if (secrets.length) body.values = Object.fromEntries(secrets.map((field) => [field.dataset.input, field.value.trim()]));
      say(status, "Creating the connection\u2026");
      let answer;
      try {
        answer = await api("POST", "/api/connections", body);
      } finally {
        secrets.forEach((field) => (field.value = ""));
        delete body.values;
      }
      if (!answer.ok) return say(status, errorText(answer.data), "error");
      location.assign(`/connections?created=${encodeURIComponent(answer.data.address)}`);
    });
  }

  function newLink(form, choices, status) {
    const templateOf = choosing(form, choices, () => {});
    const box = $("link-box");
    const url = $("link-url");
    onSubmit(form, async () => {
      const body = {
        integration: form.elements.integration.value,
        template: templateOf()?.slug || "",
        owner: form.elements.owner.value,
      };
      const label = form.elements.label.value.trim();
      if (label) body.label = label;
      say(status, "Creating a connect link\u2026");
      const answer = await api("POST", "/api/connections/handoffs", body);
      if (!answer.ok) return say(status, errorText(answer.data), "error");
      url.value = answer.data.url;
      $("link-instructions").textContent = "It works once, for a few minutes. Anyone holding it can create this connection.";
      box.hidden = false;
      say(status, "Connect link created.", "done");
    });
    $("copy-link").addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(url.value);
        say(status, "Copied the link.", "done");
      } catch (error) {
        url.select();
        say(status, "Select the link and copy it.");
      }
    });
  }

  function removals(status) {
    for (const button of document.querySelectorAll("#connections button.remove")) {
      button.addEventListener("click", async () => {
        if (button.dataset.armed !== "1") {
          button.dataset.armed = "1";
          button.textContent = "Remove: sure?";
          return;
        }
        const row = button.closest("tr");
        const { owner, integration, name } = row.dataset;
        button.disabled = true;
        const path = [owner, integration, name].map(encodeURIComponent).join("/");
        const answer = await api("DELETE", `/api/connections/${path}`);
        if (!answer.ok) {
          button.disabled = false;
          return say(status, errorText(answer.data), "error");
        }
        row.remove();
        say(status, `Removed tools.${integration}.${owner}.${name}.`, "done");
      });
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    const addSpec = $("add-spec");
    if (addSpec) addSpecPage(addSpec);
    if (document.body.dataset.page !== "connections") return;
    const status = $("status");
    removals(status);
    const data = $("choices");
    if (!data) return;
    const choices = JSON.parse(data.textContent);
    if ($("new-connection")) newConnection($("new-connection"), choices, status);
    if ($("new-link")) newLink($("new-link"), choices, status);
  });
})();
