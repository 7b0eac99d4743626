"""The store hands back the row dataclasses it was given (issue 25.3, typed read side)."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from fixtures_results import downgrade_to_format1
from rig.report.model import SETTINGS
from rig.results.store import ActionRow, EngineStatsRow, OfTransfer, Store, TcpSample, \
    TcpSampleRow, ThreadCpu, ThreadCpuRow, TransferRow, ValidationRow

REPO = Path(__file__).resolve().parents[1]


def _transfer(**kw) -> TransferRow:
    base = dict(run_id="r", step=0, path="wan", backend="none", client="c", tool="curl",
                streams=1, concurrency=1, instance=0, repeat=0, ok=True, argv="[]",
                bytes=10, duration_s=1.0, throughput_bps=80.0, aggregate_bps=80.0,
                rtt_ms_configured=20.0, extra='{"k": 1}', tls="all")
    return TransferRow(**{**base, **kw})


def _store(tmp_path: Path) -> tuple[Store, TransferRow, ValidationRow, EngineStatsRow]:
    st = Store.create(tmp_path / "results.sqlite", "r")
    t = _transfer()
    tid = st.add_transfer(t)
    v = ValidationRow(run_id="r", step=0, phase="before", path="wan", backend="none",
                      flagged=False, rtt_ms_measured=20.5, raw="{}")
    st.add_validation(v)
    e = EngineStatsRow(run_id="r", step=0, path="wan", backend="none", stats="{}",
                       emulation_late=True, phase="transfers")
    st.add_engine_stats(e)
    st.add_tcp_samples([TcpSampleRow(transfer_id=tid, conn=0, t_s=0.1, cwnd_segs=10)])
    st.add_thread_cpu([ThreadCpuRow(transfer_id=tid, side="client", pid=1, tid=1,
                                    comm="curl", cpu_s=0.5)])
    st.add_action(ActionRow(run_id="r", seq=0, action="teardown", kind="teardown",
                            phase="teardown", host="local", started_at=1.0, ended_at=2.0,
                            duration_s=1.0, outcome="ok"))
    return st, t, v, e


def test_rows_come_back_as_the_dataclasses_that_were_stored(tmp_path):
    st, t, v, e = _store(tmp_path)
    st.finish()
    st = Store.open(tmp_path)
    assert st.transfers() == [t] and st.validations() == [v] and st.engine_stats() == [e]
    (got,) = st.transfers()
    assert got.ok is True and got.extra == '{"k": 1}'      # a bool; JSON stays text
    assert st.validations()[0].flagged is False and st.engine_stats()[0].emulation_late is True
    assert st.rows(TransferRow, "client = ?", ("c",)) == [t]
    assert st.rows(TransferRow, "client = ?", ("x",)) == []
    assert [a.action for a in st.actions()] == ["teardown"]
    with pytest.raises(ValueError):
        st.rows(TcpSample)                    # a join, not a table's row type


def test_joined_reads_carry_their_transfers_key_columns(tmp_path):
    st, t, _, _ = _store(tmp_path)
    (s,) = st.tcp_samples()
    assert isinstance(s, TcpSample) and (s.conn, s.cwnd_segs) == (0, 10)
    (h,) = st.thread_cpu()
    assert isinstance(h, ThreadCpu) and h.comm == "curl"
    for row in (s, h):
        assert all(getattr(row, f.name) == getattr(t, f.name)
                   for f in dataclasses.fields(OfTransfer)), row


def test_a_format_1_folder_reads_missing_columns_as_none_and_tables_as_empty(tmp_path):
    st, _, _, _ = _store(tmp_path)
    st.finish()
    downgrade_to_format1(tmp_path / "results.sqlite")
    st = Store.open(tmp_path)
    (t,) = st.transfers()
    assert t.tls is None and t.origin is None and t.bytes == 10
    assert st.engine_stats()[0].emulation_late is None
    assert st.tcp_samples() == [] and st.thread_cpu() == [] and st.actions() == []
    assert st.background() == [] and st.capture_flows() == []


def test_names_read_by_name_are_columns():
    """The few columns read with getattr (a name in a list) are checked here, as mypy
    checks every other attribute: a misspelt one would read as an AttributeError."""
    cols = {f.name for f in dataclasses.fields(TransferRow)}
    assert set(SETTINGS) <= cols
    assert {f.name for f in dataclasses.fields(OfTransfer)} <= cols


CHART_MODULES = {"charts", "against_charts", "compare_charts", "history_chart", "threadchart"}


def _nested_imports(tree: ast.Module) -> list[tuple[int, str]]:
    top = set(map(id, tree.body))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in top:
            names = [a.name for a in node.names]
            out.append((node.lineno, f"{getattr(node, 'module', '') or ''}:{','.join(names)}"))
    return out


def _allowed(imp: str) -> bool:
    module, names = imp.split(":")
    return module == "rig.report" and set(names.split(",")) <= CHART_MODULES


@pytest.mark.parametrize("path", sorted((REPO / "rig" / "report").glob("*.py")),
                         ids=lambda p: p.name)
def test_report_modules_import_at_the_top(path: Path):
    """No import inside a function (which would hide a cycle from a reader), but the
    chart modules: matplotlib is optional, an ImportError there becomes a note."""
    bad = [i for i in _nested_imports(ast.parse(path.read_text())) if not _allowed(i[1])]
    assert bad == []


def test_the_nested_import_check_can_fail():
    tree = ast.parse("def f():\n    from rig.report import html\n    from rig.report "
                     "import charts\n")
    assert [i for i in _nested_imports(tree) if not _allowed(i[1])] == [
        (2, "rig.report:html")]
