"""The doctor's verdicts from observed facts: which findings fail, which only warn."""

from datetime import UTC, datetime
from pathlib import Path

import pytest

from executor_mcp.doctor.checks import (
    Check,
    PathFacts,
    PortFacts,
    Status,
    clock,
    control_plane,
    data_dir,
    exit_status,
    permissions,
    port,
    text_line,
)

DIR = Path("/srv/executor")
NOW = datetime(2026, 6, 1, tzinfo=UTC).timestamp()


def test_data_dir_verdicts() -> None:
    good = PathFacts(DIR, True, True, None, False, None)
    assert data_dir(good).status is Status.OK
    assert data_dir(PathFacts(DIR, False, True, None, False, None)).status is Status.FAIL
    unwritable = PathFacts(DIR, True, True, None, False, "Read-only file system")
    assert data_dir(unwritable) == Check("data-dir", Status.FAIL, f"cannot write in {DIR}: Read-only file system")
    creatable = PathFacts(DIR, False, False, Path("/srv"), True, None)
    assert data_dir(creatable).detail == f"{DIR} does not exist yet; serve creates it"
    blocked = PathFacts(DIR, False, False, Path("/srv"), False, None)
    assert data_dir(blocked).detail == f"{DIR} cannot be created: /srv is not a directory"


def test_control_plane_verdicts() -> None:
    path = DIR / "control.mdb"
    assert control_plane(path, False, None, None).status is Status.OK
    assert control_plane(path, True, "MDB_INVALID", None).status is Status.FAIL
    assert "(2 sessions)" in control_plane(path, True, None, {"sessions": 2}).detail


@pytest.mark.parametrize(
    ("dir_mode", "key_mode", "status"),
    [(0o700, 0o600, Status.OK), (0o700, None, Status.OK), (0o750, 0o600, Status.WARN), (0o700, 0o604, Status.WARN)],
)
def test_permission_verdicts(dir_mode: int, key_mode: int | None, status: Status) -> None:
    assert permissions(DIR, dir_mode, key_mode, False).status is status


def test_port_verdicts() -> None:
    def verdict(error: str | None, in_use: bool, mcp: bool, holders: list[int] | None) -> Status:
        return port(PortFacts("127.0.0.1", 4788, error, in_use, mcp, holders)).status

    assert verdict(None, False, False, None) is Status.OK
    assert verdict("Cannot assign requested address", False, False, None) is Status.FAIL
    assert verdict("Address already in use", True, True, [42]) is Status.OK
    assert verdict("Address already in use", True, True, None) is Status.WARN
    assert verdict("Address already in use", True, True, []) is Status.FAIL
    assert verdict("Address already in use", True, False, [42]) is Status.FAIL
    assert port(PortFacts("127.0.0.1", 0, None, False, False, None)).status is Status.OK


def test_clock_verdicts() -> None:
    assert clock(NOW, 10.0, 10.01).status is Status.OK
    assert clock(0.0, 10.0, 10.01).status is Status.FAIL  # 1970: a machine that lost its clock
    assert clock(NOW, 10.0, 10.0).status is Status.FAIL


def test_exit_status_and_text() -> None:
    ok, warn, fail = (Check("x", status, "d") for status in (Status.OK, Status.WARN, Status.FAIL))
    assert exit_status([ok, warn]) == 0
    assert exit_status([ok, fail]) == 1
    assert text_line(Check("port", Status.WARN, "detail")) == "warn  port           detail"
