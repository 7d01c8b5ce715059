"""examples/grafana/duro-dashboard.json: valid JSON whose every PromQL expression names only series that
duro.metrics' collector exposes and groups only by labels duro's metrics carry."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.core import Metric

from duro.metrics import Meter, collector

DASHBOARD = Path(__file__).resolve().parents[2] / "examples" / "grafana" / "duro-dashboard.json"
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
LABELS = {"limit", "workflow", "status", "le"}
METRIC = re.compile(r"\bduro_[a-z_]+\b")
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")


def exposed_series() -> set[str]:
    """Every series name the collector can expose: its families (the four limit gauges and the
    meter's counters and histograms), with the suffixes of each family's type."""

    def no_engine():  # describe() never reads the engine
        raise AssertionError("describe() read the engine")

    families: list[Metric] = list(collector(no_engine, meter=Meter()).describe())
    assert {f.name for f in families} >= {f.name for f in Meter().describe()}
    return {f.name + suffix for f in families for suffix in SUFFIXES[f.type]}


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels(board: dict) -> list[dict]:
    out = []
    for panel in board["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))  # a collapsed row keeps its panels inside
    return out


def expressions(board: dict) -> list[str]:
    exprs = [t["expr"] for p in panels(board) for t in p.get("targets", [])]
    exprs += [v["definition"] for v in board["templating"]["list"] if v["type"] == "query"]
    return exprs


def test_the_collector_exposes_the_designed_families():
    series = exposed_series()
    assert {"duro_limit_capacity", "duro_limit_busy", "duro_limit_reserved", "duro_limit_waiting"} <= series
    assert {"duro_slot_wait_seconds_bucket", "duro_slot_expired_total", "duro_runs_finished_total"} <= series


def test_every_expression_names_only_exposed_series():
    series = exposed_series()
    exprs = expressions(dashboard())
    assert len(exprs) >= 12
    for expr in exprs:
        names = set(METRIC.findall(expr))
        assert names, f"no duro metric in {expr!r}"
        assert names <= series, f"{expr!r} names {sorted(names - series)}, which duro.metrics does not expose"


def test_every_grouping_uses_only_duro_labels():
    for expr in expressions(dashboard()):
        for group in GROUPING.findall(expr):
            labels = {label.strip() for label in group.split(",") if label.strip()}
            assert labels <= LABELS, f"{expr!r} groups by {sorted(labels - LABELS)}"


def test_panels_read_the_prometheus_datasource_input_and_the_limit_variable():
    board = dashboard()
    assert [i["name"] for i in board["__inputs"]] == ["DS_PROMETHEUS"]
    for panel in panels(board):
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["limit"]["definition"] == "label_values(duro_limit_capacity, limit)"
    assert any('limit=~"$limit"' in expr for expr in expressions(board))
