import pytest

from kernels_bench.serve.step_api import SeqWork, StepFunction, StepPlan, check_step_function


class _Fn:
    block_tokens = 256
    num_blocks = 8

    def __call__(self, plan: StepPlan) -> None:
        pass


def test_plan_counts() -> None:
    d = SeqWork(seq_id=1, block_ids=(0,), context_tokens=10, new_tokens=1, token_ids=(5,))
    p = SeqWork(seq_id=2, block_ids=(1, 2), context_tokens=256, new_tokens=3, token_ids=(1, 2, 3))
    plan = StepPlan(decode=(d,), prefill=(p,))
    assert (plan.decode_batch, plan.prefill_tokens, p.end_tokens, plan.is_empty) == (1, 3, 259, False)
    assert isinstance(_Fn(), StepFunction)
    check_step_function(_Fn())


def test_bad_work_rejected() -> None:
    with pytest.raises(ValueError, match="2 token ids for 3"):
        SeqWork(seq_id=1, block_ids=(0,), context_tokens=0, new_tokens=3, token_ids=(1, 2))
    fn = _Fn()
    fn.block_tokens = 100
    with pytest.raises(ValueError, match="multiple of 256"):
        check_step_function(fn)
