"""The connect page and its "link not valid" page as plain strings, and the headers every console answer
carries. No I/O: the adapter (`web/connect.py`) picks the nonce and the data.

Every value placed in the HTML is escaped; the page holds neither the token (its script posts to its own
path) nor, ever, a credential. The one inline script and the one inline style run by the response's nonce
under a CSP that allows nothing else: no other script, style, image, frame, form target or base URL, and
`fetch` only to this origin.
"""

import html

import attrs

from executor_mcp.integrations.model import AuthMethod

_STYLE = """
body { font: 16px/1.5 system-ui, sans-serif; margin: 0; background: #f6f7f9; color: #1d2330; }
main { max-width: 34rem; margin: 3rem auto; padding: 2rem; background: #fff; border-radius: 8px;
       box-shadow: 0 1px 3px rgba(0, 0, 0, .12); }
h1 { font-size: 1.4rem; margin-top: 0; }
label { display: block; margin-top: 1rem; font-weight: 600; }
small { display: block; color: #5b6272; font-weight: 400; }
input { box-sizing: border-box; width: 100%; padding: .5rem; margin-top: .25rem; font: inherit;
        border: 1px solid #b8bfcc; border-radius: 4px; }
button { margin-top: 1.5rem; padding: .6rem 1.4rem; font: inherit; border: 0; border-radius: 4px;
         background: #2456d3; color: #fff; cursor: pointer; }
button:disabled { background: #8a9ab8; cursor: default; }
code { background: #eef0f4; padding: 0 .25rem; border-radius: 3px; overflow-wrap: anywhere; }
.error { color: #b3261e; }
.done { color: #196b2e; }
"""

_SCRIPT = """
"use strict";
const form = document.getElementById("connect");
const status = document.getElementById("status");
const button = form.querySelector("button");
const fields = () => Array.from(form.querySelectorAll("input[data-input]"));
form.addEventListener("submit", async (event) => {
  event.preventDefault();
  button.disabled = true;
  status.className = "";
  status.textContent = "Connecting\\u2026";
  const values = {};
  for (const field of fields()) values[field.dataset.input] = field.value.trim();
  let answer = {}, ok = false, gone = false;
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
    status.className = "done";
    status.textContent = "Connected. The agent can now use ";
    const address = document.createElement("code");
    address.id = "address";
    address.textContent = answer.address;
    status.append(address, ". You can close this page.");
  } else {
    status.className = "error";
    status.textContent = (answer && answer.error) || "The connection could not be created.";
    button.disabled = gone;
  }
});
"""


@attrs.frozen
class ConnectView:
    """What the connect page shows: names, never values."""

    integration_name: str
    integration_slug: str
    method: AuthMethod
    owner: str
    account: str
    org: str
    default_name: str
    minutes_left: int


def security_headers(nonce: str | None = None) -> dict[str, str]:
    """Headers of every connect answer: nothing cached, no referrer (the path holds the token), no framing,
    no sniffing, and a CSP allowing only the nonce's inline script and style."""
    scripts = f"'nonce-{nonce}'" if nonce else "'none'"
    return {
        "Content-Security-Policy": (
            f"default-src 'none'; script-src {scripts}; style-src {scripts}; connect-src 'self'; "
            "form-action 'none'; base-uri 'none'; frame-ancestors 'none'; require-trusted-types-for 'script'"
        ),
        "Cache-Control": "no-store",
        "Pragma": "no-cache",
        "Referrer-Policy": "no-referrer",
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        "Cross-Origin-Opener-Policy": "same-origin",
        "Cross-Origin-Resource-Policy": "same-origin",
    }


def _frame(title: str, body: str, nonce: str, script: str = "") -> str:
    script_tag = f'<script nonce="{nonce}">{script}</script>' if script else ""
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="referrer" content="no-referrer">'
        f'<title>{html.escape(title)}</title><style nonce="{nonce}">{_STYLE}</style></head>'
        f"<body><main>{body}</main>{script_tag}</body></html>\n"
    )


def input_places(method: AuthMethod, variable: str) -> str:
    """Where an input goes, for the person pasting it: `header x-api-key`, `query api_key`."""
    places = [f"{placement.carrier} {placement.name}" for placement in method.placements if placement.input == variable]
    return ", ".join(places)


def connect_page(view: ConnectView, nonce: str) -> str:
    e = html.escape
    method = view.method
    template = method.label or method.slug
    who = (
        "shared with everyone in the organization"
        if view.owner == "org"
        else f"your own connection (account <code>{e(view.account)}</code>) in the organization"
    )
    fields = "".join(
        f'<label for="input-{index}">{e(variable)}<small>{e(input_places(method, variable))}</small></label>'
        f'<input id="input-{index}" type="password" data-input="{e(variable)}" required autocomplete="off" '
        'spellcheck="false" autocapitalize="off">'
        for index, variable in enumerate(method.inputs)
    )
    minutes = "minute" if view.minutes_left == 1 else "minutes"
    body = (
        f"<h1>Connect {e(view.integration_name)}</h1>"
        f"<p>Paste the credential for the integration <code>{e(view.integration_slug)}</code>, auth template "
        f"<code>{e(template)}</code>. It goes straight to the server's secret store: the agent never sees it.</p>"
        f"<p>The connection will be {who} <code>{e(view.org)}</code>. "
        f"This link works once, for at most {view.minutes_left} more {minutes}.</p>"
        '<form id="connect" autocomplete="off">'
        '<label for="name">Connection name</label>'
        f'<input id="name" name="name" value="{e(view.default_name)}" maxlength="200" spellcheck="false">'
        f'{fields}<button type="submit">Connect</button></form>'
        '<p id="status" role="status" aria-live="polite"></p>'
        "<noscript><p>This page needs JavaScript to send the credential.</p></noscript>"
    )
    return _frame(f"Connect {view.integration_name}", body, nonce, _SCRIPT)


NOT_VALID = (
    "This connect link is not valid: it is unknown, has expired or was already used. Ask the agent for a new one."
)


def not_valid_page(nonce: str) -> str:
    return _frame("Connect link not valid", f"<h1>Connect link not valid</h1><p>{html.escape(NOT_VALID)}</p>", nonce)
