"""Per-request specdraft options: the forms each front end can carry, and clear refusals."""

import pytest

from specdraft.proposers.config import request_options, request_speculates


@pytest.mark.parametrize("extra_args, speculate", [
    (None, True),
    ({}, True),
    ({"session_id": "x", "kv_transfer_params": {}}, True),          # not ours
    ({"specdraft": {"speculate": False}}, False),                   # offline SamplingParams
    ({"specdraft_speculate": False}, False),                        # vllm_xargs (JSON false)
    ({"specdraft_speculate": 0}, False),                            # what pydantic makes of false
    ({"specdraft_speculate": "False"}, False),
    ({"specdraft_speculate": 1}, True),
    ({"specdraft_speculate": "true"}, True),
])
def test_forms_of_the_opt_out(extra_args, speculate):
    assert request_speculates(extra_args) is speculate


@pytest.mark.parametrize("extra_args, named", [
    ({"specdraft_speculat": False}, "unknown per-request specdraft option 'specdraft_speculat'"),
    ({"specdraftx": 1}, "unknown per-request specdraft option 'specdraftx'"),
    ({"specdraft": {"speculat": False}}, "unknown per-request specdraft option 'specdraft.speculat'"),
    ({"specdraft": '{"speculate": false}'}, "per-request option 'specdraft' must be an object"),
    ({"specdraft_speculate": 2}, "specdraft_speculate=2"),
    ({"specdraft_speculate": 0.0}, "specdraft_speculate=0.0"),
    ({"specdraft_speculate": [0]}, "specdraft_speculate=[0]"),
])
def test_bad_keys_and_values_are_named_with_the_accepted_forms(extra_args, named):
    with pytest.raises(ValueError) as e:
        request_options(extra_args)
    assert named in str(e.value)
    assert '"specdraft_speculate": true | false' in str(e.value)
    assert request_speculates(extra_args) is True  # the worker never fails on one
