"""Instance and node failures with repair, as a SimPy process (a shipped extension, issue 31).

    extensions:
      - use: sim.extensions.failures:start
        params: {mtbf_gpu_hours: 50677, repair_s: 3600, node_fraction: 0.2}

The fleet's GPUs fail one at a time, each at rate 1 / `mtbf_gpu_hours` (exponential gaps, so the
cluster fails at GPUs / MTBF). The GPU hit is drawn uniformly: its instance fails (an instance
with a GPU missing cannot run its TP/EP layout), or, with probability `node_fraction`, its whole
node (host, NIC, power: the node's instances and its host-DRAM KV). It comes back `repair_s` later
(a restart on a spare, weights reload included). A failure that hits something already down is
skipped. What a failure does to requests and KV: sim.cluster.faults.

Rates (each a stated source or choice):
- `mtbf_gpu_hours` default 50,677: Meta's Llama 3 training run saw 419 unexpected interruptions in
  54 days on 16,384 H100 GPUs (Llama 3 Herd of Models, 2024, §3.3.4 [published]): 16,384 x 54 x 24
  / 419 GPU-hours per interruption. A training job stops on any interruption; an inference
  instance fails only with its own GPUs, which is what counting per GPU models. At this rate one
  H200 cell of 16 GPUs fails once in ~130 days: a day-long run rarely sees one, so the shipped
  scenario (scenarios/agent_1M_failures.yaml) states a stress rate.
- `node_fraction` default 0.2 [D]: the share of interruptions that take a node rather than a GPU
  (host, NIC, power); not published as such.
- `repair_s` default 3600 [D]: the time to bring an instance back on a spare node.
Seeded from the run's seed (stream `extension:failures`, sim.rng): same seed, same failures.
"""

from __future__ import annotations

import bisect

from sim.errors import InputError

LLAMA3_INTERRUPTIONS = 419  # unexpected interruptions, Llama 3 paper §3.3.4 [published]
LLAMA3_DAYS = 54
LLAMA3_GPUS = 16_384
MTBF_GPU_HOURS = LLAMA3_GPUS * LLAMA3_DAYS * 24 / LLAMA3_INTERRUPTIONS  # ~50,677 h per GPU
HOUR_S = 3600.0


class Failures:
    """The failure process of one run; `summary()` goes into summary.json."""

    def __init__(self, env, ops, *, mtbf_gpu_hours: float, repair_s: float, node_fraction: float) -> None:
        for name, value, ok, allowed in (
            ("mtbf_gpu_hours", mtbf_gpu_hours, mtbf_gpu_hours > 0, "> 0"),
            ("repair_s", repair_s, repair_s >= 0, ">= 0"),
            ("node_fraction", node_fraction, 0 <= node_fraction <= 1, "0 to 1"),
        ):
            if not ok:
                raise InputError(
                    "out of range",
                    where=f"sim.extensions.failures params.{name}",
                    value=value,
                    allowed=allowed,
                )
        self.env = env
        self.ops = ops
        self.mtbf_gpu_hours = float(mtbf_gpu_hours)
        self.repair_s = float(repair_s)
        self.node_fraction = float(node_fraction)
        self.rng = ops.rng("failures")
        self.instances = ops.instances()
        gpus = [ops.instance(i)["gpus"] for i in self.instances]
        self.first_gpu = [sum(gpus[:k]) for k in range(len(gpus))]  # a GPU drawn -> its instance
        self.gpus = sum(gpus)
        self.drawn = 0
        self.skipped = 0
        self.nodes_down: set[int] = set()
        env.process(self._run())

    def _run(self):
        rate_per_s = self.gpus / (self.mtbf_gpu_hours * HOUR_S)
        while True:
            yield self.env.timeout(float(self.rng.exponential(1.0 / rate_per_s)))
            gpu = int(self.rng.integers(self.gpus))
            whole_node = bool(self.rng.random() < self.node_fraction)
            self.drawn += 1
            index = self.instances[bisect.bisect_right(self.first_gpu, gpu) - 1]
            info = self.ops.instance(index)
            if info["state"] == "failed":
                self.skipped += 1
                continue
            node = info["node"]
            if whole_node:
                self.nodes_down.add(node)
                self.ops.fail_node(node)
            else:
                self.ops.fail_instance(index)
            self.env.process(self._repair(node, index if not whole_node else None))

    def _repair(self, node: int, index: int | None):
        """Bring back what failed `repair_s` from now; an instance on a node still down waits for the node."""
        yield self.env.timeout(self.repair_s)
        if index is None:
            self.nodes_down.discard(node)
            self.ops.restore_node(node)
        elif node not in self.nodes_down:
            self.ops.restore_instance(index)

    def summary(self, _model_summary: dict) -> dict:
        return {
            "mtbf_gpu_hours": self.mtbf_gpu_hours,
            "repair_s": self.repair_s,
            "node_fraction": self.node_fraction,
            "gpus": self.gpus,
            "failures_drawn": self.drawn,
            "failures_skipped_already_down": self.skipped,
            "source": "Llama 3 Herd of Models (Meta, 2024) §3.3.4: 419 unexpected interruptions in 54 days "
            "on 16,384 H100 GPUs = 50,677 GPU-hours per interruption",
        }


def start(
    env, ops, mtbf_gpu_hours: float = MTBF_GPU_HOURS, repair_s: float = 3600.0, node_fraction: float = 0.2
) -> Failures:
    """The extension's entry point (sim.extensions)."""
    return Failures(env, ops, mtbf_gpu_hours=mtbf_gpu_hours, repair_s=repair_s, node_fraction=node_fraction)
