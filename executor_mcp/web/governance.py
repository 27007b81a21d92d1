"""The console's governance pages: the visitor's tool policies, toolkits and MCP sessions.

    GET  /policies   the org's rules and the visitor's own, add, move, remove, and "what would this path get?"
    GET  /toolkits   the org's toolkits and the visitor's own: their connection patterns, levels and rules
    GET  /sessions   the visitor's MCP sessions (its account in its org), and Terminate

The pages are shells: their script (`static/governance.js`) reads and changes everything through the JSON API
(`/api/policies`, `/api/policies/evaluate`, `/api/toolkits`, `/api/sessions`) with the visitor's CSRF token, so
the page and an agent's bearer meet the same checks. The server tells the page only whether the visitor may
change org rules and toolkits, to offer or withhold the buttons; the API refuses a non-admin's org change
whatever the page shows.
"""

from quart import Quart, Response

from executor_mcp.web.console import Console
from executor_mcp.web.signin import SignIn

_SCRIPTS = ("governance.js",)
_STYLES = ("governance.css",)


class GovernancePages:
    def __init__(self, console: Console) -> None:
        self._console = console

    def register(self, app: Quart) -> None:
        self._console.add_page(app, "/policies", "console_policies", self._policies)
        self._console.add_page(app, "/toolkits", "console_toolkits", self._toolkits)
        self._console.add_page(app, "/sessions", "console_sessions", self._sessions)

    async def _policies(self) -> Response:
        async def build(visitor: SignIn) -> Response:
            return self._console.view(
                visitor,
                "policies.html",
                title="Policies",
                page="policies",
                scripts=_SCRIPTS,
                styles=_STYLES,
                org_admin=visitor.org_admin,
            )

        return await self._console.page(build)

    async def _toolkits(self) -> Response:
        async def build(visitor: SignIn) -> Response:
            return self._console.view(
                visitor,
                "toolkits.html",
                title="Toolkits",
                page="toolkits",
                scripts=("toolkits.js",),
                styles=_STYLES,
                org_admin=visitor.org_admin,
            )

        return await self._console.page(build)

    async def _sessions(self) -> Response:
        async def build(visitor: SignIn) -> Response:
            return self._console.view(
                visitor, "sessions.html", title="Sessions", page="sessions", scripts=_SCRIPTS, styles=_STYLES
            )

        return await self._console.page(build)
