// The connect page of a handoff link: posts the pasted values to the page's own path, which holds the token.
// No cookie goes with it (the link alone is the credential), and the values are cleared once accepted.
"use strict";

(() => {
  const form = document.getElementById("connect");
  if (!form) return;
  const status = document.getElementById("status");
  const button = form.querySelector("button");
  const fields = () => Array.from(form.querySelectorAll("input[data-input]"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    button.disabled = true;
    Console.say(status, "Connecting\u2026");
    const values = {};
    for (const field of fields()) values[field.dataset.input] = field.value.trim();
    let answer = {};
    let ok = false;
    let gone = false;
    try {
      const response = await fetch(location.pathname, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ name: form.elements.name.value, values }),
        credentials: "omit",
        cache: "no-store",
        redirect: "error",
      });
      ok = response.ok;
      gone = response.status === 404;
      answer = await response.json();
    } catch (error) {
      answer = { error: "The server could not be reached. Try again." };
    }
    if (ok) {
      for (const field of fields()) field.value = "";
      form.hidden = true;
      Console.say(status, "Connected. The agent can now use ", "done");
      status.append(Console.el("code", { id: "address" }, answer.address), ". You can close this page.");
    } else {
      Console.say(status, (answer && answer.error) || "The connection could not be created.", "error");
      button.disabled = gone;
    }
  });
})();
