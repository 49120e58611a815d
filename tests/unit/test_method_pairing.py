"""A compressor paired with an exchange it cannot use is refused while the config is
composed: one line naming the setting and the fix, before torch or any run exists."""

import re

import pytest

from repro.config import compose
from repro.errors import UserError


@pytest.mark.parametrize("collective", ["ar_ring", "ar_tree", "auto"])
def test_topk_without_a_leader_cannot_ride_an_allreduce(collective):
    message = (
        f"method.collective={collective} with method.leader=none: an allreduce cannot sum "
        "Top-k's per-worker indices without a leader's; use method.leader=star or var, or "
        "method.collective=allgather"
    )
    with pytest.raises(UserError, match=re.escape(message)):
        compose(["method=topk", f"method.collective={collective}", "method.leader=none"])
    # each worker's own indices do travel by allgather
    cfg = compose(["method=topk", "method.collective=allgather", "method.leader=none"])
    assert (cfg.method.collective, cfg.method.leader) == ("allgather", "none")


def test_sign_bits_ride_an_allgather_only():
    with pytest.raises(UserError) as err:
        compose(["method=signsgd", "method.exchange=allreduce"])
    assert str(err.value) == (
        "method.exchange=allreduce cannot carry signsgd's per-worker sign bits; "
        "use method.exchange=allgather"
    )
    with pytest.raises(UserError, match=re.escape("method.exchange='ring' is unknown")):
        compose(["method=signsgd", "method.exchange=ring"])
