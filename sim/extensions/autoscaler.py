"""A decode autoscaler, as a SimPy process (the second shipped extension, issue 31).

    extensions:
      - use: sim.extensions.autoscaler:start
        params: {pool: decode, min_instances: 1, add_above: 48, remove_below: 16, interval_s: 60}

The pool is declared at its largest size (`cluster.pools[].instances`); the autoscaler keeps
`min_instances` of them at the start and removes the rest. Every `interval_s` it reads the mean
decode batch (sequences) over the pool's serving instances: above `add_above` it adds one instance,
which serves after its weights load (`Operations.weights_load_s`: the hardware profile's NVMe read
rate) and is billed from the moment it is added; below `remove_below` it removes one (drained: what
it holds runs to the end; billing stops at once [D]: the node is handed back as it drains). One
step per interval, no hysteresis beyond the two thresholds. Cost is counted by the hours each
instance was actually held (summary.json `extensions.operations.usd_held`).
"""

from __future__ import annotations

from sim.errors import InputError


class Autoscaler:
    def __init__(
        self,
        env,
        ops,
        *,
        pool: str,
        min_instances: int,
        add_above: float,
        remove_below: float,
        interval_s: float,
    ) -> None:
        members = ops.instances(pool)
        if not 1 <= min_instances <= len(members):
            raise InputError(
                "out of range", where="sim.extensions.autoscaler params.min_instances", value=min_instances,
                allowed=f"1 to the pool's {len(members)} instances",
            )  # fmt: skip
        if not remove_below < add_above or interval_s <= 0:
            raise InputError(
                "remove_below must be < add_above and interval_s > 0",
                where="sim.extensions.autoscaler params",
                value={"remove_below": remove_below, "add_above": add_above, "interval_s": interval_s},
            )
        self.env, self.ops, self.pool = env, ops, pool
        self.add_above, self.remove_below, self.interval_s = (
            float(add_above),
            float(remove_below),
            float(interval_s),
        )
        self.warmup_s = ops.weights_load_s(pool)
        self.added = self.removed = 0
        self.peak_serving = min_instances
        for _ in range(len(members) - min_instances):
            ops.remove_instance(pool)
        env.process(self._run())

    def _serving(self) -> list[int]:
        return [i for i in self.ops.instances(self.pool) if self.ops.instance(i)["state"] == "serving"]

    def _run(self):
        while True:
            yield self.env.timeout(self.interval_s)
            serving = self._serving()
            if not serving:
                continue
            batch = sum(self.ops.instance(i)["decode_batch"] for i in serving) / len(serving)
            if batch > self.add_above:
                if self.ops.add_instance(self.pool, self.warmup_s) is not None:
                    self.added += 1
            elif batch < self.remove_below and self.ops.remove_instance(self.pool) is not None:
                self.removed += 1
            self.peak_serving = max(self.peak_serving, len(self._serving()))

    def summary(self, _model_summary: dict) -> dict:
        return {
            "pool": self.pool,
            "warmup_s": self.warmup_s,
            "instances_added": self.added,
            "instances_removed": self.removed,
            "peak_serving": self.peak_serving,
        }


def start(
    env,
    ops,
    pool: str = "decode",
    min_instances: int = 1,
    add_above: float = 48.0,
    remove_below: float = 16.0,
    interval_s: float = 60.0,
) -> Autoscaler:
    """The extension's entry point (sim.extensions)."""
    return Autoscaler(
        env, ops, pool=pool, min_instances=min_instances, add_above=add_above, remove_below=remove_below,
        interval_s=interval_s,
    )  # fmt: skip
