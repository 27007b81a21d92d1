"""Settings precedence: flag > environment > TOML file > default, with clear errors."""

from pathlib import Path

import pytest

from executor_mcp.app import UnsafeBind, ensure_safe_bind, executions_per_account
from executor_mcp.config import (
    DEFAULT_PORT,
    ConfigError,
    Settings,
    given_options,
    is_loopback,
    load_settings,
    with_data_dir_facts,
)
from executor_mcp.sandbox.pool import WorkerPool


def test_defaults() -> None:
    settings = load_settings({}, environ={})
    assert (settings.host, settings.port, settings.shutdown_grace) == ("127.0.0.1", DEFAULT_PORT, 10.0)
    assert settings.data_dir.name == "executor-mcp"


def test_precedence(tmp_path: Path) -> None:
    config = tmp_path / "executor.toml"
    config.write_text('port = 1111\nshutdown-grace = 3\ndata_dir = "/from/file"\nlog-level = "debug"\n')
    environ = {"EXECUTOR_MCP_PORT": "2222", "EXECUTOR_MCP_SHUTDOWN_GRACE": "4.5", "EXECUTOR_MCP_CONFIG": str(config)}
    settings = load_settings({"port": "3333"}, environ=environ)
    assert settings.port == 3333
    assert settings.shutdown_grace == 4.5
    assert settings.data_dir == Path("/from/file")
    assert settings.log_level == "debug"


def test_a_command_takes_the_servers_data_dir_facts_unless_it_sets_them(tmp_path: Path) -> None:
    """A setting given by a flag, the environment or the config file is the command's own, and wins; the rest
    of the data-dir facts come from what the server recorded, and nothing else does."""
    config = tmp_path / "executor.toml"
    config.write_text("allow-stdio-mcp = false\n")
    environ = {"EXECUTOR_MCP_CONFIG": str(config)}
    given = given_options({"port": "1", "allow_local_network": None}, environ=environ)
    assert given == {"port", "allow_stdio_mcp"}
    recorded = {"allow_local_network": True, "allow_stdio_mcp": True, "port": 9}
    settings = with_data_dir_facts(load_settings({"port": "1"}, environ=environ), given, recorded)
    assert (settings.allow_local_network, settings.allow_stdio_mcp, settings.port) == (True, False, 1)
    assert with_data_dir_facts(Settings(), frozenset(), {"allow_local_network": "yes"}).allow_local_network is False


def test_config_flag_beats_config_environment(tmp_path: Path) -> None:
    chosen, ignored = tmp_path / "chosen.toml", tmp_path / "ignored.toml"
    chosen.write_text("port = 1\n")
    ignored.write_text("port = 2\n")
    settings = load_settings({"config": str(chosen)}, environ={"EXECUTOR_MCP_CONFIG": str(ignored)})
    assert settings.port == 1


@pytest.mark.parametrize(
    ("flags", "environ", "message"),
    [
        ({"port": "http"}, {}, "^--port: invalid int value 'http'$"),  # short: not Python's "invalid literal"
        ({"shutdown_grace": "soon"}, {}, "^--shutdown-grace: invalid float value 'soon'$"),
        ({"port": "70000"}, {}, "must be between 0 and 65535"),
        ({}, {"EXECUTOR_MCP_SHUTDOWN_GRACE": "-1"}, "EXECUTOR_MCP_SHUTDOWN_GRACE: invalid value '-1'"),
        ({"log_level": "loud"}, {}, "must be one of debug, info, warning, error"),
    ],
)
def test_bad_values_name_their_source(flags: dict, environ: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(flags, environ=environ)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("prot = 1\n", "unknown option 'prot'"),
        ("port = [1]\n", "expected a string or a number, got list"),
        ("port = true\n", "expected a string or a number, got bool"),
        ("port = \n", "not valid TOML"),
    ],
)
def test_bad_config_files(tmp_path: Path, content: str, message: str) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(content)
    with pytest.raises(ConfigError, match=message):
        load_settings({"config": str(config)}, environ={})


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_settings({"config": str(tmp_path / "absent.toml")}, environ={})


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("10.0.0.1", False),
        ("example.org", False),
    ],
)
def test_loopback_detection(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
    assert Settings(host=host).loopback is loopback


def test_jwt_auth_needs_exactly_one_key_source(tmp_path: Path) -> None:
    secret = tmp_path / "key"
    secret.write_text("s3cret")
    with pytest.raises(ConfigError, match="exactly one of --jwt-secret-file and --jwks-url"):
        load_settings({"auth": "jwt"}, environ={})
    with pytest.raises(ConfigError, match="exactly one of"):
        load_settings({"auth": "jwt", "jwt_secret_file": str(secret), "jwks_url": "https://x/jwks"}, environ={})
    with pytest.raises(ConfigError, match="need --auth jwt"):
        load_settings({"jwks_url": "https://x/jwks"}, environ={})
    settings = load_settings({"auth": "jwt", "jwt_secret_file": str(secret)}, environ={})
    assert settings.jwt_secret_file == secret


def test_repeatable_authorization_servers(tmp_path: Path) -> None:
    flags = load_settings({"authorization_server": ["https://a.test", "https://b.test/"]}, environ={})
    assert flags.authorization_server == ("https://a.test", "https://b.test")
    environ = load_settings({}, environ={"EXECUTOR_MCP_AUTHORIZATION_SERVER": "https://a.test,https://c.test"})
    assert environ.authorization_server == ("https://a.test", "https://c.test")
    config = tmp_path / "c.toml"
    config.write_text('authorization-server = ["https://d.test"]\nauth = "none"\n')
    assert load_settings({"config": str(config)}, environ={}).authorization_server == ("https://d.test",)
    with pytest.raises(ConfigError, match="must be an http:// or https:// URL"):
        load_settings({"authorization_server": ["ftp://nope"]}, environ={})


def test_only_auth_none_is_confined_to_loopback(tmp_path: Path) -> None:
    secret = tmp_path / "key"
    secret.write_text("s3cret")
    with pytest.raises(UnsafeBind):
        ensure_safe_bind(Settings(host="0.0.0.0"))
    ensure_safe_bind(Settings(host="0.0.0.0", auth="jwt", jwt_secret_file=secret))


def test_relative_paths_in_a_config_file_are_relative_to_it(tmp_path: Path) -> None:
    config = tmp_path / "conf" / "executor.toml"
    config.parent.mkdir()
    config.write_text('data-dir = "state"\nauth = "jwt"\njwt-secret-file = "/etc/key"\n')
    settings = load_settings({"config": str(config)}, environ={})
    assert settings.data_dir == tmp_path / "conf" / "state"
    assert settings.jwt_secret_file == Path("/etc/key")
    from_flag = load_settings({"config": str(config), "data_dir": "here"}, environ={})
    assert from_flag.data_dir == Path("here")


def test_the_per_account_execution_limit_defaults_by_auth_mode() -> None:
    """With bearers accounts are protected from each other; `--auth none` has one principal to protect from nobody,
    so it may have what the pool lets one account hold (all but the reserve kept for accounts holding none)."""
    jwt = Settings(auth="jwt", jwks_url="https://id.example/jwks")
    assert executions_per_account(jwt, WorkerPool(max_workers=64)) == 16
    assert executions_per_account(Settings(), WorkerPool(max_workers=64)) == 56
    assert executions_per_account(Settings(), WorkerPool(max_workers=8)) == 7
    assert executions_per_account(Settings(), WorkerPool(max_workers=1)) == 1
    explicit = Settings(auth="jwt", jwks_url="https://id.example/jwks", max_executions_per_account=3)
    assert executions_per_account(explicit, WorkerPool(max_workers=64)) == 3


def test_secret_env_names_from_every_source(tmp_path: Path) -> None:
    flags = load_settings({"secret_env": ["DEPLOY_TOKEN", " EXECUTOR_MCP_SECRET_X "]}, environ={})
    assert flags.secret_env == ("DEPLOY_TOKEN", "EXECUTOR_MCP_SECRET_X")
    environ = load_settings({}, environ={"EXECUTOR_MCP_SECRET_ENV": "A_TOKEN,,B_TOKEN"})
    assert environ.secret_env == ("A_TOKEN", "B_TOKEN")
    config = tmp_path / "c.toml"
    config.write_text('secret-env = ["C_TOKEN"]\n')
    assert load_settings({"config": str(config)}, environ={}).secret_env == ("C_TOKEN",)
    assert load_settings({"config": str(config), "secret_env": ["D"]}, environ={}).secret_env == ("D",)
    assert load_settings({}, environ={}).secret_env == ()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("1TOKEN", "must be an environment variable name"),
        ("MY-TOKEN", "must be an environment variable name"),
        ("A=B", "must be an environment variable name"),
        ("EXECUTOR_MCP_SECRET_KEY", "must not be EXECUTOR_MCP_SECRET_KEY or another setting of this server"),
        ("EXECUTOR_MCP_SECRET_ENV", "another setting of this server"),
        ("EXECUTOR_MCP_JWT_SECRET_FILE", "another setting of this server"),
        ("EXECUTOR_MCP_CONFIG", "another setting of this server"),
        ("EXECUTOR_MCP_ANYTHING", "another setting of this server"),
    ],
)
def test_secret_env_refuses_what_is_not_a_name_or_is_the_servers_own(name: str, message: str) -> None:
    with pytest.raises(ConfigError, match=f"--secret-env: invalid value '{name}': .*{message}"):
        load_settings({"secret_env": [name]}, environ={})
    with pytest.raises(ConfigError, match="EXECUTOR_MCP_SECRET_ENV: invalid value"):
        load_settings({}, environ={"EXECUTOR_MCP_SECRET_ENV": name})


def test_secrets_dir_from_every_source(tmp_path: Path) -> None:
    assert load_settings({}, environ={}).secrets_dir is None
    assert load_settings({"secrets_dir": "/run/secrets"}, environ={}).secrets_dir == Path("/run/secrets")
    environ = {"EXECUTOR_MCP_SECRETS_DIR": "/env/secrets"}
    assert load_settings({}, environ=environ).secrets_dir == Path("/env/secrets")
    assert load_settings({"secrets_dir": "/flag"}, environ=environ).secrets_dir == Path("/flag")
    config = tmp_path / "conf" / "executor.toml"
    config.parent.mkdir()
    config.write_text('secrets_dir = "secrets"\n')
    assert load_settings({"config": str(config)}, environ={}).secrets_dir == tmp_path / "conf" / "secrets"
    with pytest.raises(ConfigError, match="--secrets-dir: invalid value ' ': must not be empty"):
        load_settings({"secrets_dir": " "}, environ={})


def test_there_is_no_flag_for_the_secret_key() -> None:
    """argv is visible to every user of the machine: the key comes from the environment or the key file."""
    from executor_mcp.config import OPTIONS

    assert all("key" not in option.name for option in OPTIONS)


def test_a_bad_database_url_is_refused_without_quoting_its_password() -> None:
    for flags, environ, source in (
        ({"database_url": "mysql://operator:hunter2@db/executor"}, {}, "--database-url"),
        ({}, {"EXECUTOR_MCP_DATABASE_URL": "mysql://operator:hunter2@db/executor"}, "EXECUTOR_MCP_DATABASE_URL"),
    ):
        with pytest.raises(ConfigError) as refused:
            load_settings(flags, environ=environ)
        assert str(refused.value) == f"{source}: invalid value: must be a postgresql:// URL"
    # A URL libpq cannot parse is refused here too, in our words: libpq's would quote parts of it.
    for malformed in ("postgresql://operator:hunter2@db/x?bogus=1", "postgresql://operator:hunter2@db/x?sslmode"):
        with pytest.raises(ConfigError) as refused:
            load_settings({"database_url": malformed}, environ={})
        assert "hunter2" not in str(refused.value)
        assert str(refused.value).startswith("--database-url: invalid value: must be a PostgreSQL connection URI")
