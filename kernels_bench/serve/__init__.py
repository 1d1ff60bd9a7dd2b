"""A minimal serving engine for the reduced V4-shaped model (issue 14): the step contract (``step_api``), the
paged KV block pool with prefix hashing (``blocks``), the scheduler (``engine``), the closed-loop trace replay
(``replay``), the logs (``records``) and the replay trace builder (``trace``).

The engine's logic is pure Python and runs on the CPU with a stand-in step function; only the step function
(built by the reduced model) touches the GPU.
"""
