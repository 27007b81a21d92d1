"""A real GraphQL upstream on 127.0.0.1: graphql-core's own validator and executor behind the recording ASGI
app of `tests.upstream` on hypercorn, so tests see exactly which operations and variables reached it.

Switches: `auth` (None: open; "bearer": `Authorization: Bearer <TOKEN>`; "query": `?api_key=<TOKEN>`) and
`introspection` (False refuses `__schema`/`__type` as a validation error, as production servers do).
"""

import json
from typing import Any
from urllib.parse import parse_qs

import attrs
import graphql
import trio
from graphql.validation import NoSchemaIntrospectionCustomRule

from tests.upstream import Answer, Received, Upstream, start_upstream

TOKEN = "gql-token-0123456789"
SDL = '''
"""An order placed in the shop."""
type Order {
  id: ID!
  status: OrderStatus!
  total: Float
  customer: Customer
  items: [Item!]!
  note(lang: String!): String
}

type Customer {
  id: ID!
  name: String!
  orders: [Order!]!
}

type Item {
  sku: String!
  quantity: Int!
}

enum OrderStatus {
  PENDING
  SHIPPED
  CANCELLED
  LOST @deprecated(reason: "never happens")
}

input OrderFilter {
  customerId: ID
  minTotal: Float
}

type Query {
  "Fetch one order by id."
  order(id: ID!): Order
  orders(status: OrderStatus, filter: OrderFilter, first: Int = 10): [Order!]!
  failing: String
  legacy: String @deprecated(reason: "use order")
}

type Mutation {
  cancelOrder(id: ID!, reason: String): Order
}
'''


def _orders() -> dict[str, dict[str, Any]]:
    return {
        "o-1": {
            "id": "o-1",
            "status": "SHIPPED",
            "total": 12.5,
            "customer": {"id": "c-1", "name": "Ada", "orders": []},
            "items": [{"sku": "tea", "quantity": 2}],
        },
        "o-2": {
            "id": "o-2",
            "status": "PENDING",
            "total": 99.0,
            "customer": {"id": "c-2", "name": "Grace", "orders": []},
            "items": [],
        },
    }


@attrs.define
class GraphqlShop:
    auth: str | None = "bearer"
    introspection: bool = True
    schema: graphql.GraphQLSchema = attrs.field(factory=lambda: graphql.build_schema(SDL))
    orders: dict[str, dict[str, Any]] = attrs.field(factory=_orders)
    cancelled: list[tuple[str, str | None]] = attrs.Factory(list)
    upstream: Upstream | None = None

    @property
    def url(self) -> str:
        assert self.upstream is not None
        return self.upstream.url + "/graphql"

    @property
    def received(self) -> list[Received]:
        assert self.upstream is not None
        return self.upstream.received

    def operations(self) -> list[dict[str, Any]]:
        """The JSON bodies that reached the endpoint, introspections excluded."""
        bodies = [json.loads(request.body) for request in self.received if request.body]
        return [body for body in bodies if "__schema" not in body.get("query", "")]

    def _authorized(self, request: Received) -> bool:
        if self.auth == "bearer":
            return request.headers.get("authorization") == f"Bearer {TOKEN}"
        if self.auth == "query":
            return parse_qs(request.query).get("api_key") == [TOKEN]
        return True

    def _root(self) -> dict[str, Any]:
        def order(info: Any, id: str) -> dict[str, Any] | None:
            return self.orders.get(id)

        def orders(info: Any, status: str | None = None, filter: Any = None, first: int = 10) -> list[Any]:
            found = [o for o in self.orders.values() if status is None or o["status"] == status]
            if filter and filter.get("minTotal") is not None:
                found = [o for o in found if o["total"] >= filter["minTotal"]]
            return found[:first]

        def failing(info: Any) -> str:
            raise ValueError("the warehouse is on fire")

        def cancel_order(info: Any, id: str, reason: str | None = None) -> dict[str, Any] | None:
            self.cancelled.append((id, reason))
            found = self.orders.get(id)
            if found is not None:
                found["status"] = "CANCELLED"
            return found

        return {"order": order, "orders": orders, "failing": failing, "cancelOrder": cancel_order}

    def respond(self, request: Received) -> Answer:
        if request.method != "POST" or not request.path.startswith("/graphql"):
            return Answer(status=404, body=b'{"message": "no such route"}')
        if not self._authorized(request):
            return Answer(status=401, body=json.dumps({"message": "missing or bad token"}).encode())
        try:
            payload = json.loads(request.body)
            document = graphql.parse(payload["query"])
        except (ValueError, KeyError, graphql.GraphQLError) as error:
            return _errors(400, [str(error)])
        rules = [*graphql.specified_rules, *([] if self.introspection else [NoSchemaIntrospectionCustomRule])]
        invalid = graphql.validate(self.schema, document, rules)
        if invalid:
            return _errors(400, [error.message for error in invalid])
        result = graphql.execute(
            self.schema,
            document,
            root_value=self._root(),
            variable_values=payload.get("variables"),
            operation_name=payload.get("operationName"),
        )
        assert isinstance(result, graphql.ExecutionResult)  # synchronous resolvers: never awaitable
        body: dict[str, Any] = {"data": result.data}
        if result.errors:
            body["errors"] = [error.formatted for error in result.errors]
        return Answer(body=json.dumps(body).encode())


def _errors(status: int, messages: list[str]) -> Answer:
    return Answer(status=status, body=json.dumps({"errors": [{"message": m} for m in messages]}).encode())


async def start_graphql_shop(nursery: trio.Nursery, **switches: Any) -> GraphqlShop:
    shop = GraphqlShop(**switches)
    shop.upstream = await start_upstream(nursery, shop.respond)
    return shop
