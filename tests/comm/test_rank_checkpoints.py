"""What each worker process of a run keeps in its checkpoint, on 2 gloo workers.

The run's logged points are replayed into the tracker by the first process after a restart;
the other workers log nothing, so their checkpoints must not carry the history, which grows
with the run's length (one copy per worker, per checkpoint, otherwise).
"""

from pathlib import Path

import pytest
import torch

from repro.train.checkpoint import step_dirs
from tests.helpers import train


@pytest.mark.slow
def test_only_the_first_worker_checkpoints_the_logged_points(tmp_path):
    summary = train(
        tmp_path,
        "trainer.engine=processes",
        "trainer.world_size=2",
        "trainer.steps=60",
        "trainer.eval_every=5",
        "trainer.checkpoint_every=50",
    )
    (step, step_dir), *_ = step_dirs(Path(summary["run_dir"]))
    assert step == 50
    first, other = (torch.load(step_dir / f"rank{r}.pt", weights_only=False)["log"] for r in (0, 1))
    assert [p["step"] for p in first["points"]] == list(range(5, 55, 5))
    assert other["points"] == []
    # every worker still knows the last point: a run with a target stops on all of them
    assert other["last_point"]["step"] == first["last_point"]["step"] == 50
    assert other["last_point"]["test/acc"] == first["last_point"]["test/acc"]
