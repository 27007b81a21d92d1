"""What a tool call carries besides its arguments: who is calling, their policies, and the approval gate."""

import attrs

from executor_mcp.policies.service import Policies
from executor_mcp.policies.toolkits import ToolkitScope
from executor_mcp.storage.records import Owner as Principal
from executor_mcp.tools.approval import CallNote, Gate


@attrs.frozen
class CallContext:
    principal: Principal
    policies: Policies
    gate: Gate
    note: CallNote = attrs.Factory(CallNote)
    # The toolkit whose endpoint the call came through, as it is now; None on every other endpoint.
    scope: ToolkitScope | None = None
