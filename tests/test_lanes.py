"""The fast lane stays fast: starting a live server, a `serve` process or a moto S3 server in a
test not marked slow fails that test (tests/lanes.py); the README says both commands."""

from __future__ import annotations

import subprocess
import sys
import tomllib

import pytest

from tests import lanes
from tests.conftest import ROOT
from tests.s3kit import MotoS3
from tests.servicekit import LiveServer

SERVE = [sys.executable, "-m", "app.cli", "serve", "--port", "0"]


@pytest.mark.parametrize(
    ("args", "serves"),
    [
        (SERVE, True),
        (["/opt/venv/bin/logtriage", "serve", "--workers", "2"], True),
        ([sys.executable, "-m", "app.cli", "analyze", "serve"], False),  # a file named serve
        (["logtriage", "tokens", "create", "--name", "serve"], False),
        ([sys.executable, "-c", "print('serve')"], False),
        ("logtriage serve", False),  # a shell line: not how the tests start it
    ],
)
def test_a_serve_command_is_recognised(args: object, serves: bool) -> None:
    assert lanes.is_serve_command(args) is serves  # type: ignore[arg-type]


def test_starting_serve_in_a_test_not_marked_slow_fails_before_the_process_starts() -> None:
    with pytest.raises(pytest.fail.Exception, match="not marked slow"):
        subprocess.Popen(SERVE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_starting_a_live_server_or_moto_in_a_test_not_marked_slow_fails() -> None:
    # instances without __init__: the check comes first, before anything is built or bound
    with pytest.raises(pytest.fail.Exception, match="a live server but is not marked slow"):
        LiveServer.start(object.__new__(LiveServer))
    with pytest.raises(pytest.fail.Exception, match="a moto S3 server but is not marked slow"):
        MotoS3.start(object.__new__(MotoS3))


def test_a_test_marked_slow_may_start_them(request: pytest.FixtureRequest) -> None:
    with pytest.raises(pytest.fail.Exception, match="starts Chromium but is not marked slow"):
        lanes.require_slow("Chromium", request.node)
    request.applymarker(pytest.mark.slow)
    lanes.require_slow("Chromium", request.node)


def test_the_marker_is_registered_and_both_lanes_are_documented() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "--strict-markers" in config["addopts"]
    assert any(m.startswith("slow:") for m in config["markers"])
    readme = (ROOT / "README.md").read_text()
    assert "bash scripts/test.sh" in readme and 'python -m pytest -n 2 -m "not slow"' in readme
