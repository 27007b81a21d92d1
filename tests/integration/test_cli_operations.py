"""The operator's command line as real subprocesses: `version`, `doctor` on good and broken data dirs and beside a
running server, `--json` on every admin listing (one naming rule, never a secret) and a header on its text, empty
listings, help with metavars, short refusals of bad options and values, and a closed pipe ending a listing quietly."""

import json
import os
import platform
import re
import socket
import subprocess
import time
from pathlib import Path

import httpx
import lmdb
import pytest
import trio

from executor_mcp import __version__
from executor_mcp.cli import CLOSED_PIPE_STATUS
from executor_mcp.storage.control import CONTROL_FILE, ControlPlane
from executor_mcp.storage.records import Owner, SessionRecord, encode
from tests.conftest import ServerUnderTest
from tests.integration.test_integrations_api import items_spec
from tests.mcp_http import open_session
from tests.process import command, server_process

SECRET = "sk-ops-0f1e2d3c4b5a6978"
MASTER_KEY = "doctor-never-prints-this-master-key"
CLI_BOUND = 60
CHECKS = ["data-dir", "control-plane", "permissions", "port", "sandbox", "clock"]
LISTINGS = [
    ("orgs", "list"),
    ("keys", "list"),
    ("sessions", "list"),
    ("policies", "list", "--org", "local"),
    ("toolkits", "list", "--org", "local"),
    ("integrations", "list"),
    ("connections", "list"),
]
HEADERS = {
    "orgs": ["ORG", "STATE", "FIRST", "SEEN", "CHANGED"],
    "keys": ["ID", "STATE", "ROLE", "ACCOUNT", "ORG", "TOOLKIT", "CREATED"],
    "sessions": ["ID", "STATE", "ACCOUNT", "ORG", "RESOURCE", "CREATED", "ACTIVE"],
    "policies": ["ID", "OWNER", "PATTERN", "ACTION", "POSITION"],
    "toolkits": ["ID", "OWNER", "SLUG", "NAME", "ROWS"],
    "integrations": ["SLUG", "KIND", "NAME", "SOURCE"],
    "connections": ["ADDRESS", "TEMPLATE", "PROVIDER", "DESCRIPTION"],
}
# Every `--json` field is camelCase, and every time is epoch milliseconds (an integer).
CAMEL_CASE = re.compile(r"[a-z][A-Za-z0-9]*")
TIME_FIELD = re.compile(r"[a-z]+At$")


async def cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(CLI_BOUND):
        done = await trio.run_process(
            command(*args), stdin=stdin, capture_stdout=True, capture_stderr=True, check=False
        )
    assert b"Traceback" not in done.stderr, done.stderr
    return done


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def doctor(data_dir: Path, *extra: str) -> tuple[int, list[dict[str, str]]]:
    """The doctor's exit status and JSON verdicts, checked against its text output of the same run's kind."""
    answered = await cli("doctor", "--json", "--data-dir", str(data_dir), *extra)
    verdicts = json.loads(answered.stdout)
    assert all(set(verdict) == {"check", "status", "detail"} for verdict in verdicts)
    assert MASTER_KEY.encode() not in answered.stdout + answered.stderr
    return answered.returncode, verdicts


def by_check(verdicts: list[dict[str, str]]) -> dict[str, dict[str, str]]:
    return {verdict["check"]: verdict for verdict in verdicts}


# -- version ---------------------------------------------------------------------------------------------------


async def test_version_in_text_and_json() -> None:
    for args in (("version",), ("--version",)):
        shown = await cli(*args)
        assert (shown.returncode, shown.stdout) == (0, f"executor-mcp {__version__}\n".encode())
    detailed = json.loads((await cli("version", "--json")).stdout)
    assert set(detailed) == {"version", "python", "trio", "platform", "build"}
    assert detailed["version"] == __version__
    assert detailed["python"] == platform.python_version()
    assert detailed["trio"] == trio.__version__
    assert detailed["build"] == "source"


# -- doctor ----------------------------------------------------------------------------------------------------


@pytest.fixture
async def good_data_dir(data_dir: Path) -> Path:
    """A data dir as serve leaves it (control plane, secret.key), with the modes doctor asks for."""
    assert (await cli("keys", "create", "--user", "bot", "--org", "acme", "--data-dir", str(data_dir))).returncode == 0
    _modes(data_dir, 0o700, 0o600)
    return data_dir


def _modes(data_dir: Path, dir_mode: int, key_mode: int) -> None:
    key = data_dir / "secret.key"
    key.write_text(MASTER_KEY)
    key.chmod(key_mode)
    data_dir.chmod(dir_mode)


async def test_doctor_passes_a_good_data_dir(good_data_dir: Path) -> None:
    port = str(free_port())
    status, verdicts = await doctor(good_data_dir, "--port", port)
    assert status == 0, verdicts
    assert [verdict["check"] for verdict in verdicts] == CHECKS
    assert {verdict["status"] for verdict in verdicts} == {"ok"}, verdicts
    checks = by_check(verdicts)
    assert "1 API keys" in checks["control-plane"]["detail"]
    assert "mode 0700" in checks["permissions"]["detail"]
    assert "secret.key mode 0600" in checks["permissions"]["detail"]
    assert checks["port"]["detail"] == f"127.0.0.1:{port} is free"

    text = await cli("doctor", "--data-dir", str(good_data_dir), "--port", port)
    assert text.returncode == 0
    lines = text.stdout.decode().splitlines()
    assert [line.split()[:2] for line in lines] == [["ok", check] for check in CHECKS]
    assert MASTER_KEY.encode() not in text.stdout + text.stderr


async def test_doctor_passes_a_data_dir_that_does_not_exist_yet_and_leaves_it_so(tmp_path: Path) -> None:
    missing = tmp_path / "not" / "yet"
    status, verdicts = await doctor(missing, "--port", "0")
    assert status == 0, verdicts
    assert by_check(verdicts)["data-dir"]["detail"] == f"{missing} does not exist yet; serve creates it"
    assert not (tmp_path / "not").exists()


async def test_doctor_warns_of_a_data_dir_and_key_open_to_others(good_data_dir: Path) -> None:
    _modes(good_data_dir, 0o755, 0o644)
    status, verdicts = await doctor(good_data_dir, "--port", "0")
    assert status == 0, verdicts  # a warning is no failure
    permissions = by_check(verdicts)["permissions"]
    assert permissions["status"] == "warn"
    assert f"{good_data_dir} is open to group or others (mode 0755" in permissions["detail"]
    assert "secret.key is open to group or others (mode 0644" in permissions["detail"]


@pytest.mark.parametrize("broken", ["a regular file", "under a regular file", "a garbage control plane"])
async def test_doctor_fails_a_broken_data_dir(tmp_path: Path, broken: str) -> None:
    """Broken in ways root cannot write through either (tests run as root in CI, where chmod stops nothing)."""
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    if broken == "a regular file":
        data_dir, failing, said = blocker, "data-dir", "exists but is not a directory"
    elif broken == "under a regular file":
        data_dir, failing, said = blocker / "data", "data-dir", f"cannot be created: {blocker} is not a directory"
    else:
        data_dir, failing, said = tmp_path / "data", "control-plane", "MDB_INVALID"
        data_dir.mkdir()
        (data_dir / CONTROL_FILE).write_bytes(os.urandom(3 * 4096))
    status, verdicts = await doctor(data_dir, "--port", "0")
    assert status == 1
    verdict = by_check(verdicts)[failing]
    assert verdict["status"] == "fail"
    assert said in verdict["detail"]
    assert [verdict["check"] for verdict in verdicts if verdict["status"] == "fail"] == [failing]

    text = await cli("doctor", "--data-dir", str(data_dir), "--port", "0")
    assert text.returncode == 1
    assert re.search(rf"^fail  {failing} .*{re.escape(said)}", text.stdout.decode(), re.MULTILINE)


async def test_serve_announces_its_console_and_doctor_finds_it_without_being_told_its_port(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    """`serve --port 0` (or a port from a config doctor was not given): the server says where it listens in the data
    dir's lock file. Nothing but the doctor's own lines is printed, even at debug: no library's log lines."""
    data_dir = tmp_path / "data"
    async with server_process(data_dir) as running:
        port = httpx.URL(running.url).port
        console = f"http://127.0.0.1:{port}/"
        with trio.fail_after(5):  # the drain may not have read the second line yet
            while f"Console: {console}\n" not in running.stderr.decode():  # noqa: ASYNC110
                await trio.sleep(0.01)
        assert f"MCP: {running.url}\nConsole: {console}\n" in running.stderr.decode()
        page = await http.get(console, follow_redirects=True)
        assert (page.status_code, page.headers["content-type"].split(";")[0]) == (200, "text/html")
        answered = await cli("doctor", "--data-dir", str(data_dir), "--log-level", "debug")
        running.terminate()
        assert await running.wait() == 0
    assert answered.returncode == 0, answered.stdout
    lines = answered.stdout.decode().splitlines()
    assert [line.split()[1] for line in lines] == CHECKS
    expected = f"127.0.0.1:{port} is in use by the server running on this data dir (pid {running.process.pid})"
    assert f"ok    port           {expected}" in lines
    assert answered.stderr == b""  # httpx logs its request for the metadata at info, and httpcore more at debug

    assert f"http://127.0.0.1:{port}".encode() in (data_dir / "server.lock").read_bytes()
    _, verdicts = await doctor(data_dir, "--port", "0")  # stopped: the lock file's lines are stale, and not believed
    assert by_check(verdicts)["port"]["detail"] == "port 0: serve picks a free port and announces it"


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="who holds a data dir is read from /proc")
async def test_doctor_tells_the_running_server_from_another_program_on_the_port(
    server: ServerUnderTest, tmp_path: Path
) -> None:
    port = httpx.URL(server.url).port
    assert port is not None
    status, verdicts = await doctor(server.running.data_dir, "--port", str(port))
    assert status == 0, verdicts
    assert by_check(verdicts)["port"]["detail"] == (
        f"127.0.0.1:{port} is in use by the server running on this data dir (pid {os.getpid()})"
    )
    status, verdicts = await doctor(tmp_path / "elsewhere", "--port", str(port))
    assert status == 1
    assert by_check(verdicts)["port"]["detail"] == f"127.0.0.1:{port} is in use by an MCP server on another data dir"

    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        status, verdicts = await doctor(tmp_path / "elsewhere", "--port", str(taken))
    assert status == 1
    assert by_check(verdicts)["port"] == {
        "check": "port",
        "status": "fail",
        "detail": f"127.0.0.1:{taken} is in use by another program",
    }


# -- listings --------------------------------------------------------------------------------------------------


@pytest.mark.slow  # a dozen CLI processes
async def test_every_listing_has_json_without_secrets(
    server: ServerUnderTest, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    data_dir = str(server.running.data_dir)
    started = int(time.time() * 1000)
    session_id = await open_session(http, server.url)
    created = await cli("keys", "create", "--user", "bot", "--org", "local", "--data-dir", data_dir)
    key = created.stdout.decode().strip()
    assert key.startswith("exk_")
    policy = await cli(
        "policies", "add", "--org", "local", "--pattern", "items.*", "--action", "block", "--data-dir", data_dir
    )
    toolkit = await cli("toolkits", "create", "--org", "local", "--name", "Items", "--data-dir", data_dir)
    assert toolkit.returncode == 0, toolkit.stderr
    spec = tmp_path / "items.json"
    spec.write_text(json.dumps(items_spec("http://127.0.0.1:9")))
    added = await cli("integrations", "add-openapi", "--slug", "items", "--file", str(spec), "--data-dir", data_dir)
    assert added.returncode == 0, added.stderr
    connected = await cli(
        "connections", "add", "--integration", "items", "--name", "main", "--template", "apikey-0",
        "--data-dir", data_dir, stdin=SECRET.encode() + b"\n",
    )  # fmt: skip
    assert connected.returncode == 0, connected.stderr
    assert (await cli("orgs", "revoke", "acme", "--data-dir", data_dir)).returncode == 0

    listed = {}
    for listing in LISTINGS:
        done = await cli(*listing, "--json", "--data-dir", data_dir)
        assert done.returncode == 0, done.stderr
        for secret in (SECRET, key, key.split("_", 2)[-1]):
            assert secret.encode() not in done.stdout + done.stderr
        listed[listing[0]] = json.loads(done.stdout)
        text = await cli(*listing, "--data-dir", data_dir)
        header, *rows = text.stdout.decode().splitlines()
        assert (header.split(), len(rows)) == (HEADERS[listing[0]], len(listed[listing[0]])), text.stdout
    ended = int(time.time() * 1000)
    for listing, rows in listed.items():
        for row in rows:
            assert all(CAMEL_CASE.fullmatch(field) for field in row), (listing, row)
            for field in filter(TIME_FIELD.search, row):
                assert row[field] is None or started <= row[field] <= ended, (listing, field, row[field])
    assert [(org["id"], org["revoked"]) for org in listed["orgs"]] == [("acme", True)]
    assert listed["orgs"][0]["firstSeenAt"] >= started  # milliseconds: in seconds it would be a thousand times less
    assert [(k["id"], k["account"], k["revoked"]) for k in listed["keys"]] == [(key.split("_")[1], "bot", False)]
    assert [s["id"] for s in listed["sessions"] if not s["workspace"]] == [session_id]
    assert [(p["id"], p["pattern"], p["action"]) for p in listed["policies"]] == [
        (policy.stdout.decode().strip(), "items.*", "block")
    ]
    assert [(t["id"], t["slug"]) for t in listed["toolkits"]] == [(toolkit.stdout.decode().strip(), "items")]
    assert [i["slug"] for i in listed["integrations"]] == ["items"]
    assert [(c["address"], c["template"]) for c in listed["connections"]] == [("tools.items.org.main", "apikey-0")]

    shown = json.loads((await cli("sessions", "show", session_id, "--json", "--data-dir", data_dir)).stdout)
    assert shown["session"] == next(s for s in listed["sessions"] if s["id"] == session_id)
    assert shown["meta"]["clientInfo"]["name"] == "tests"
    assert shown["initializeRequest"]["method"] == "initialize"
    text = (await cli("sessions", "show", session_id, "--data-dir", data_dir)).stdout.decode()
    assert text.splitlines()[:2] == [f"id         {session_id}", "state      stored"]
    assert re.search(r"^client +tests 0$", text, re.MULTILINE), text


async def test_empty_listings_say_so_and_json_is_an_empty_list(data_dir: Path) -> None:
    messages = {
        "orgs": "no organizations",
        "keys": "no API keys",
        "sessions": "no sessions",
        "policies": "no policies in organization local",
        "toolkits": "no toolkits in organization local",
        "integrations": "no integrations in organization local",
        "connections": "no connections in organization local",
    }
    for listing in LISTINGS:
        text = await cli(*listing, "--data-dir", str(data_dir))
        assert (text.returncode, text.stdout) == (0, b"")
        assert text.stderr.decode().strip().splitlines()[-1] == messages[listing[0]]
        as_json = await cli(*listing, "--json", "--data-dir", str(data_dir))
        assert (as_json.returncode, json.loads(as_json.stdout)) == (0, [])


# -- help, usage, pipes ----------------------------------------------------------------------------------------

HIDDEN_COMMAND = re.compile(r"(?<![\w-])sandbox-(worker|zygote)(?![\w-])")  # not --sandbox-workers
OLD_METAVAR = re.compile(r"(?<![=\w])VALUE\b")  # the placeholder every option used to show (NAME=VALUE is meant)


async def test_help_shows_metavars_and_descriptions_and_no_hidden_command() -> None:
    top = (await cli("--help")).stdout.decode()
    serve = (await cli("serve", "--help")).stdout.decode()
    for shown in ("--port PORT", "--data-dir DIR", "--session-timeout SECONDS", "--auth {none,jwt}", "--config FILE"):
        assert shown in serve
    assert "Run the MCP server: MCP over streamable HTTP at /mcp" in serve
    assert "(default: 300) [EXECUTOR_MCP_SESSION_TIMEOUT]" in " ".join(serve.split())
    sessions_list = (await cli("sessions", "list", "--help")).stdout.decode()
    assert "Stored sessions, most recently active first." in sessions_list
    assert "--json" in sessions_list
    refused = (await cli("no-such-command")).stderr.decode()
    for text in (top, serve, sessions_list, refused):
        assert not OLD_METAVAR.search(text)
        assert not HIDDEN_COMMAND.search(text)


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (("serve", "--prot", "1"), "executor-mcp serve: error: unknown option --prot; did you mean --port?"),
        (
            ("sessions", "list", "--jsno"),
            "executor-mcp sessions list: error: unknown option --jsno; did you mean --json?",
        ),
        (("integrations", "list", "--nope"), "executor-mcp integrations list: error: unknown option --nope"),
        (
            ("doctor", "--data-dri=/tmp"),
            "executor-mcp doctor: error: unknown option --data-dri; did you mean --data-dir?",
        ),
        (("audit", "list", "--limit", "x"), "executor-mcp audit list: error: --limit: invalid int value 'x'"),
        (("sessions", "show"), "executor-mcp sessions show: error: the following arguments are required: SESSION_ID"),
    ],
)
async def test_a_bad_option_is_refused_in_one_line_naming_it(given: tuple[str, ...], said: str) -> None:
    """The line says what is wrong (and what was meant), then where help is: never the whole usage, which for
    `serve` is forty lines that scroll the error away."""
    refused = await cli(*given)
    assert refused.returncode == 2
    name = said.partition(": error")[0]
    assert refused.stderr.decode() == f"{said}\n(see {name} --help)\n"


async def test_a_bad_value_names_its_option_in_a_few_words(tmp_path: Path) -> None:
    refused = await cli("serve", "--port", "abc", "--data-dir", str(tmp_path))
    assert (refused.returncode, refused.stderr) == (2, b"executor-mcp: error: --port: invalid int value 'abc'\n")


def _fill_sessions(data_dir: Path, count: int) -> None:
    """`count` directory entries, written in one transaction as another process could (a real server would take
    minutes to open this many)."""
    trio.run(_open_and_close, data_dir)
    environment = lmdb.open(str(data_dir / CONTROL_FILE), subdir=False, max_dbs=32)
    try:
        with environment.begin(write=True) as txn:
            sessions = environment.open_db(b"sessions", txn=txn)
            for number in range(count):
                record = SessionRecord(
                    session_id=f"{number:064x}",
                    owner=Owner(account_id="local", org_id="local"),
                    resource="/mcp",
                    created_at=1_800_000_000.0,
                    last_activity_at=1_800_000_000.0 + number,
                )
                txn.put(record.session_id.encode(), encode(record), db=sessions)
    finally:
        environment.close()


async def _open_and_close(data_dir: Path) -> None:
    await (await ControlPlane.open(data_dir)).close()


def test_a_closed_pipe_ends_a_listing_quietly(data_dir: Path) -> None:
    _fill_sessions(data_dir, 2000)  # ~300 KB of lines: far more than a pipe holds, so the writer meets the close
    with subprocess.Popen(
        command("sessions", "list", "--data-dir", str(data_dir)), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as listing:
        assert listing.stdout is not None
        assert listing.stderr is not None
        header, first = listing.stdout.readline(), listing.stdout.readline()
        listing.stdout.close()
        stderr = listing.stderr.read()
        assert listing.wait(timeout=CLI_BOUND) == CLOSED_PIPE_STATUS
    assert header.split()[:2] == [b"ID", b"STATE"]
    assert first.split()[:2] == [f"{1999:064x}".encode(), b"stored"]
    assert b"Traceback" not in stderr
    assert b"BrokenPipe" not in stderr
