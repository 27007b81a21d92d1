// The integrations and connections pages: add an OpenAPI spec (preview first), an MCP server or a GraphQL API;
// refresh, update and remove an integration; create and remove connections with pasted values, and create
// one-time connect links. Every change is a JSON call through Console.api, which the API checks as it checks any
// caller's; a pasted value leaves its field only for the one request that stores it, and the field is emptied.
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

  // An OAuth template takes no pasted value: which client signs in (this server finds or registers one by
  // default), and the button says what happens next.
  function oauthFields(holder, clients) {
    const choice = el(
      "select",
      { id: "oauth-client", name: "oauthClient" },
      el("option", { value: "" }, "Automatic: a client of its authorization server, registered if need be"),
      ...clients.map((client) => el("option", { value: `${client.owner}/${client.slug}` }, `${client.slug} (${client.owner})`)),
    );
    holder.replaceChildren(
      el("label", { htmlFor: "oauth-client" }, "OAuth client", el("small", {}, "You sign in at the API's provider next.")),
      choice,
    );
  }

  function secretFields(holder, template, clients) {
    const submit = holder.closest("form").querySelector("button[type=submit]");
    submit.textContent = template?.oauth ? "Sign in to connect" : "Create connection";
    if (template?.oauth) return oauthFields(holder, clients);
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

  function newConnection(form, choices, clients, status) {
    const holder = $("secret-fields");
    const templateOf = choosing(form, choices, (template) => secretFields(holder, template, clients));
    onSubmit(form, async () => {
      if (templateOf()?.oauth) return oauthConnect(form, templateOf().slug, status);
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

  // A new OAuth connection: the console's own route starts the sign-in (finding or registering a client when
  // none is chosen), and the browser goes to the provider, whose callback brings it back with the connection.
  async function oauthConnect(form, template, status) {
    const body = {
      owner: form.elements.owner.value,
      name: form.elements.name.value.trim(),
      integration: form.elements.integration.value,
      template,
    };
    const chosen = form.elements.oauthClient.value;
    if (chosen) {
      const slash = chosen.indexOf("/");
      body.clientOwner = chosen.slice(0, slash);
      body.client = chosen.slice(slash + 1);
    }
    say(status, "Starting the sign-in\u2026");
    const answer = await api("POST", "/connections/oauth", body);
    const url = answer.ok ? answer.data.authorizationUrl : undefined;
    if (typeof url === "string" && /^https?:\/\//i.test(url)) return location.assign(url);
    if (answer.ok && answer.data.connected) return location.assign(`/connections?created=${encodeURIComponent(answer.data.address)}`);
    say(status, answer.ok ? "The server answered no sign-in address." : errorText(answer.data), "error");
  }

  // A client registered by hand (the form `oauth.clients.createHandoff` links to): its secret, if any, goes in
  // the body to the API and the field is emptied whatever the answer.
  function newOAuthClient(form, status) {
    onSubmit(form, async () => {
      const body = { owner: form.elements.owner.value, grant: form.elements.grant.value };
      for (const field of ["slug", "clientId", "authorizationUrl", "tokenUrl", "resource"]) {
        const value = form.elements[field].value.trim();
        if (value) body[field] = value;
      }
      const secret = form.elements.clientSecret.value;
      if (secret) body.clientSecret = secret;
      say(status, "Registering the OAuth client\u2026");
      let answer;
      try {
        answer = await api("POST", "/api/oauth/clients", body);
      } finally {
        form.elements.clientSecret.value = "";
        delete body.clientSecret;
      }
      if (!answer.ok) return say(status, errorText(answer.data), "error");
      say(status, `Registered the OAuth client ${answer.data.client} (${body.owner}).`, "done");
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

  // Reconnect an OAuth connection: the console starts a new sign-in with its client, template and name, and the
  // browser goes to the provider's sign-in (whose callback brings it back and replaces the tokens).
  function reconnects(status) {
    for (const button of document.querySelectorAll("#connections button.reconnect")) {
      button.addEventListener("click", async () => {
        const { owner, integration, name } = button.closest("tr").dataset;
        button.disabled = true;
        say(status, `Starting a new sign-in for tools.${integration}.${owner}.${name}\u2026`);
        const answer = await api("POST", "/connections/reconnect", { owner, integration, name });
        const url = answer.ok ? answer.data.authorizationUrl : undefined;
        if (typeof url === "string" && /^https?:\/\//i.test(url)) return location.assign(url);
        button.disabled = false;
        if (answer.ok && answer.data.connected) return say(status, `Reconnected tools.${integration}.${owner}.${name}.`, "done");
        say(status, answer.ok ? "The server answered no sign-in address." : errorText(answer.data), "error");
      });
    }
  }

  // -- adding an MCP server or a GraphQL API --------------------------------------------------------------

  const lines = (text) => text.split("\n").map((line) => line.replace(/\r$/, "")).filter((line) => line.trim());
  const snake = (name) => name.toLowerCase().split(/[^a-z0-9]+/).filter(Boolean).join("_");

  // The optional text fields a form fills in, trimmed; an empty one is left out (the server's default).
  function named(form, fields) {
    const out = {};
    for (const field of fields) {
      const value = form.elements[field].value.trim();
      if (value) out[field] = value;
    }
    return out;
  }

  // `Name: value` lines as an object of headers (own properties only: a `__proto__` line is just a name).
  function headerLines(text) {
    const entries = [];
    for (const line of lines(text)) {
      const colon = line.indexOf(":");
      if (colon < 1) return { error: `Write each static header as Name: value (not ${JSON.stringify(line.slice(0, 80))}).` };
      entries.push([line.slice(0, colon).trim(), line.slice(colon + 1).trim()]);
    }
    return { headers: Object.fromEntries(entries) };
  }

  // The credential fields as `{header, prefix, query}`, or why they do not make one.
  function credentialOf(form) {
    const header = form.elements.authHeader.value.trim();
    const prefix = form.elements.authPrefix.value;
    const query = form.elements.authQuery ? form.elements.authQuery.value.trim() : "";
    if (prefix && !header) return { error: "Name the credential header that the prefix goes before." };
    return { header, prefix, query };
  }

  // A GraphQL credential as one API-key method in the authoring dialect, as `add-graphql --header-auth
  // --query-auth` makes it: the first placement renders the `token` input, a second one its own input.
  function apiKeyTemplate({ header, prefix, query }) {
    const token = (name) => [{ type: "variable", name }];
    const method = { slug: "apikey", type: "apiKey", headers: {} };
    if (header) method.headers = Object.fromEntries([[header, [...(prefix ? [prefix] : []), ...token("token")]]]);
    if (query) method.queryParams = Object.fromEntries([[query, token(header ? snake(query) || "input_1" : "token")]]);
    return [method];
  }

  // The form as `POST /api/mcp/servers` takes it (`add-mcp`'s flags): a remote URL or a stdio command.
  function mcpBody(form) {
    const body = { name: form.elements.name.value.trim(), ...named(form, ["slug", "description"]) };
    if (form.elements.transport && form.elements.transport.value === "stdio") {
      const vars = form.elements.envVars.value.split(/[\s,]+/).filter(Boolean);
      Object.assign(body, { transport: "stdio", command: form.elements.command.value.trim() });
      body.args = lines(form.elements.args.value);
      if (vars.length) body.authenticationTemplate = [{ slug: "env", kind: "stdio_env", vars }];
      return { body };
    }
    body.endpoint = form.elements.endpoint.value.trim();
    body.remoteTransport = form.elements.remoteTransport.value;
    const credential = credentialOf(form);
    const statics = headerLines(form.elements.headers.value);
    if (credential.error || statics.error) return { error: credential.error || statics.error };
    if (Object.keys(statics.headers).length) body.headers = statics.headers;
    if (credential.header) body.auth = { kind: "header", headerName: credential.header, prefix: credential.prefix };
    return { body };
  }

  function addMcpPage(form) {
    const status = $("mcp-status");
    const where = form.elements.transport;
    if (where) {
      where.addEventListener("change", () => {
        $("mcp-remote").hidden = where.value === "stdio";
        $("mcp-stdio").hidden = where.value !== "stdio";
      });
    }
    onSubmit(form, async () => {
      const made = mcpBody(form);
      if (made.error) return say(status, made.error, "error");
      say(status, "Adding\u2026");
      const answer = await api("POST", "/api/mcp/servers", made.body);
      if (!answer.ok) return say(status, errorText(answer.data), "error");
      location.assign(`/integrations/${encodeURIComponent(answer.data.slug)}`);
    });
  }

  // The form as `POST /api/graphql/integrations` takes it (`add-graphql`'s flags). A schema file whose text is a
  // JSON object is an introspection result; any other text is SDL.
  async function graphqlBody(form) {
    const body = { endpoint: form.elements.endpoint.value.trim(), ...named(form, ["name", "slug", "description"]) };
    const file = form.elements.schema.files[0];
    if (file) {
      const limit = Number(form.dataset.maxBytes);
      if (file.size > limit) return { error: `That file is larger than ${Math.floor(limit / MIB)} MiB.` };
      const text = await file.text();
      body[text.trimStart().startsWith("{") ? "introspectionJson" : "sdl"] = text;
    }
    const credential = credentialOf(form);
    if (credential.error) return credential;
    if (credential.header || credential.query) body.authenticationTemplate = apiKeyTemplate(credential);
    return { body };
  }

  function addGraphqlPage(form) {
    const status = $("graphql-status");
    onSubmit(form, async () => {
      const made = await graphqlBody(form);
      if (made.error) return say(status, made.error, "error");
      const large = tooLarge(form, made.body);
      if (large) return say(status, large, "error");
      say(status, "Adding\u2026");
      const answer = await api("POST", "/api/graphql/integrations", made.body);
      if (!answer.ok) return say(status, errorText(answer.data), "error");
      location.assign(`/integrations/${encodeURIComponent(answer.data.slug)}`);
    });
  }

  // -- /integrations/<slug>: refresh, update, remove ------------------------------------------------------

  const MAX_NAMED = 10;

  function someOf(names) {
    const shown = names.slice(0, MAX_NAMED).join(", ");
    return names.length > MAX_NAMED ? `${shown} and ${names.length - MAX_NAMED} more` : shown;
  }

  // What a new spec changed (`{toolCount, addedTools, removedTools}`), with a link that reloads the tool list.
  function sayChanged(status, data) {
    const parts = [`${data.toolCount} tools`];
    if (data.addedTools.length) parts.push(`added: ${someOf(data.addedTools)}`);
    if (data.removedTools.length) parts.push(`removed: ${someOf(data.removedTools)}`);
    if (!data.addedTools.length && !data.removedTools.length) parts.push("none added or removed");
    say(status, `Updated: ${parts.join("; ")}. `, "done");
    status.append(el("a", { href: location.pathname, id: "reload" }, "Show the tools"));
  }

  // List each of the visitor's connections' tools again, one connection at a time; say how each went.
  async function refreshConnections(status) {
    const reports = [];
    let failed = false;
    for (const row of document.querySelectorAll("#connections tbody tr")) {
      const { owner, integration, name } = row.dataset;
      const path = [owner, integration, name].map(encodeURIComponent).join("/");
      say(status, `Listing the tools of tools.${integration}.${owner}.${name}\u2026`);
      const answer = await api("POST", `/api/connections/${path}/refresh`, {});
      failed = failed || !answer.ok;
      const outcome = answer.ok ? `${answer.data.length} tools` : errorText(answer.data);
      reports.push(`tools.${integration}.${owner}.${name}: ${outcome}`);
    }
    say(status, reports.join("; ") + ". ", failed ? "error" : "done");
    status.append(el("a", { href: location.pathname, id: "reload" }, "Show the tools"));
  }

  // Run `work` with `button` disabled, so that one click is one request.
  async function holding(button, work) {
    button.disabled = true;
    try {
      await work();
    } finally {
      button.disabled = false;
    }
  }

  function managePage(section) {
    const status = $("status");
    const slug = encodeURIComponent(section.dataset.slug);
    const refresh = $("refresh");
    if (refresh) {
      refresh.addEventListener("click", () =>
        holding(refresh, async () => {
          if (section.dataset.refresh !== "spec") return refreshConnections(status);
          say(status, "Fetching the spec again\u2026");
          const answer = await api("POST", `/api/openapi/integrations/${slug}/spec`, {});
          if (answer.ok) sayChanged(status, answer.data);
          else say(status, errorText(answer.data), "error");
        }),
      );
    }
    const rename = $("rename");
    onSubmit(rename, async () => {
      const name = rename.elements.name.value.trim();
      if (!name) return say(status, "Give it a name.", "error");
      const answer = await api("PATCH", `/api/integrations/${slug}`, {
        name,
        description: rename.elements.description.value.trim(),
      });
      if (!answer.ok) return say(status, errorText(answer.data), "error");
      $("integration-name").textContent = answer.data.name;
      say(status, "Saved the name and description.", "done");
    });
    const spec = $("update-spec");
    if (spec) {
      onSubmit(spec, async () => {
        const found = await specOf(spec);
        if (found.error) return say(status, found.error, "error");
        const body = { spec: found.spec };
        const large = tooLarge(spec, body);
        if (large) return say(status, large, "error");
        say(status, "Reading the new spec\u2026");
        const answer = await api("POST", spec.dataset.path, body);
        if (!answer.ok) return say(status, errorText(answer.data), "error");
        spec.reset();
        sayChanged(status, answer.data);
      });
    }
    const saved = "Saved. Each connection lists its tools there again at its next use.";
    const endpoint = $("update-endpoint");
    if (endpoint) {
      onSubmit(endpoint, async () => {
        const answer = await api("POST", endpoint.dataset.path, { endpoint: endpoint.elements.endpoint.value.trim() });
        if (answer.ok) say(status, saved, "done");
        else say(status, errorText(answer.data), "error");
      });
    }
    const command = $("update-command");
    if (command) {
      onSubmit(command, async () => {
        const body = { command: command.elements.command.value.trim(), args: lines(command.elements.args.value) };
        const answer = await api("POST", command.dataset.path, body);
        if (answer.ok) say(status, saved, "done");
        else say(status, errorText(answer.data), "error");
      });
    }
    const remove = $("remove-integration");
    remove.addEventListener("click", async () => {
      if (remove.dataset.armed !== "1") {
        remove.dataset.armed = "1";
        remove.textContent = "Remove, with its connections: sure?";
        return;
      }
      await holding(remove, async () => {
        const answer = await api("DELETE", `/api/integrations/${slug}`);
        if (answer.ok) location.assign("/integrations");
        else say(status, errorText(answer.data), "error");
      });
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    const addSpec = $("add-spec");
    if (addSpec) addSpecPage(addSpec);
    if ($("add-mcp")) addMcpPage($("add-mcp"));
    if ($("add-graphql")) addGraphqlPage($("add-graphql"));
    if ($("manage")) managePage($("manage"));
    if (document.body.dataset.page !== "connections") return;
    const status = $("status");
    removals(status);
    reconnects(status);
    const data = $("choices");
    if (!data) return;
    const choices = JSON.parse(data.textContent);
    const clients = $("oauth-clients") ? JSON.parse($("oauth-clients").textContent) : [];
    if ($("new-connection")) newConnection($("new-connection"), choices, clients, status);
    if ($("new-oauth-client")) newOAuthClient($("new-oauth-client"), status);
    if ($("new-link")) newLink($("new-link"), choices, status);
  });
})();
