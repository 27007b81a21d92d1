"""`GET /api/oauth/callback`: where the authorization server sends a person back after an OAuth sign-in
(`upstream-oauth-toolkits.md` §A.1; PRODUCT "OAuth connections and single sign-on").

    GET /api/oauth/callback?state=&code=&iss=      -> "Connected": the flow completed, the connection made
    GET /api/oauth/callback?state=&error=...       -> "Connection failed": the provider's words, bounded

Always an HTML page with the console's headers (CSP, no referrer, no store, no framing), never JSON nor a
traceback. The flow is completed for the browser's own principal: its console sign-in cookie (with `--auth none`,
the local principal), so a state is useful only to the browser of whoever started it. A browser with no console
session completes nothing: it is told to sign in first, with a link that comes back here afterwards.

The console's cookie is SameSite=Strict, so a browser sent here by another site's redirect does not carry it. A
cookie-less request that the browser marks cross-site (`Sec-Fetch-Site`) is answered a page that reloads this
URL at once: that navigation starts on this origin, so it carries the cookie, and is judged as above.

On completion the page's script (`static/oauth_callback.js`) hands the outcome to the console window that opened
it (`postMessage`, `BroadcastChannel` and `localStorage`, all named `executor:oauth-result`):
`{type, ok: true, sessionId: <state>, ...the connection}` or `{type, ok: false, sessionId, error}`; a success
closes the window after 400 ms. The connection is the API's shape: never a token.
"""

import urllib.parse
from collections.abc import Callable

from quart import Quart, Response, request

from executor_mcp.auth.principal import LOCAL_PRINCIPAL
from executor_mcp.codec import JsonObject
from executor_mcp.integrations.oauth_signins import OAUTH_CALLBACK_PATH
from executor_mcp.integrations.service import Integrations
from executor_mcp.integrations.wire import connection_json
from executor_mcp.protocol.errors import Refused
from executor_mcp.records.integration_errors import IntegrationError, OAuthSessionNotFound
from executor_mcp.transport.endpoint import defect_refusal
from executor_mcp.web.console import SIGN_IN_PATH, Console
from executor_mcp.web.signin import SignIn, safe_next

RESULT_NAME = "executor:oauth-result"  # the message type, the broadcast channel and the storage key
CALLBACK_PARAMS = ("state", "code", "iss", "error", "error_description")
MAX_PARAM_CHARS = 4096  # a longer value is no callback's (codes are bounded alike by `check_callback`)
MAX_SHOWN_STATE = 256
MAX_SHOWN_REASON = 600
CONNECTED = "Authentication complete. This window will close automatically."
NOT_IN_PROGRESS = (
    "This sign-in is not in progress for you: it is unknown, has expired, was already used, or was started by "
    "someone else. Start it again from the console."
)
UNAVAILABLE = "The server cannot check your console sign-in right now. Reload this page in a moment."
NO_OAUTH = "This server does not serve OAuth connections."


class OAuthCallbackPage:
    def __init__(self, console: Console, integrations: Integrations) -> None:
        self._console = console
        self._integrations = integrations

    def register(self, app: Quart) -> None:
        Console.add_page(app, OAUTH_CALLBACK_PATH, "oauth_callback", self._callback)

    async def _callback(self) -> Response:
        params = callback_params(request.args.getlist)
        state = params.pop("state", "")
        if request.method != "GET":  # HEAD (a link checker, say) completes nothing: the flow is single use
            return self._reload({"state": state, **params})
        try:
            visitor = await self._console.visitor(request.headers)
        except Refused:
            return self._failed(None, state, 503, UNAVAILABLE)
        if visitor is None and not self._console.local:
            if request.headers.get("sec-fetch-site") == "cross-site":
                return self._reload({"state": state, **params})
            return self._sign_in_first({"state": state, **params})
        principal = visitor.principal if visitor is not None else LOCAL_PRINCIPAL
        signins = self._integrations.oauth
        if signins is None:
            return self._failed(visitor, state, 404, NO_OAUTH)
        try:
            record = await signins.complete(principal, state, params)
        except OAuthSessionNotFound:
            return self._failed(visitor, state, 404, NOT_IN_PROGRESS)
        except IntegrationError as error:  # the provider refused, a mismatched iss, a refused exchange, ...
            return self._failed(visitor, state, error.status, bounded(error.message))
        except Refused as refused:
            return self._failed(visitor, state, refused.envelope.status, refused.envelope.message)
        except Exception as exc:  # a defect: logged under a correlation id, never shown
            defect = defect_refusal(exc)
            return self._failed(visitor, state, defect.envelope.status, defect.envelope.message)
        result = {"type": RESULT_NAME, "ok": True, "sessionId": state[:MAX_SHOWN_STATE], **connection_json(record)}
        return self._page(visitor, 200, "Connected", CONNECTED, result=result, address=record.address)

    def _failed(self, visitor: SignIn | None, state: str, status: int, reason: str) -> Response:
        result = {"type": RESULT_NAME, "ok": False, "sessionId": state[:MAX_SHOWN_STATE], "error": reason}
        return self._page(visitor, status, "Connection failed", reason, result=result)

    def _sign_in_first(self, query: dict[str, str]) -> Response:
        back = safe_next(here(query))
        target = SIGN_IN_PATH + "?" + urllib.parse.urlencode({"next": back}) if back != "/" else SIGN_IN_PATH
        text = (
            "Sign in to the console first, in this browser, as the account that started this sign-in: the "
            "connection is made for the console's signed-in account only. Nothing was connected yet."
        )
        return self._page(None, 403, "Sign in to the console first", text, sign_in=target, resumes=back != "/")

    def _reload(self, query: dict[str, str]) -> Response:
        text = "Checking your console sign-in\u2026 If nothing happens, follow the link below."
        return self._page(None, 200, "Signing in", text, reload=here(query))

    def _page(
        self,
        visitor: SignIn | None,
        status: int,
        heading: str,
        text: str,
        *,
        result: JsonObject | None = None,
        address: str | None = None,
        sign_in: str | None = None,
        resumes: bool = False,
        reload: str | None = None,
    ) -> Response:
        return self._console.view(
            visitor,
            "oauth_callback.html",
            status=status,
            title=heading,
            heading=heading,
            text=text,
            page="connections",
            scripts=("oauth_callback.js",) if result is not None else (),
            result=result,
            ok=result is not None and result["ok"] is True,
            address=address,
            sign_in=sign_in,
            resumes=resumes,
            reload=reload,
        )


def callback_params(values: Callable[[str], list[str]]) -> dict[str, str]:
    """The callback's parameters that are there, each its first value, bounded; an overlong one is left out (a
    missing code or state is refused as such)."""
    params = {}
    for name in CALLBACK_PARAMS:
        found = values(name)
        if found and len(found[0]) <= MAX_PARAM_CHARS:
            params[name] = found[0]
    return params


def here(query: dict[str, str]) -> str:
    """This callback's own URL (path and query), rebuilt from the parameters it reads and nothing else."""
    return OAUTH_CALLBACK_PATH + "?" + urllib.parse.urlencode({name: value for name, value in query.items() if value})


def bounded(reason: str) -> str:
    """A reason as a page shows it: printable, and short (a provider's description is its own words)."""
    printable = "".join(char if char.isprintable() else " " for char in reason)
    return printable if len(printable) <= MAX_SHOWN_REASON else printable[:MAX_SHOWN_REASON] + "\u2026"
