"""Schemathesis against /openapi.json of a live server, on SQLite and PostgreSQL.

Strings may hold NUL (`--generation-allow-x00 true`), a bounded number of examples per
operation (the examples, coverage and fuzzing phases), and half of the analysis ids drawn are
real ones (seeded analyses, through a dictionary), so the reads, reports, log, feedback and
re-triage get past their 404. Checks: no server error, every status code and content type
documented, responses match their schema. The HAR report is read back to count the requests
and to check that none was answered 5xx.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servicekit import ECC, OOM, LiveServer, in_ci, live_server, make_settings, training_log

# slow: property-based requests against a live server's OpenAPI (schemathesis)
pytestmark = pytest.mark.slow

MAX_EXAMPLES = 12
CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"


def _schemathesis() -> list[str]:
    exe = shutil.which("st", path=str(Path(sys.executable).parent)) or shutil.which("st")
    if exe is None:
        if in_ci():
            pytest.fail("schemathesis is required in CI (the dev extra has it)")
        pytest.skip("schemathesis is not installed (the dev extra has it)")
    return [exe]


@pytest.fixture(scope="module")
def fuzz_server(db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with live_server(make_settings(tmp_path_factory.mktemp("fuzz-data"), db_url)) as srv:
        yield srv


def _seed(srv: LiveServer) -> list[str]:
    ids = []
    with srv.client() as c:
        for i, tail in enumerate((ECC.format(ip="10.0.0.1"), OOM.format(gib="3.5"))):
            r = c.post(
                "/api/v1/analyses",
                content=training_log(tail, job=f"fuzz{i}"),
                headers={"Content-Type": "text/plain"},
                params={"job_id": f"fuzz-{i}", "label": "team=rl", "host": f"node-{i}"},
            )
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])
    return ids


def test_schemathesis_finds_no_server_error_and_no_undocumented_status(
    fuzz_server: LiveServer, tmp_path: Path
) -> None:
    ids = _seed(fuzz_server)
    config = tmp_path / "schemathesis.toml"
    config.write_text(
        "[dictionaries.analysis_ids]\n"
        f"values = {json.dumps(ids)}\n\n"
        "[parameters]\n"
        '"path.analysis_id" = { dictionary = "analysis_ids", probability = 0.5 }\n'
    )
    har = tmp_path / "fuzz.har"
    cmd = [
        *_schemathesis(),
        "--config-file",
        str(config),
        "run",
        f"{fuzz_server.url}/openapi.json",
        "--checks",
        CHECKS,
        "--max-examples",
        str(MAX_EXAMPLES),
        "--phases",
        "examples,coverage,fuzzing",
        "--generation-allow-x00",
        "true",
        "--workers",
        "1",  # Hypothesis' lambda descriptions are not thread-safe on Python 3.11
        "--seed",
        "20261123",
        "--no-shrink",
        "--request-timeout",
        "60",
        "--report",
        "har",
        "--report-har-path",
        str(har),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    out = res.stdout + res.stderr
    entries = json.loads(har.read_text())["log"]["entries"] if har.exists() else []
    statuses = Counter(e["response"]["status"] for e in entries)
    server_errors = [
        f"{e['request']['method']} {e['request']['url']} -> {e['response']['status']}"
        for e in entries
        if e["response"]["status"] >= 500
    ]
    generated = re.search(r"(\d+) generated", out)
    print(
        f"\nschemathesis: {len(entries)} requests ({generated.group(1) if generated else '?'} cases), "
        f"statuses {dict(sorted(statuses.items()))}"
    )
    assert not server_errors, server_errors[:20]
    assert res.returncode == 0, out[-8000:]
    assert len(entries) > 300, out[-4000:]
