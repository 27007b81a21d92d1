"""Auth methods of an OpenAPI integration: derived from the spec, written by hand, merged, and projected.

Three sources of methods meet here. A spec's security declarations give the default methods (upstream's
`derive-auth.ts`, plus `apiKey in: query` as a query placement, which upstream drops). An operator's
explicit list comes in either the canonical shape or upstream's authoring dialect (header/query templates),
and is normalized before storage. `configure` merges a new list into the stored one. The catalog shows
every method through one projection (`describe_methods`).
"""

import re
import secrets
from collections.abc import Sequence
from typing import Any
from urllib.parse import urljoin

from executor_mcp.codec import JsonObject
from executor_mcp.integrations.oauth_discovery import candidate_urls
from executor_mcp.integrations.openapi.document import Document
from executor_mcp.oauth.metadata import origin_of
from executor_mcp.records.integration_errors import InvalidInput
from executor_mcp.records.integrations import NO_AUTH, TOKEN, AuthMethod, Placement

APIKEY = "apikey"
OAUTH2 = "oauth2"
CARRIERS = ("header", "query")
MERGE, REPLACE = "merge", "replace"
MAX_METHODS = 32
MAX_PLACEMENTS = 16
MAX_NAME_LENGTH = 256
MAX_VALUE_LENGTH = 4096
_SLUG = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"
_OAUTH_FLOWS = ("authorizationCode", "clientCredentials")
ONE_VARIABLE = (
    "a template value renders at most ONE variable, as the FINAL part — split extra variables/suffixes into "
    "separate header or query entries"
)


# -- the spec's declarations --------------------------------------------------------------------------------


def security_schemes(document: Document) -> list[JsonObject]:
    """`components.securitySchemes` as upstream's preview lists them (`$ref`s followed, unknown types dropped).

    Keys are omitted when the spec gives nothing, as upstream's optional fields encode.
    """
    raw = document.components.get("securitySchemes")
    schemes: list[JsonObject] = []
    if not isinstance(raw, dict):
        return schemes
    for name, value in raw.items():
        scheme = document.resolve(value)
        if not isinstance(scheme, dict) or scheme.get("type") not in ("http", "apiKey", "oauth2", "openIdConnect"):
            continue
        described: JsonObject = {"name": name, "type": scheme["type"]}
        for field, key in (
            ("scheme", "scheme"),
            ("bearerFormat", "bearerFormat"),
            ("in", "in"),
            ("headerName", "name"),
            ("description", "description"),
            ("openIdConnectUrl", "openIdConnectUrl"),
        ):
            if isinstance(scheme.get(key), str):
                described[field] = scheme[key]
        if described.get("in") not in (None, "header", "query", "cookie"):
            del described["in"]
        flows = _flows(scheme.get("flows")) if scheme["type"] == "oauth2" else None
        if flows:
            described["flows"] = flows
        schemes.append(described)
    return schemes


def _flows(raw: Any) -> JsonObject:
    flows: JsonObject = {}
    if not isinstance(raw, dict):
        return flows
    for flow in _OAUTH_FLOWS:
        value = raw.get(flow)
        if not isinstance(value, dict) or not isinstance(value.get("tokenUrl"), str):
            continue
        if flow == "authorizationCode" and not isinstance(value.get("authorizationUrl"), str):
            continue
        described: JsonObject = {key: value[key] for key in ("authorizationUrl", "tokenUrl") if key in value}
        if isinstance(value.get("refreshUrl"), str):
            described["refreshUrl"] = value["refreshUrl"]
        scopes = value.get("scopes")
        described["scopes"] = (
            {k: v for k, v in scopes.items() if isinstance(v, str)} if isinstance(scopes, dict) else {}
        )
        flows[flow] = described
    return flows


def auth_strategies(document: Document, schemes: list[JsonObject]) -> list[JsonObject]:
    """The document's `security` entries, else one strategy per declared scheme (as for Sentry's spec)."""
    declared = document.root.get("security")
    strategies = [
        {"schemes": [name for name in entry if isinstance(name, str)]}
        for entry in (declared if isinstance(declared, list) else [])
        if isinstance(entry, dict)
    ]
    return [s for s in strategies if s["schemes"]] or [{"schemes": [scheme["name"]]} for scheme in schemes]


def header_presets(schemes: list[JsonObject], strategies: list[JsonObject]) -> list[JsonObject]:
    """Upstream's preview `headerPresets`: per strategy, the headers a user fills in (value null) and a label."""
    by_name = {scheme["name"]: scheme for scheme in schemes}
    presets = []
    for strategy in strategies:
        found = [by_name[name] for name in strategy["schemes"] if name in by_name]
        if not found or any(scheme["type"] in ("oauth2", "openIdConnect") for scheme in found):
            continue
        headers: dict[str, None] = {}
        labels = []
        for scheme in found:
            kind, http = scheme["type"], scheme.get("scheme", "")
            if kind == "http" and http in ("bearer", "basic"):
                headers["Authorization"] = None
                labels.append("Bearer Token" if http == "bearer" else "Basic Auth")
            elif kind == "apiKey" and scheme.get("in") == "header":
                headers[scheme["headerName"] if "headerName" in scheme else scheme["name"]] = None
                labels.append(scheme["name"])
            elif kind == "apiKey":
                labels.append(f"{scheme['name']} ({scheme.get('in', 'unknown')})")
            else:
                labels.append(scheme["name"])
        presets.append({"label": " + ".join(labels), "headers": headers, "secretHeaders": list(headers)})
    return presets


def oauth2_presets(schemes: list[JsonObject]) -> list[JsonObject]:
    presets = []
    for scheme in schemes:
        for flow, described in scheme.get("flows", {}).items():
            title = "Authorization Code" if flow == "authorizationCode" else "Client Credentials"
            preset: JsonObject = {
                "label": f"OAuth2 {title} · {scheme['name']}",
                "securitySchemeName": scheme["name"],
                "flow": flow,
                **described,
                "identityScopes": "auto" if flow == "authorizationCode" else False,
            }
            presets.append(preset)
    return presets


def derive_methods(document: Document, base_url: str | None = None) -> tuple[AuthMethod, ...]:
    """The default methods of a spec: one `apikey-<i>` per strategy that places a credential (`i` counts
    strategies from 0), then one `oauth-<scheme>` per oauth2 flow (kept for later, not usable yet)."""
    schemes = security_schemes(document)
    by_name = {scheme["name"]: scheme for scheme in schemes}
    methods: list[AuthMethod] = []
    for index, strategy in enumerate(auth_strategies(document, schemes)):
        found = [by_name[name] for name in strategy["schemes"] if name in by_name]
        placements = [p for scheme in found if (p := _placement(scheme)) is not None]
        if len({p.name.lower() for p in placements}) < len(placements):
            placements = list({p.name.lower(): p for p in placements}.values())
        if not placements:
            continue
        if len(placements) > 1:  # several inputs: each named after its header, snake_case
            placements = [Placement(p.carrier, p.name, p.prefix, variable=_snake(p.name)) for p in placements]
        methods.append(AuthMethod(slug=f"apikey-{index}", kind=APIKEY, placements=tuple(placements)))
    for scheme in schemes:
        for position, (flow, described) in enumerate(scheme.get("flows", {}).items()):
            slug = f"oauth-{scheme['name']}" if position == 0 else f"oauth-{scheme['name']}-{flow}"
            oauth: JsonObject = {
                "flow": flow,
                "securitySchemeName": scheme["name"],
                **{key: _absolute(value, base_url) for key, value in described.items() if key != "scopes"},
                "scopes": list(described["scopes"]),
            }
            methods.append(AuthMethod(slug=slug, kind=OAUTH2, label=f"OAuth2 ({scheme['name']})", oauth=oauth))
    return tuple(methods)


def declares_oauth(methods: Sequence[AuthMethod]) -> bool:
    return any(method.kind == OAUTH2 for method in methods)


def discovery_urls(servers: Sequence[JsonObject], base_url: str | None, spec_url: str | None) -> list[str]:
    """Where a spec that declares no oauth2 is asked for OAuth metadata, in upstream's order: the base URL,
    each server URL (its variables at their defaults), their origins, then the spec's own URL."""
    absolute = candidate_urls([base_url, *(_server_url(server) for server in servers)])
    return candidate_urls([*absolute, *(origin_of(url) for url in absolute), spec_url])


def _server_url(server: JsonObject) -> str | None:
    url = server.get("url")
    variables = server.get("variables")
    if not isinstance(url, str):
        return None
    for name, schema in variables.items() if isinstance(variables, dict) else ():
        default = schema.get("default") if isinstance(schema, dict) else None
        if isinstance(default, str):
            url = url.replace(f"{{{name}}}", default)
    return None if "{" in url else url


def discovered_preset(method: AuthMethod) -> JsonObject:
    """A discovered method as the preview's `oauth2Presets` lists it: upstream's preset keys where they apply
    (no `securitySchemeName`: the spec declares none), and the method's own OAuth fields."""
    oauth = dict(method.oauth or {})
    scopes = oauth.pop("scopes", [])
    flow = oauth.get("flow")
    title = "Authorization Code" if flow == "authorizationCode" else "Client Credentials"
    return {
        "label": f"OAuth2 {title} · discovered",
        "template": method.slug,
        **oauth,
        "scopes": {scope: "" for scope in scopes if isinstance(scope, str)},
        "identityScopes": "auto" if flow == "authorizationCode" else False,
    }


def _placement(scheme: JsonObject) -> Placement | None:
    kind = scheme["type"]
    if kind == "http" and scheme.get("scheme", "").lower() == "bearer":
        return Placement("header", "Authorization", "Bearer ")
    if kind == "http" and scheme.get("scheme", "").lower() == "basic":
        return Placement("header", "Authorization", "Basic ")  # the user supplies base64 `user:pass`
    if kind == "apiKey" and scheme.get("in") in CARRIERS and scheme.get("headerName"):
        return Placement(scheme["in"], scheme["headerName"])
    return None  # cookie keys, oauth2 and OpenID Connect place no API key


def _absolute(url: Any, base_url: str | None) -> Any:
    if isinstance(url, str) and base_url and "://" not in url:
        return urljoin(base_url, url)
    return url


def _snake(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") or TOKEN


# -- explicit lists: the canonical shape and the authoring dialect ------------------------------------------


def normalize_methods(raw: Any, *, backfill: bool = True) -> tuple[AuthMethod, ...]:
    """An explicit method list → canonical methods, or `InvalidInput`.

    A slug-less method gets `apikey-<i>` (`i` its position, bumped past taken slugs) when `backfill`, else
    the empty slug that `merge_methods` replaces with a fresh one.
    """
    if not isinstance(raw, list):
        raise InvalidInput("authenticationTemplate must be an array of auth methods")
    if len(raw) > MAX_METHODS:
        raise InvalidInput(f"authenticationTemplate holds at most {MAX_METHODS} auth methods")
    methods = [_method(item, position) for position, item in enumerate(raw)]
    taken = {method.slug for method in methods if method.slug}
    if len(taken) < len([m for m in methods if m.slug]):
        raise InvalidInput("authenticationTemplate has two auth methods with one slug")
    if not backfill:
        return tuple(methods)
    filled = []
    for position, method in enumerate(methods):
        if not method.slug:
            index = position
            while f"apikey-{index}" in taken:
                index += 1
            taken.add(f"apikey-{index}")
            method = AuthMethod(f"apikey-{index}", method.kind, method.label, method.placements, method.oauth)
        filled.append(method)
    return tuple(filled)


def _method(item: Any, position: int) -> AuthMethod:
    where = f"authenticationTemplate[{position}]"
    if not isinstance(item, dict):
        raise InvalidInput(f"{where} must be an object")
    slug = item.get("slug", "")
    if slug is None:
        slug = ""
    if not isinstance(slug, str) or (slug and not _SLUG.fullmatch(slug)):
        raise InvalidInput(f"{where}.slug must match ^[A-Za-z0-9_-]{{1,64}}$")
    label = item.get("label")
    if label is not None and (not isinstance(label, str) or len(label) > MAX_NAME_LENGTH):
        raise InvalidInput(f"{where}.label must be a string of at most {MAX_NAME_LENGTH} characters")
    kind = item.get("kind")
    dialect = item.get("type")
    if kind == NO_AUTH or (kind is None and dialect == NO_AUTH):
        return AuthMethod(slug, NO_AUTH, label)
    if kind == APIKEY:
        placements = item.get("placements")
        if not isinstance(placements, list):
            raise InvalidInput(f"{where}.placements must be an array")
        return AuthMethod(slug, APIKEY, label, _placements([_placement_of(p, where) for p in placements], where))
    if kind == OAUTH2:
        oauth = {key: value for key, value in item.items() if key not in ("slug", "kind", "label")}
        if not isinstance(oauth.get("tokenUrl"), str):
            raise InvalidInput(f"{where}.tokenUrl must be a string")
        return AuthMethod(slug, OAUTH2, label, oauth=oauth)
    if kind is None and dialect == "apiKey":
        placements = []
        for carrier, field in (("header", "headers"), ("query", "queryParams")):
            entries = item.get(field, {})
            if not isinstance(entries, dict):
                raise InvalidInput(f"{where}.{field} must be an object")
            placements.extend(_authored(carrier, name, value, where) for name, value in entries.items())
        return AuthMethod(slug, APIKEY, label, _placements(placements, where))
    raise InvalidInput(f'{where} must have kind "apikey", "oauth2" or "none", or type "apiKey"')


def _placements(placements: list[Placement], where: str) -> tuple[Placement, ...]:
    if len(placements) > MAX_PLACEMENTS:
        raise InvalidInput(f"{where} has more than {MAX_PLACEMENTS} placements")
    return tuple(placements)


def _placement_of(raw: Any, where: str) -> Placement:
    if not isinstance(raw, dict):
        raise InvalidInput(f"{where}.placements[] must be objects")
    carrier = raw.get("carrier")
    if carrier not in CARRIERS:
        raise InvalidInput(f'{where}.placements[].carrier must be "header" or "query"')
    name = _checked_name(raw.get("name"), where)
    fields: dict[str, str | None] = {}
    for key in ("prefix", "variable", "literal"):
        value = raw.get(key)
        if value is not None and (not isinstance(value, str) or len(value) > MAX_VALUE_LENGTH):
            raise InvalidInput(f"{where}.placements[].{key} must be a string of at most {MAX_VALUE_LENGTH} characters")
        fields[key] = value
    if fields["variable"] is not None and not _SLUG.fullmatch(fields["variable"]):
        raise InvalidInput(f"{where}.placements[].variable must match ^[A-Za-z0-9_-]{{1,64}}$")
    return Placement(
        carrier,
        name,
        fields["prefix"] or "",
        variable=None if fields["variable"] == TOKEN else fields["variable"],
        literal=fields["literal"],
    )


def _checked_name(name: Any, where: str) -> str:
    if not isinstance(name, str) or not name or len(name) > MAX_NAME_LENGTH or any(c in name for c in "\r\n\0"):
        raise InvalidInput(f"{where}: a placement name must be a non-empty string of at most {MAX_NAME_LENGTH}")
    return name


def _authored(carrier: str, name: str, value: Any, where: str) -> Placement:
    """One authoring-dialect entry: a literal string, or literal prefixes then exactly one final variable."""
    _checked_name(name, where)
    if isinstance(value, str):
        if len(value) > MAX_VALUE_LENGTH:
            raise InvalidInput(f"{where}: a literal value holds at most {MAX_VALUE_LENGTH} characters")
        return Placement(carrier, name, literal=value)
    if not isinstance(value, list) or not value:
        raise InvalidInput(ONE_VARIABLE)
    *prefixes, last = value
    prefix = ""
    for part in prefixes:
        text = part if isinstance(part, str) else _literal_part(part)
        if text is None:
            raise InvalidInput(ONE_VARIABLE)
        prefix += text
    if not (isinstance(last, dict) and last.get("type") == "variable" and isinstance(last.get("name"), str)):
        raise InvalidInput(ONE_VARIABLE)
    variable = last["name"]
    if not _SLUG.fullmatch(variable) or len(prefix) > MAX_VALUE_LENGTH:
        raise InvalidInput(f"{where}: a variable name must match ^[A-Za-z0-9_-]{{1,64}}$")
    return Placement(carrier, name, prefix, variable=None if variable == TOKEN else variable)


def _literal_part(part: Any) -> str | None:
    if isinstance(part, dict) and part.get("type") == "literal" and isinstance(part.get("value"), str):
        return part["value"]
    return None


# -- configure -------------------------------------------------------------------------------------------


def merge_methods(
    existing: Sequence[AuthMethod], new: Sequence[AuthMethod], mode: str = MERGE
) -> tuple[AuthMethod, ...]:
    """`replace` swaps the list; `merge` replaces same-slug methods in place and appends the others, a
    slug-less one under a fresh `custom_<6 base36>` slug."""
    if mode == REPLACE:
        return tuple(new)
    if mode != MERGE:
        raise InvalidInput('mode must be "merge" or "replace"')
    merged = list(existing)
    for method in new:
        at = next((i for i, old in enumerate(merged) if method.slug and old.slug == method.slug), None)
        if at is not None:
            merged[at] = method
            continue
        if not method.slug:
            taken = {m.slug for m in merged}
            slug = _custom_slug()
            while slug in taken:
                slug = _custom_slug()
            method = AuthMethod(slug, method.kind, method.label, method.placements, method.oauth)
        merged.append(method)
    if len(merged) > MAX_METHODS:
        raise InvalidInput(f"an integration holds at most {MAX_METHODS} auth methods")
    return tuple(merged)


def _custom_slug() -> str:
    return "custom_" + "".join(secrets.choice(_BASE36) for _ in range(6))


# -- the catalog projection ------------------------------------------------------------------------------


def describe_methods(methods: Sequence[AuthMethod]) -> list[JsonObject]:
    """`Integration.authMethods`: `{id, label, kind, template, placements?, oauth?}` per method."""
    described: list[JsonObject] = []
    for method in methods:
        if method.kind == NO_AUTH:
            described.append(
                {
                    "id": method.slug,
                    "label": method.label or "No authentication",
                    "kind": NO_AUTH,
                    "template": method.slug,
                }
            )
            continue
        if method.kind == OAUTH2:
            described.append(
                {
                    "id": method.slug,
                    "label": method.label or "OAuth2",
                    "kind": "oauth",
                    "template": method.slug,
                    "oauth": dict(method.oauth or {}),
                }
            )
            continue
        first = method.placements[0].name if method.placements else None
        label = method.label or (f"API key ({first})" if first else "API key")
        described.append(
            {
                "id": method.slug,
                "label": label,
                "kind": APIKEY,
                "template": method.slug,
                "placements": [canonical_placement(p) for p in method.placements],
            }
        )
    return described


def canonical_placement(placement: Placement) -> JsonObject:
    """A placement as the catalog and the config answer show it: `prefix` always a string, `variable` only
    when it is not `token`, `literal` only when set."""
    shown: JsonObject = {"carrier": placement.carrier, "name": placement.name, "prefix": placement.prefix}
    if placement.variable is not None and placement.variable != TOKEN:
        shown["variable"] = placement.variable
    if placement.literal is not None:
        shown["literal"] = placement.literal
    return shown
