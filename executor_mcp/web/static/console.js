// What every console page shares: calls to this server's JSON API with the page's CSRF token, a small DOM
// builder (text only: nothing is ever parsed as HTML), status lines, and the sign-in and sign-out forms.
"use strict";

const Console = (() => {
  const csrf = () => document.querySelector('meta[name="csrf-token"]')?.content || "";

  async function api(method, path, body) {
    const init = {
      method,
      headers: { "X-CSRF-Token": csrf(), Accept: "application/json" },
      credentials: "same-origin",
      cache: "no-store",
      redirect: "error",
    };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (error) {
      return { ok: false, status: 0, data: { error: "The server could not be reached. Try again." } };
    }
    const text = await response.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch (error) {
      data = { error: text.slice(0, 500) };
    }
    return { ok: response.ok, status: response.status, data };
  }

  // The message of any of the server's error shapes: {error}, {message}, {error: {message}}.
  function errorText(data) {
    if (!data) return "Something went wrong.";
    if (typeof data.error === "string") return data.error;
    if (data.error && typeof data.error.message === "string") return data.error.message;
    if (typeof data.message === "string") return data.message;
    return "Something went wrong.";
  }

  function say(element, text, kind) {
    element.className = kind || "";
    element.textContent = text;
  }

  // el("td", {className: "x", dataset: {id: "1"}}, "text", child, ...)
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (key === "dataset") Object.assign(node.dataset, value);
      else if (key in node) node[key] = value;
      else node.setAttribute(key, value);
    }
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  function onSubmit(form, handler) {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const buttons = form.querySelectorAll("button");
      buttons.forEach((button) => (button.disabled = true));
      try {
        await handler(event);
      } finally {
        buttons.forEach((button) => (button.disabled = false));
      }
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    const status = document.getElementById("status");
    const signOut = document.getElementById("sign-out");
    if (signOut) {
      signOut.addEventListener("click", async () => {
        await api("POST", "/signout", {});
        location.assign("/signin");
      });
    }
    const signIn = document.getElementById("sign-in");
    if (signIn) {
      onSubmit(signIn, async () => {
        say(status, "Signing in\u2026");
        const answer = await api("POST", "/signin", { token: signIn.elements.token.value.trim() });
        signIn.elements.token.value = "";
        if (answer.ok) location.assign(signIn.dataset.next || "/");
        else say(status, errorText(answer.data), "error");
      });
    }
    const link = document.getElementById("sign-in-link");
    if (link) {
      onSubmit(link, async () => {
        say(status, "Signing in\u2026");
        const answer = await api("POST", location.pathname, {});
        if (answer.ok) location.assign("/");
        else say(status, errorText(answer.data), "error");
      });
    }
  });

  // A button that runs `handler` on a click, disabled until it has finished (no double submits).
  function button(text, props, handler) {
    const node = el("button", { type: "button", ...props }, text);
    node.addEventListener("click", async () => {
      node.disabled = true;
      try {
        await handler();
      } finally {
        node.disabled = false;
      }
    });
    return node;
  }

  return { api, errorText, say, el, onSubmit, button };
})();
