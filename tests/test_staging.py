"""The one way an edge stages an upload: what it does not hand to an analysis is removed."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.service.spool import staged_upload


def _fill(path: Path) -> None:
    path.mkdir(parents=True)
    (path / "in-0").write_bytes(b"Traceback (most recent call last):\n")


def test_a_staging_left_without_hand_over_is_removed(tmp_path: Path) -> None:
    with staged_upload(data_dir=tmp_path) as staging:
        _fill(staging.path)
        assert staging.path.is_dir() and staging.path.parent == tmp_path / "tmp"
    assert not staging.path.exists()


def test_an_error_in_the_edge_removes_it(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), staged_upload(data_dir=tmp_path) as staging:
        _fill(staging.path)
        raise RuntimeError("client went away")
    assert not staging.path.exists()


def test_a_handed_over_staging_belongs_to_the_analysis(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), staged_upload(data_dir=tmp_path) as staging:
        _fill(staging.path)
        assert staging.hand_over() == staging.path
        raise RuntimeError("the client went away while the analysis runs")
    assert (staging.path / "in-0").is_file(), "the analysis reads it still; it removes it itself"
    staging.remove()
    assert not staging.path.exists()


def test_each_upload_gets_its_own_folder(tmp_path: Path) -> None:
    with staged_upload(data_dir=tmp_path) as a, staged_upload(data_dir=tmp_path) as b:
        assert a.path != b.path
