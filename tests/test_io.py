"""perflab.core.io: the CSV contract, atomic writes, and reading results back."""

from __future__ import annotations

import json
import math
import os
import stat

import pandas as pd
import pytest

from perflab.core import io


def _ok_row(**kw) -> dict:
    row = {
        "experiment": "E01",
        "variant": "synchronized",
        "workload": "mlp",
        "model": "MLP dim64 depth2",
        "input_shape": "[16, 64]",
        "dtype": "float32",
        "device": "cpu",
        "device_name": "Some CPU",
        "mode": "train",
        "execution": "eager",
        "metric": "step_latency",
        "window": "one step",
        "sync_boundary": "none needed (CPU is synchronous)",
        "statistic": "median",
        "value": 1.25,
        "unit": "ms",
        "n": 30,
        "status": "ok",
        "reason": "",
    }
    row.update(kw)
    return row


def _unsupported_row(**kw) -> dict:
    row = _ok_row(
        variant="cuda_events",
        statistic="value",
        value=None,
        window="n/a",
        sync_boundary="n/a",
        status="unsupported",
        reason="CUDA events need a CUDA device",
        n=1,
    )
    row.update(kw)
    return row


@pytest.fixture
def good_rows() -> list[dict]:
    return [_ok_row(), _ok_row(statistic="iqr", value=0.1), _unsupported_row()]


def _frame(rows) -> pd.DataFrame:
    return io.rows_to_frame(rows)


def _leftovers(d) -> list[str]:
    return sorted(os.listdir(d))


# ---------------------------------------------------------------- validate_rows


def test_validate_accepts_good_frame(good_rows):
    io.validate_rows(_frame(good_rows))


@pytest.mark.parametrize("status", io.STATUSES[1:])
def test_validate_accepts_every_non_ok_status_with_reason(status):
    io.validate_rows(_frame([_unsupported_row(status=status)]))


@pytest.mark.parametrize("column", ["unit", "status", "value", "reason"])
def test_validate_rejects_missing_column(good_rows, column):
    frame = _frame(good_rows).drop(columns=[column])
    with pytest.raises(io.ContractError, match=f"missing contract columns.*{column}"):
        io.validate_rows(frame)


def test_validate_rejects_extra_column(good_rows):
    frame = _frame(good_rows).assign(comment="x")
    with pytest.raises(io.ContractError, match="outside the contract.*comment"):
        io.validate_rows(frame)


def test_validate_rejects_unknown_status():
    with pytest.raises(io.ContractError, match="status 'skipped'"):
        io.validate_rows(_frame([_ok_row(status="skipped")]))


def test_validate_rejects_unknown_statistic():
    with pytest.raises(io.ContractError, match="statistic 'p99'"):
        io.validate_rows(_frame([_ok_row(statistic="p99")]))


@pytest.mark.parametrize("value", [None, float("nan")], ids=["none", "nan"])
def test_validate_rejects_ok_row_without_value(value):
    with pytest.raises(io.ContractError, match="status ok but no value"):
        io.validate_rows(_frame([_ok_row(value=value)]))


def test_validate_rejects_ok_row_with_non_number_value():
    frame = pd.DataFrame([_ok_row(value="fast")], columns=io.COLUMNS)
    with pytest.raises(io.ContractError, match="not a number"):
        io.validate_rows(frame)


def test_validate_rejects_ok_row_with_non_finite_value():
    with pytest.raises(io.ContractError):
        io.validate_rows(_frame([_ok_row(value=float("inf"))]))


@pytest.mark.parametrize("status", io.STATUSES[1:])
@pytest.mark.parametrize("reason", ["", "   ", None], ids=["empty", "blank", "none"])
def test_validate_rejects_non_ok_row_without_reason(status, reason):
    with pytest.raises(io.ContractError, match="needs a reason"):
        io.validate_rows(_frame([_unsupported_row(status=status, reason=reason)]))


def test_validate_rejects_non_ok_row_with_value():
    with pytest.raises(io.ContractError, match="must not carry a value"):
        io.validate_rows(_frame([_unsupported_row(value=3.0)]))


@pytest.mark.parametrize("column", io.REQUIRED_TEXT)
@pytest.mark.parametrize("text", ["", "  ", None], ids=["empty", "blank", "none"])
def test_validate_rejects_empty_required_text(column, text):
    with pytest.raises(io.ContractError, match=f"empty '{column}'"):
        io.validate_rows(_frame([_ok_row(**{column: text})]))


def test_validate_names_non_finite_value_as_such():
    with pytest.raises(io.ContractError, match="non-finite"):
        io.validate_rows(_frame([_ok_row(value=float("inf"))]))


# ---------------------------------------------------------------- atomic writes


@pytest.fixture
def failing_to_csv(monkeypatch):
    """DataFrame.to_csv that writes half a file, then fails."""

    def to_csv(self, fh=None, *args, **kwargs):
        fh.write("E01,partial")
        fh.flush()
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(pd.DataFrame, "to_csv", to_csv)


def test_write_results_is_atomic_on_failure(tmp_path, good_rows, failing_to_csv):
    path = tmp_path / "e01.csv"
    with pytest.raises(RuntimeError, match="disk on fire"):
        io.write_results(path, good_rows)
    assert not path.exists()
    assert _leftovers(tmp_path) == []  # no temp file either


def test_write_results_failure_keeps_existing_file(tmp_path, good_rows, monkeypatch):
    path = tmp_path / "e01.csv"
    io.write_results(path, good_rows)
    before = path.read_bytes()

    def to_csv(self, fh=None, *args, **kwargs):
        fh.write("garbage")
        raise KeyboardInterrupt  # even a BaseException must clean up

    monkeypatch.setattr(pd.DataFrame, "to_csv", to_csv)
    with pytest.raises(KeyboardInterrupt):
        io.write_results(path, [_ok_row(value=99.0)])
    assert path.read_bytes() == before
    assert _leftovers(tmp_path) == ["e01.csv"]


def test_write_samples_is_atomic_on_failure(tmp_path, failing_to_csv):
    path = tmp_path / "s.csv"
    with pytest.raises(RuntimeError):
        io.write_samples(path, [{"experiment": "E01", "variant": "v", "metric": "m",
                                  "unit": "ms", "block": 0, "index": 0, "value": 1.0}])
    assert _leftovers(tmp_path) == []


def test_atomic_write_json_round_trip(tmp_path):
    path = tmp_path / "p.json"
    io.atomic_write_json(path, {"b": 1, "a": [1, 2], "path": tmp_path})
    data = json.loads(path.read_text())
    assert data == {"a": [1, 2], "b": 1, "path": str(tmp_path)}
    assert _leftovers(tmp_path) == ["p.json"]


def test_atomic_write_follows_umask(tmp_path):
    old = os.umask(0o022)
    try:
        io.atomic_write_text(tmp_path / "t.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "t.txt").st_mode) == 0o644


# ---------------------------------------------------------------- read_results


def test_read_results_round_trips_text(tmp_path):
    rows = [
        _ok_row(),
        # a non-ok row right after an ok row: its empty value must stay empty
        _unsupported_row(window="n/a", sync_boundary="n/a", model="None", input_shape="NA",
                         reason="n/a"),
        _ok_row(statistic="count", value=30.0, unit="count", reason="NaN"),
    ]
    path = tmp_path / "r.csv"
    io.write_results(path, rows)
    back = io.read_results([path])
    assert len(back) == 3
    assert back.loc[1, "window"] == "n/a"
    assert back.loc[1, "sync_boundary"] == "n/a"
    assert back.loc[1, "model"] == "None"
    assert back.loc[1, "input_shape"] == "NA"
    assert back.loc[1, "reason"] == "n/a"
    assert back.loc[2, "reason"] == "NaN"
    assert back.loc[0, "reason"] == ""
    assert isinstance(back.loc[1, "window"], str)
    assert back.loc[0, "value"] == 1.25
    assert back.loc[2, "value"] == 30.0
    assert math.isnan(back.loc[1, "value"])
    assert back.loc[0, "n"] == 30


def test_read_results_concatenates(tmp_path, good_rows):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    io.write_results(a, good_rows)
    io.write_results(b, [_ok_row(experiment="E03")])
    back = io.read_results([a, b])
    assert list(back["experiment"]) == ["E01"] * len(good_rows) + ["E03"]


def test_read_results_empty_list():
    back = io.read_results([])
    assert back.empty and list(back.columns) == io.COLUMNS


def test_read_results_rejects_samples_csv(tmp_path):
    path = tmp_path / "e01_samples.csv"
    io.write_samples(path, [{"experiment": "E01", "variant": "v", "metric": "m",
                              "unit": "ms", "block": 0, "index": 0, "value": 1.0}])
    with pytest.raises(io.ContractError, match="not a result CSV") as exc:
        io.read_results([path])
    assert str(path) in str(exc.value)


def test_read_results_validates_and_names_the_file(tmp_path, good_rows):
    path = tmp_path / "r.csv"
    io.write_results(path, good_rows)
    text = path.read_text().replace(",ok,", ",weird,", 1)
    path.write_text(text)
    with pytest.raises(io.ContractError, match="weird") as exc:
        io.read_results([path])
    assert str(exc.value).startswith(str(path))


def test_write_results_rejects_row_with_unknown_key(tmp_path):
    with pytest.raises(io.ContractError, match="outside the contract"):
        io.write_results(tmp_path / "x.csv", [_ok_row(modle="typo")])
