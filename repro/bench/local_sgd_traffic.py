"""Communication of local SGD per 100 steps against synchronous SGD, through the real trainer.

PASGD (Wang & Joshi) averages models once every tau local steps, so its collectives and
bytes per step must fall as 1/tau, while synchronous SGD allreduces the gradients every step
Each method trains the synthetic workload on 2 gloo workers (the process
engine, pinned: its records are the real collectives' sizes) for a step count divisible by
every tau; the counts come from the run's own summary (`comm/bytes`,
`comm/collectives`). Local SGD's message is the model plus one loss slot, so its bytes at
tau=1 sit a hair above sync's gradient bytes.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from repro.config import compose
from repro.train.entry import run_training

TAUS = (1, 4, 16)
STEPS = 160  # divisible by every tau, so each run ends on an averaging step
COMMON = [
    "workload=synthetic_mlp",
    "trainer.world_size=2",
    "trainer.engine=processes",
    "trainer.batch_size=16",
    f"trainer.steps={STEPS}",
    f"trainer.eval_every={STEPS}",
    "trainer.checkpoint_every=100000",
    "trainer.progress=false",
    "optim.name=sgd",
    "optim.lr=0.1",
    "tracking=disabled",
]


def _per_100_steps(root: Path, label: str, *overrides: str) -> tuple[float, float]:
    cfg = compose(
        [
            *COMMON,
            f"runs_root={root / 'runs'}",
            f"data.root={root / 'data'}",
            f"experiment.label={label}",
            *overrides,
        ]
    )
    summary = run_training(cfg)
    scale = 100 / summary["step"]
    return summary["comm/bytes"] * scale, summary["comm/collectives"] * scale


def run() -> list[str]:
    with tempfile.TemporaryDirectory(prefix="bench-local-sgd-") as tmp:
        root = Path(tmp)
        sync_bytes, sync_coll = _per_100_steps(root, "sync", "method=sync")
        lines = [
            f"per 100 steps, 2 workers, synthetic MLP; sync: {sync_bytes:,.0f} bytes, "
            f"{sync_coll:g} collectives",
            f"{'tau':>4}{'bytes':>12}{'collectives':>13}{'bytes/sync':>12}{'x tau':>8}",
        ]
        falls = True
        for tau in TAUS:
            nbytes, coll = _per_100_steps(
                root, f"local_sgd_tau{tau}", "method=local_sgd", f"method.tau={tau}"
            )
            ratio = nbytes / sync_bytes
            lines.append(f"{tau:>4}{nbytes:>12,.0f}{coll:>13g}{ratio:>12.4f}{ratio * tau:>8.3f}")
            # Exactly 1/tau collectives; bytes within the one extra loss slot per message.
            falls &= coll * tau == sync_coll and abs(ratio * tau - 1) < 0.01
    lines.append("collectives and bytes fall as 1/tau: " + ("yes" if falls else "NO"))
    return lines


if __name__ == "__main__":
    print("\n".join(run()))
