"""V4.1's SWA pool on a real trace (issue 15, defect 1): sessions of the Weka dev file repeat their
parent's input up to its last 64-token block, never to the token, so a rule that wanted the hit to
end exactly where the stored sequence ended found no ring in the pool (0 hits in a replay of the
whole file). Both models restore the window saved at the parent's input end.

GIVEN 20 sessions of ../shared's Weka dev trace (skipped where absent), disaggregated, 64-token
blocks, WHEN both models replay them, THEN V4.1 takes most windows from the pool or HBM and
replays the rest; V4 hits where a window was kept (sim.kvcache.lookup, sequence_ends) and re-runs none,
so its hit rate is V4.1's less the hits that had no window.
"""

from __future__ import annotations

import pyarrow.compute as pc
import pyarrow.parquet as pq

from sim.api import run_scenario

from .helpers import DISAGG, scenario


def test_imported_block_aligned_hits_find_their_window(weka_trace, tmp_path):
    table = pq.read_table(weka_trace)
    sessions = pc.unique(table["session_id"])[:20]
    part = tmp_path / "weka20.parquet"
    pq.write_table(table.filter(pc.is_in(table["session_id"], sessions)), part)
    scn = scenario(tmp_path, part, models=("deepseek-v4-flash", "deepseek-v4.1-flash"), pools=DISAGG,
                   cache={"block_tokens": 64})  # fmt: skip
    models = run_scenario(scn).summary["models"]
    v4, v41 = models["deepseek-v4-flash"], models["deepseek-v4.1-flash"]
    assert v41["swa_pool_hits"] > 0
    assert v41["swa_replays"] < v41["requests_completed"] / 2
    # V4 (DeepSeek's prefix units, no engine named) never re-runs a window: a hit without one is shorter instead
    assert v4["swa_replays"] == 0
    assert 0.9 * v41["prefix_hit_rate"] < v4["prefix_hit_rate"] <= v41["prefix_hit_rate"]
