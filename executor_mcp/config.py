"""Server settings from flags, `EXECUTOR_MCP_*` environment variables and an optional TOML file.

Precedence is flag > environment > file > default, one option at a time. Every option is declared
once in `OPTIONS`, which drives all three sources, so a name can never exist in one and not another.
In the TOML file an option's key is its flag name without the dashes (`data-dir = "..."`); the
underscore spelling (`data_dir`) is accepted too, and a relative path there is relative to the file.
Unknown keys are an error: a typo must not silently fall back to a default.
"""

import ipaddress
import os
import re
import tomllib
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
import platformdirs

ENV_PREFIX = "EXECUTOR_MCP_"
DEFAULT_PORT = 4788
DEFAULT_EXECUTIONS_PER_ACCOUNT = 16
DEFAULT_MAX_RESPONSE_BYTES = 10 * 1024 * 1024
DEFAULT_MAX_SPEC_BYTES = 32 * 1024 * 1024
# Operations of one OpenAPI document: GitHub's REST description has 1,223; each costs memory and search time
# for as long as the integration exists.
DEFAULT_MAX_OPERATIONS = 20_000
# The master key of the encrypted secret store: an environment variable or `<data-dir>/secret.key`, never a
# flag (argv is visible to every user of the machine).
SECRET_KEY_ENV = ENV_PREFIX + "SECRET_KEY"
# Environment variables the `env` secret provider reads without being listed with --secret-env.
SECRET_ENV_PREFIX = ENV_PREFIX + "SECRET_"


class ConfigError(ValueError):
    """A setting that cannot be used; the message names the option and its source."""


def default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("executor-mcp", appauthor=False))


@attrs.frozen
class Settings:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    data_dir: Path = attrs.field(factory=default_data_dir)
    shutdown_grace: float = 10.0
    log_level: str = "info"
    log_format: str = "text"
    metrics_token_file: Path | None = None
    execution_timeout: float = 300.0
    execution_cpu_limit: float = 60.0
    execution_memory_limit: int = 64
    execution_max_timers: int = 10_000
    execution_max_tool_calls: int = 1_000
    execution_journal_limit: int = 64
    sandbox_workers: int = 64
    max_executions_per_account: int | None = None  # default: `app.executions_per_account`
    max_executions_per_org: int | None = None
    tool_calls_per_minute_per_org: int | None = None
    tool_calls_per_minute_per_account: int | None = None
    tool_calls_per_minute_per_connection: int | None = None
    otlp_endpoint: str | None = None
    approval_window: float = 240.0
    session_timeout: float = 300.0
    paused_session_idle_timeout: float = 540.0
    max_sessions_per_user: int = 256
    session_retention: float = 30 * 24 * 3600.0
    audit_retention: float = 30 * 24 * 3600.0
    auth: str = "none"
    public_url: str | None = None
    jwt_secret_file: Path | None = None
    jwks_url: str | None = None
    jwt_issuer: str | None = None
    jwt_audience: str | None = None
    org_admin_claim: tuple[str, str] | None = None
    oidc_issuer: str | None = None
    oidc_client_id: str | None = None
    oidc_client_secret_file: Path | None = None
    oidc_allowed_domain: tuple[str, ...] = ()
    oidc_account_claim: str = "email"
    oidc_org_claim: str = "org"
    authorization_server: tuple[str, ...] = ()
    allowed_origin: tuple[str, ...] = ()
    allowed_host: tuple[str, ...] = ()
    allow_local_network: bool = False
    allow_stdio_mcp: bool = False
    integration_max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    integration_max_spec_bytes: int = DEFAULT_MAX_SPEC_BYTES
    integration_max_operations: int = DEFAULT_MAX_OPERATIONS
    secret_env: tuple[str, ...] = ()
    secrets_dir: Path | None = None
    database_url: str | None = None
    instance_id: str | None = None
    database_pool_size: int = 10

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _NotANumber(ValueError):
    """Text that is no number at all (`--port abc`), said in a few words (`invalid int value 'abc'`) rather than
    in Python's (`invalid literal for int() with base 10: 'abc'`)."""


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise _NotANumber(f"invalid int value {text!r}") from None


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise _NotANumber(f"invalid float value {text!r}") from None


def _port(text: str) -> int:
    port = _int(text)
    if not 0 <= port <= 65535:
        raise ValueError("must be between 0 and 65535")
    return port


def _seconds(text: str) -> float:
    value = _float(text)
    if value < 0 or value != value:
        raise ValueError("must be a non-negative number of seconds")
    return value


def _positive_seconds(text: str) -> float:
    value = _seconds(text)
    if value == 0:
        raise ValueError("must be more than 0 seconds")
    return value


def _positive_int(text: str) -> int:
    value = _int(text)
    if value < 1:
        raise ValueError("must be a whole number of at least 1")
    return value


def _heap_mib(text: str) -> int:
    value = _positive_int(text)
    if value > 512:
        raise ValueError("must be at most 512 (MiB)")
    return value


def _auth(text: str) -> str:
    if text not in {"none", "jwt"}:
        raise ValueError("must be none or jwt")
    return text


def _url(text: str) -> str:
    parsed = urllib.parse.urlsplit(text.strip())
    if parsed.scheme not in {"http", "https"} or not parsed.netloc:
        raise ValueError("must be an http:// or https:// URL")
    return text.strip().rstrip("/")


def _database_url(text: str) -> str:
    parsed = urllib.parse.urlsplit(text.strip())
    if parsed.scheme not in {"postgresql", "postgres"}:
        raise ValueError("must be a postgresql:// URL")
    # What libpq will refuse when it connects, refused now, in our words: its own quote parts of the URL.
    # Imported here, not at the top: only a command given a database pays for the driver.
    import psycopg.conninfo

    try:
        psycopg.conninfo.conninfo_to_dict(text.strip())
    except psycopg.Error:
        raise ValueError(
            "must be a PostgreSQL connection URI (postgresql://USER:PASSWORD@HOST:PORT/DATABASE)"
        ) from None
    return text.strip()


# An instance id: lower-case letters, digits and inner dashes, up to 32; safe in a header, a file name and a
# proxy's map (`sessions/ids.py` puts it in session ids).
INSTANCE_ID = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?")


def _instance_id(text: str) -> str:
    if not INSTANCE_ID.fullmatch(text.strip()):
        raise ValueError("must be 1 to 32 lower-case letters, digits and inner dashes")
    return text.strip()


def _origin(text: str) -> str:
    parsed = urllib.parse.urlsplit(text.strip())
    if parsed.scheme not in {"http", "https"} or not parsed.netloc or parsed.path not in {"", "/"}:
        raise ValueError("must be an origin: http:// or https://, a host and optionally a port, no path")
    return text.strip().rstrip("/")


def _host_name(text: str) -> str:
    value = text.strip()
    parsed = urllib.parse.urlsplit("//" + value)
    try:
        parsed.port  # noqa: B018 (raises on a malformed port)
    except ValueError:
        raise ValueError("must be a host name, optionally with :port") from None
    if not parsed.hostname or parsed.path or parsed.query or parsed.fragment or "@" in value or " " in value:
        raise ValueError("must be a host name, optionally with :port")
    return value


def _domain(text: str) -> str:
    value = text.strip().lower().lstrip("@")
    if not value or any(char in value for char in "/:@ ") or "." not in value:
        raise ValueError("must be an email domain, like example.com")
    return value


def _text(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be empty")
    return text.strip()


def _claim(text: str) -> tuple[str, str]:
    name, equals, value = text.strip().partition("=")
    if not equals or not name.strip() or not value.strip():
        raise ValueError("must be NAME=VALUE, e.g. org_role=admin")
    return name.strip(), value.strip()


def _switch(text: str) -> bool:
    value = text.strip().lower()
    if value not in {"true", "false", "1", "0", "yes", "no"}:
        raise ValueError("must be true or false")
    return value in {"true", "1", "yes"}


def _directory(text: str) -> Path:
    if not text.strip():
        raise ValueError("must not be empty")  # an empty path would be the working directory
    return Path(text)


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # what `fullmatch`es is a portable environment variable name


def _secret_env_name(text: str) -> str:
    name = text.strip()
    if not ENV_NAME.fullmatch(name):
        raise ValueError("must be an environment variable name (letters, digits and _, not starting with a digit)")
    if is_reserved_env(name) or (name.startswith(ENV_PREFIX) and not name.startswith(SECRET_ENV_PREFIX)):
        raise ValueError(f"must not be {SECRET_KEY_ENV} or another setting of this server ({ENV_PREFIX}*)")
    return name


def is_reserved_env(name: str) -> bool:
    """Whether `name` is the server's own: the secret store's master key or a configuration variable. No
    secret provider reads these, whatever the allow-list says, so a connection cannot carry them off."""
    return name in {SECRET_KEY_ENV, CONFIG_ENV} or name in {option.env for option in OPTIONS}


def _log_level(text: str) -> str:
    if text.lower() not in {"debug", "info", "warning", "error"}:
        raise ValueError("must be one of debug, info, warning, error")
    return text.lower()


def _log_format(text: str) -> str:
    if text.lower() not in {"text", "json"}:
        raise ValueError("must be text or json")
    return text.lower()


@attrs.frozen
class Option:
    """One option: its flag, environment variable and TOML key derive from `name`, its default is `Settings`'."""

    name: str
    parse: Callable[[str], Any]
    help: str  # what it does; the default is not repeated here (`config_reference.default_text` renders it)
    repeatable: bool = False  # a flag given again adds a value; env is comma-separated; TOML is a list
    switch: bool = False  # a flag with no value turns it on; env and TOML say true or false
    metavar: str | None = None  # the value's placeholder in help, when the parser's (`_METAVARS`) says too little
    default: str | None = None  # the default in words, when `Settings`' value is computed or says too little
    # It decides what the data dir's records may do: one fact for every command on the data dir (`DATA_DIR_FACTS`).
    data_dir_fact: bool = False
    # Its value may hold a credential (a database URL's password): an error about it never quotes it.
    secret: bool = False

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def toml_key(self) -> str:
        return self.name.replace("_", "-")

    @property
    def placeholder(self) -> str:
        """What help shows for the value: `--port PORT`, `--auth {none,jwt}`."""
        return self.metavar or _METAVARS.get(self.parse) or self.name.rsplit("_", 1)[-1].upper()


_METAVARS: dict[Callable[[str], Any], str] = {
    _port: "PORT",
    _seconds: "SECONDS",
    _positive_seconds: "SECONDS",
    _positive_int: "N",
    _heap_mib: "MIB",
    _auth: "{none,jwt}",
    _log_level: "{debug,info,warning,error}",
    _log_format: "{text,json}",
    _url: "URL",
    _database_url: "URL",
    _origin: "ORIGIN",
    _host_name: "HOST[:PORT]",
    _text: "TEXT",
    _claim: "NAME=VALUE",
    _directory: "DIR",
    _secret_env_name: "NAME",
    Path: "PATH",
}

OPTIONS = (
    Option("host", str, "address to bind; a non-loopback address needs --auth jwt", metavar="HOST"),
    Option("port", _port, "port to bind; 0 picks a free one (the announced URL shows it)"),
    Option(
        "data_dir",
        Path,
        "where session files and the control plane live",
        metavar="DIR",
        default="the platform's user data dir, e.g. ~/.local/share/executor-mcp",
    ),
    Option("shutdown_grace", _seconds, "seconds in-flight requests get to finish on shutdown"),
    Option("log_level", _log_level, "the least severe log lines written to stderr"),
    Option("log_format", _log_format, "text, or json: one object per line with the request's context"),
    Option(
        "metrics_token_file",
        Path,
        "file holding the bearer token /metrics requires (surrounding whitespace trimmed); without one, /metrics "
        "is open with --auth none and refused with --auth jwt",
        metavar="FILE",
    ),
    Option(
        "execution_timeout",
        _positive_seconds,
        "seconds of sandbox wall clock per execution, paused while a tool call is in flight",
    ),
    Option("execution_cpu_limit", _positive_seconds, "seconds of CPU per execution"),
    Option("execution_memory_limit", _heap_mib, "MiB of JavaScript heap per execution, at most 512"),
    Option(
        "execution_max_timers",
        _positive_int,
        "pending setTimeout timers per execution; one more throws a RangeError in the code",
    ),
    Option(
        "execution_max_tool_calls",
        _positive_int,
        "tool calls in flight per execution; one more rejects with a RangeError",
    ),
    Option(
        "execution_journal_limit",
        _positive_int,
        "MiB an execution may observe from outside (tool results, timers, clock readings), journalled so that a "
        "pause survives a restart; past it the execution ends",
        metavar="MIB",
    ),
    Option("sandbox_workers", _positive_int, "most sandbox worker processes at once (one per running execution)"),
    Option(
        "max_executions_per_account",
        _positive_int,
        "executions one account may have running or paused at once in an org, on each instance; set, it is also "
        "counted across instances on --database-url; one more is refused",
        default=f"{DEFAULT_EXECUTIONS_PER_ACCOUNT} with --auth jwt; with --auth none, what the pool gives its one "
        "account (56 of 64 workers)",
    ),
    Option(
        "max_executions_per_org",
        _positive_int,
        "executions one org's accounts may have running or paused at once, together (across instances on "
        "--database-url); one more is refused",
        default="none",
    ),
    Option(
        "tool_calls_per_minute_per_org",
        _positive_int,
        "tool calls one org may make a minute (a burst of as many, then evenly); one more answers rate_limited",
        default="none",
    ),
    Option(
        "tool_calls_per_minute_per_account",
        _positive_int,
        "tool calls one account in an org may make a minute; one more answers rate_limited",
        default="none",
    ),
    Option(
        "tool_calls_per_minute_per_connection",
        _positive_int,
        "tool calls made at one connection a minute; one more answers rate_limited",
        default="none",
    ),
    Option(
        "otlp_endpoint",
        _url,
        "send OpenTelemetry traces over OTLP/HTTP to this collector (its /v1/traces): request, MCP method, "
        "execution, tool call, outbound request",
        metavar="URL",
        default="none: no traces",
    ),
    Option("approval_window", _positive_seconds, "seconds a paused execution waits for its approval"),
    Option(
        "session_timeout",
        _positive_seconds,
        "idle seconds before a session's runtime is disposed (the session stays)",
    ),
    Option(
        "paused_session_idle_timeout",
        _positive_seconds,
        "idle seconds a runtime with a paused execution is kept",
    ),
    Option(
        "max_sessions_per_user",
        _positive_int,
        "sessions per account in an org; one more evicts the least recently active",
    ),
    Option("session_retention", _positive_seconds, "idle seconds before a stored session is wiped"),
    Option("audit_retention", _positive_seconds, "seconds an audit record is kept"),
    Option("auth", _auth, "none (loopback only, one implicit local principal) or jwt (bearer tokens, API keys)"),
    Option(
        "public_url",
        _url,
        "the URL clients reach this server at, used in the 401 challenge and the metadata",
        default="http://HOST:PORT of the bind",
    ),
    Option("jwt_secret_file", Path, "file holding the HS256 key (surrounding whitespace trimmed)", metavar="FILE"),
    Option("jwks_url", _url, "JWKS URL for RS256/ES256 tokens (exactly one of this and --jwt-secret-file)"),
    Option("jwt_issuer", _text, "required `iss` of tokens"),
    Option("jwt_audience", _text, "required `aud` of tokens"),
    Option(
        "org_admin_claim",
        _claim,
        "e.g. org_role=admin: only tokens with this claim (and API keys made with --admin) change org rules",
        default="none: every member of the org",
    ),
    Option("oidc_issuer", _url, "an OpenID Connect provider the console signs people in with"),
    Option("oidc_client_id", _text, "the console's client id at that provider"),
    Option("oidc_client_secret_file", Path, "file holding the console's client secret there", metavar="FILE"),
    Option(
        "oidc_allowed_domain",
        _domain,
        "an email domain whose verified accounts may sign in with the provider (repeatable; at least one)",
        repeatable=True,
    ),
    Option("oidc_account_claim", _text, "the ID-token claim naming the account"),
    Option("oidc_org_claim", _text, "the ID-token claim naming the account's organization"),
    Option(
        "authorization_server",
        _url,
        "an OAuth authorization server to advertise in the protected-resource metadata (repeatable)",
        repeatable=True,
    ),
    Option(
        "allowed_origin",
        _origin,
        "with --auth none, a browser Origin allowed besides the server's own (and, on loopback, "
        "http://127.0.0.1:PORT, http://localhost:PORT and http://[::1]:PORT) (repeatable)",
        repeatable=True,
    ),
    Option(
        "allowed_host",
        _host_name,
        "with --auth none, a Host header allowed besides the bind and public URL hosts (and, on loopback, "
        "127.0.0.1, localhost and [::1] with the bound port) (repeatable)",
        repeatable=True,
    ),
    Option(
        "allow_local_network",
        _switch,
        "let integrations reach loopback, private and link-local addresses (off: the SSRF guard refuses them; "
        "metadata addresses stay refused)",
        switch=True,
        data_dir_fact=True,
    ),
    Option(
        "allow_stdio_mcp",
        _switch,
        "let MCP integrations run local commands as stdio MCP servers (each runs with an empty environment plus "
        "the variables its connection names)",
        switch=True,
        data_dir_fact=True,
    ),
    Option(
        "integration_max_response_bytes",
        _positive_int,
        "bytes of an integration's buffered response, past which the call fails (upstream_response_too_large)",
        metavar="BYTES",
    ),
    Option(
        "integration_max_spec_bytes",
        _positive_int,
        "bytes of an OpenAPI document, past which it is refused",
        metavar="BYTES",
    ),
    Option(
        "integration_max_operations",
        _positive_int,
        "operations of an OpenAPI document, past which it is refused",
        metavar="N",
    ),
    Option(
        "secret_env",
        _secret_env_name,
        f"an environment variable the env secret provider may read besides {SECRET_ENV_PREFIX}* (repeatable)",
        repeatable=True,
    ),
    Option(
        "database_url",
        _database_url,
        "a PostgreSQL database for the control plane, shared by several instances; a password in it is better "
        "given by the environment or a TOML file than by a flag",
        default="none: the data dir's control.mdb",
        secret=True,
    ),
    Option(
        "instance_id",
        _instance_id,
        "this instance's name among several on one --database-url, stable across its restarts; its session ids "
        "name it, so a proxy routes by them",
        metavar="ID",
        default="none (needed with --database-url)",
    ),
    Option("database_pool_size", _positive_int, "connections this instance keeps to --database-url at most"),
    Option("secrets_dir", _directory, "a directory of secret files the file secret provider reads (e.g. /run/secrets)"),
)
CONFIG_ENV = ENV_PREFIX + "CONFIG"
# Settings that decide what the data dir's records may do. The server records the values it runs with in the
# data dir's control plane; an admin command on the data dir takes them unless it sets them itself
# (`with_data_dir_facts`), so a record the server may use is one the command may make, and the other way round.
DATA_DIR_FACTS = tuple(option.name for option in OPTIONS if option.data_dir_fact)


def data_dir_facts(settings: Settings) -> dict[str, Any]:
    """What the server records of its settings for the commands on its data dir."""
    return {name: getattr(settings, name) for name in DATA_DIR_FACTS}


def with_data_dir_facts(settings: Settings, given: frozenset[str], recorded: Mapping[str, object]) -> Settings:
    """A command's `settings`, with each data-dir fact it does not set itself (`given`) taken from `recorded`
    (what the data dir's server runs with); a recorded value of another type is ignored."""
    defaults = attrs.fields_dict(Settings)
    # Each value has its field's type (checked against the default's); a mapping of many fields can only say Any.
    taken: dict[str, Any] = {
        name: value
        for name, value in recorded.items()
        if name in DATA_DIR_FACTS and name not in given and type(value) is type(defaults[name].default)
    }
    return attrs.evolve(settings, **taken)


def load_settings(flags: Mapping[str, str | None], environ: Mapping[str, str] = os.environ) -> Settings:
    """Merge the sources; `flags` maps option names to the raw text given on the command line."""
    return _checked(Settings(**_given(flags, environ)))


def given_options(flags: Mapping[str, str | None], environ: Mapping[str, str] = os.environ) -> frozenset[str]:
    """The options a command sets itself, by a flag, the environment or the config file (the rest default)."""
    return frozenset(_given(flags, environ))


def _given(flags: Mapping[str, str | None], environ: Mapping[str, str]) -> dict[str, Any]:
    config_path = flags.get("config") or environ.get(CONFIG_ENV)
    file_values = _read_toml(Path(config_path)) if config_path else {}
    values: dict[str, Any] = {}
    for option in OPTIONS:
        for source, raw in (
            (option.flag, flags.get(option.name)),
            (option.env, environ.get(option.env)),
            (f"{config_path}: {option.name.replace('_', '-')}", file_values.get(option.name)),
        ):
            if raw is not None:
                values[option.name] = (
                    _parse_repeated(option, source, raw) if option.repeatable else _parse(option, source, raw)
                )
                break
    return values


def _parse_repeated(option: Option, source: str, raw: object) -> tuple[Any, ...]:
    items = raw.split(",") if isinstance(raw, str) else raw
    if not isinstance(items, list | tuple):
        raise ConfigError(f"{source}: expected a list of strings")
    return tuple(_parse(option, source, item) for item in items if not isinstance(item, str) or item.strip())


def check_shared_database(settings: Settings, environ: Mapping[str, str], *, serving: bool) -> None:
    """What several instances on one database must agree on, checked before anything is opened: the key that
    seals the shared secrets (a data dir's own key file would seal what no other instance can open), and, for
    a server, a name its session ids carry."""
    if settings.database_url is None:
        return
    if not environ.get(SECRET_KEY_ENV, "").strip():
        raise ConfigError(
            f"--database-url needs {SECRET_KEY_ENV}: every instance and admin command seals and opens the shared "
            "secrets with that one key"
        )
    if serving and settings.instance_id is None:
        raise ConfigError(
            "--database-url needs --instance-id: give each instance on the database its own stable name "
            "(its session ids carry it, so a proxy routes by them)"
        )


def _checked(settings: Settings) -> Settings:
    """Rules that span options."""
    if settings.auth == "jwt" and (settings.jwt_secret_file is None) == (settings.jwks_url is None):
        raise ConfigError("--auth jwt needs exactly one of --jwt-secret-file and --jwks-url")
    if settings.auth == "none" and (settings.jwt_secret_file or settings.jwks_url):
        raise ConfigError("--jwt-secret-file and --jwks-url need --auth jwt")
    if settings.auth == "none" and settings.org_admin_claim:
        raise ConfigError("--org-admin-claim needs --auth jwt (the local principal of --auth none is an admin)")
    oidc = (settings.oidc_issuer, settings.oidc_client_id, settings.oidc_client_secret_file)
    if any(value is not None for value in oidc) or settings.oidc_allowed_domain:
        if any(value is None for value in oidc) or not settings.oidc_allowed_domain:
            raise ConfigError(
                "single sign-on needs --oidc-issuer, --oidc-client-id, --oidc-client-secret-file and at least one "
                "--oidc-allowed-domain"
            )
        if settings.auth != "jwt":
            raise ConfigError("--oidc-issuer needs --auth jwt (with --auth none the console has no sign-in)")
    return settings


def _parse(option: Option, source: str, raw: object) -> Any:
    if isinstance(raw, bool) and option.switch:
        return raw
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise ConfigError(f"{source}: expected a string or a number, got {type(raw).__name__}")
    text = raw if isinstance(raw, str) else str(raw)
    try:
        return option.parse(text)
    except _NotANumber as exc:
        raise ConfigError(f"{source}: {exc}") from None
    except ValueError as exc:
        quoted = "" if option.secret else f" {text!r}"
        raise ConfigError(f"{source}: invalid value{quoted}: {exc}") from None


_FILE_PATHS = frozenset({"data_dir", "jwt_secret_file", "metrics_token_file", "secrets_dir", "oidc_client_secret_file"})


def _read_toml(path: Path) -> dict[str, object]:
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    known = {option.name for option in OPTIONS}
    values: dict[str, object] = {}
    for key, value in document.items():
        name = key.replace("-", "_")
        if name not in known:
            raise ConfigError(f"config file {path}: unknown option {key!r}")
        if name in _FILE_PATHS and isinstance(value, str) and not Path(value).expanduser().is_absolute():
            value = str(path.parent / value)  # a path in a config file is relative to that file
        values[name] = value
    return values
