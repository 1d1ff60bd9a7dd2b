"""The resumable ledger: one atomic Parquet part per finished candidate."""

import pandas as pd

from sim.plan.ledger import METRIC_COLUMNS, Ledger, metric_columns


def _row(key, cost=1.0):
    return {
        "key": key,
        "model": "m",
        "combo": 0,
        "combo_label": "a/b",
        "scale": 2,
        "nodes_json": '{"prefill": 1, "decode": 2}',
        "total_nodes": 3,
        "total_gpus": 24,
        "seed": 1,
        "feasible": True,
        "violations": "",
        **metric_columns({"cost_per_task_usd": cost, "ttft_p99_s": 2, "extra_metric": "x"}),
        "decode_tokens_per_s_json": '{"decode": 5000.0}',
        "scenario_json": "{}",
        "wall_s": 0.5,
    }


def test_append_then_load_round_trips_and_the_folder_reads_as_one_table(tmp_path):
    ledger = Ledger(tmp_path / "c")
    ledger.append(_row("k1", 1.5))
    ledger.append(_row("k2", 2.5))
    rows = Ledger(tmp_path / "c").load()
    assert sorted(rows) == ["k1", "k2"]
    assert rows["k1"]["cost_per_task_usd"] == 1.5
    assert rows["k1"]["ttft_p99_s"] == 2.0 and rows["k1"]["tpot_p99_s"] is None
    assert '"extra_metric": "x"' in rows["k1"]["summary_json"]  # the whole summary is kept
    table = pd.read_parquet(tmp_path / "c")
    assert sorted(table["key"]) == ["k1", "k2"]
    assert set(METRIC_COLUMNS) <= set(table.columns)


def test_same_key_twice_is_one_candidate(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.append(_row("k1", 1.0))
    ledger.append(_row("k1", 1.0))
    assert len(ledger.load()) == 1
    assert len(list(tmp_path.glob("part-*.parquet"))) == 1


def test_a_killed_write_leaves_no_candidate_and_is_cleaned(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.append(_row("k1"))
    (tmp_path / ".part-k2.parquet.123.tmp").write_bytes(b"PAR1 half written")
    assert sorted(pd.read_parquet(tmp_path)["key"]) == ["k1"]  # readers skip hidden files
    assert list(Ledger(tmp_path).load()) == ["k1"]
    assert not list(tmp_path.glob(".*"))
