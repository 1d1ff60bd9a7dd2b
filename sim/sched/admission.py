"""Admission: every request that arrives either completes or is rejected with one of these
reasons (counted in the summary, written in the request log):

- context_too_long: input + output tokens exceed the model's context (checked on arrival);
- kv_exceeds_hbm: its KV cannot fit in any instance's HBM even alone (on arrival, or by the
  instance that finds it cannot ever admit it);
- queue_full: the chosen instance already holds `scheduler.admission.max_queue_per_instance`;
- queue_timeout: it waited longer than `scheduler.admission.max_queue_wait_s` for HBM;
- unfinished_at_end: still in the system when the run's drain limit ended it.

The checks themselves run inline where the state is (sim.cluster.cluster, sim.cluster.instance):
they are on the path of every request.
"""

REASONS = ("context_too_long", "kv_exceeds_hbm", "queue_full", "queue_timeout", "unfinished_at_end")
