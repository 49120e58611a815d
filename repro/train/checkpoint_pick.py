"""Which checkpoint a restart loads: the newest whose files all match the checksums
recorded when they were written.

A damaged newest checkpoint (a bad sector, a copy cut short, a hand edit) or a damaged
`latest.json` must not lock a run for good, least of all under a SLURM requeue that would
fail the same way forever: the run falls back to the newest good checkpoint, kept for
this (`trainer.keep_checkpoints`), and says in one line which step and why. A run is
deterministic from any checkpoint, so it still ends exactly as an uninterrupted run
would. With none good it stops with one line naming the directory and the fix, rather
than starting over on its own, which would throw away a long run's progress unasked.

What a start would find is known before it starts: a finished run's summary, or the refusal
of a run whose checkpoints are all damaged, so that a run set says so before any run starts
(without torch: the set's own process only reads the run directories).
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from repro.config import Config, config_hash, identity, run_dir_of
from repro.errors import UserError
from repro.train.checkpoint import (
    COMMIT,
    Damaged,
    changed_keys,
    check_run_dir,
    check_writable,
    read_checked_json,
    recorded_identity,
    repair_config,
    step_dirs,
)


@dataclass
class Choice:
    """The step a restart resumes from (0 and no directory: the beginning), and why the
    newer checkpoints, if any, were passed over."""

    step: int = 0
    step_dir: Path | None = None
    passed_over: list[str] = field(default_factory=list)

    def line(self, run_dir: Path) -> str:
        """The one line saying that the run falls back, or "" when it does not."""
        if not self.passed_over or self.step_dir is None:
            return ""
        return (
            f"note: {run_dir / 'checkpoints'}: resuming from step {self.step}, the newest good "
            f"checkpoint ({'; '.join(self.passed_over)})"
        )


def _pointer(ckpt: Path) -> tuple[int | None, str]:
    """(the step latest.json names or None, why it cannot be read or "")."""
    path = ckpt / "latest.json"
    if not path.exists():
        return None, ""
    try:
        return int(read_checked_json(path)["step"]), ""
    except (OSError, Damaged, KeyError, TypeError, ValueError) as e:
        return None, f"{path.name}: {e}" if isinstance(e, Damaged) else f"{path.name} unreadable"


def _verify(step_dir: Path, config_hash: str) -> None:
    """Raise `Damaged` unless every rank file of the committed `step_dir` matches its
    recorded checksum; a commit of another config is refused outright."""
    record = read_checked_json(step_dir / COMMIT)
    try:
        written_for, ranks, files = record["hash"], int(record["world_size"]), record["files"]
    except (KeyError, TypeError, ValueError):
        raise Damaged(f"{COMMIT} lacks its fields") from None
    if written_for != config_hash:
        raise UserError(
            f"the checkpoint in {step_dir} was written by another config (hash {written_for}, "
            f"this run {config_hash}); use a new run_dir or delete that one"
        )
    for rank in range(ranks):
        name = f"rank{rank}.pt"
        try:
            data = (step_dir / name).read_bytes()
        except FileNotFoundError:
            raise Damaged(f"{name} is missing") from None
        if hashlib.sha256(data).hexdigest() != files.get(name):
            raise Damaged(f"{name} does not match the checksum recorded when it was written")


def legacy_step(run_dir: Path) -> int | None:
    """The step a `latest.json` written before checksums were recorded names (it has no
    `sha256`; it was written once every rank's file was in place): a run cut short then
    still resumes from it, unverified. None for any other pointer."""
    try:
        meta = json.loads((run_dir / "checkpoints" / "latest.json").read_bytes())
        return None if "sha256" in meta else int(meta["step"])
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _check_legacy(ckpt: Path, step_dir: Path, config_hash: str) -> None:
    """A checkpoint of the format before checksums: its config and its rank files."""
    meta = read_checked_json(ckpt / "latest.json")
    if meta.get("hash") != config_hash:
        raise UserError(
            f"the checkpoint in {ckpt} was written by another config (hash {meta.get('hash')}, "
            f"this run {config_hash}); use a new run_dir or delete that one"
        )
    ranks = int(meta.get("world_size", 1))
    missing = [r for r in range(ranks) if not (step_dir / f"rank{r}.pt").exists()]
    if missing:
        raise UserError(
            f"{step_dir} lacks rank{missing[0]}.pt; remove {ckpt} to start the run over"
        )


def choose(run_dir: Path, config_hash: str) -> Choice:
    """The newest good checkpoint of `run_dir`; UserError when checkpoints were committed
    and none is good. Reads every rank's file of the steps it tries, so every process of
    a run, reading the same files, picks the same step."""
    ckpt = run_dir / "checkpoints"
    pointed, pointer_damage = _pointer(ckpt)
    passed_over = [pointer_damage] if pointer_damage else []
    committed = pointed is not None or bool(pointer_damage)
    legacy = legacy_step(run_dir)
    for step, step_dir in step_dirs(run_dir):
        if step == legacy and not (step_dir / COMMIT).exists():
            _check_legacy(ckpt, step_dir, config_hash)
            return Choice(step, step_dir, passed_over)
        if not (step_dir / COMMIT).exists():
            if step == pointed:
                passed_over.append(f"step {step}: its {COMMIT} is missing")
            continue  # cut short before its commit: never a checkpoint
        committed = True
        try:
            _verify(step_dir, config_hash)
        except (OSError, Damaged) as e:
            passed_over.append(f"step {step}: {e}")
            continue
        if (
            pointed is not None
            and pointed > step
            and not any(f"step {pointed}:" in p for p in passed_over)
        ):
            passed_over.append(f"latest.json names step {pointed}, which is gone")
        return Choice(step, step_dir, passed_over)
    if committed:
        why = "; ".join(passed_over) or "none is complete"
        raise UserError(
            f"{ckpt} holds no good checkpoint ({why}); remove {ckpt} to start the run over"
        )
    return Choice()


def finished_summary(cfg: Config) -> dict | None:
    """The summary of this config's finished run, or None; a run directory holding another
    config is refused (one line) rather than taken for this run's. A damaged summary is
    removed, saying so: the run then ends again from its last checkpoint and writes it anew
    (the same numbers, the run being deterministic from a checkpoint). A finished run is
    only read, so it may lie on a read-only disk; a run still to make must be writable."""
    run_dir = run_dir_of(cfg)
    check_run_dir(run_dir, identity(cfg), writing=False)
    path = run_dir / "summary.json"
    if not path.exists():
        check_writable(run_dir)  # the run is still to make there
        _check_tracking(cfg, run_dir)
        return None
    try:
        done = read_checked_json(path)
    except Damaged as e:
        check_writable(run_dir)  # removing it, and running again, write there
        print(
            f"note: {run_dir}: {e}; finishing the run again from its last checkpoint",
            file=sys.stderr,
        )
        path.unlink(missing_ok=True)
        return None
    repair_config(run_dir, identity(cfg))
    return {**done, "run_dir": str(run_dir)}  # where it is now, not where it was made from


def _check_tracking(cfg: Config, run_dir: Path) -> None:
    """A cut-short run resumes the wandb run it logged to, or is refused: resumed untracked
    its history ended where it was cut short while its summary said it finished (and `repro
    runs ls` called the file damaged); resumed under another project or group, its one run
    id was split between two."""
    from repro.track.naming import run_identity
    from repro.track.runs import logged_to

    logged = logged_to(run_dir)
    if logged is None:
        return
    run_id, project, group = logged
    if cfg.tracking.resolved_mode() == "disabled":
        fix = "resume it tracked (tracking=wandb_offline), or use a new run_dir"
    elif (project, group) != (cfg.tracking.project, run_identity(cfg).group):
        fix = f"resume it there (tracking.project={project} tracking.group={group})"
    else:
        return
    raise UserError(
        f"run_dir={run_dir} logs to wandb run {run_id} (project {project}, group {group}); {fix}"
    )


def finished_or_resumable(cfg: Config) -> dict | None:
    """`finished_summary`, and for a run not finished, the refusal its checkpoints would
    meet at the start (none good), so that a run set can report it before any run starts."""
    done = finished_summary(cfg)
    if done is None:
        choose(run_dir_of(cfg), config_hash(cfg))
    return done


def shorter_run_note(cfg: Config, run_dir: Path) -> str | None:
    """A line for a run about to start in a new `run_dir` beside a finished run of the same
    label and config but shorter (fewer `trainer.steps`, or a smaller
    `trainer.time_budget_s`). The length is part of a run's identity, so lengthening a run
    starts a new one from step 0 instead of extending the finished one: said, since the
    command gives no other sign of it."""
    if cfg.run_dir or run_dir.exists() or not run_dir.parent.is_dir():
        return None
    mine = identity(cfg)
    for other in sorted(run_dir.parent.iterdir()):
        if not other.name.startswith(f"{cfg.label}-") or not (other / "summary.json").exists():
            continue
        try:
            recorded, _ = recorded_identity(other)
        except OSError:
            continue
        changed = changed_keys(recorded, mine) if recorded else {}
        if changed and all(_longer(k, was, now) for k, (was, now) in changed.items()):
            was = ", ".join(f"{k}={old}" for k, (old, _) in changed.items())
            return (
                f"note: {other} holds this run finished at {was}; a run's length is part of "
                "its identity, so this one starts from step 0 in a new directory instead of "
                "extending it"
            )
    return None


def _longer(key: str, was, now) -> bool:
    """Whether setting `key` going from `was` to `now` lengthens a run, and does nothing
    else (a time budget of 0 is none: adding one shortens the run)."""
    if key == "trainer.steps":
        return now > was
    if key == "trainer.time_budget_s":
        return was > 0 and (now == 0 or now > was)
    return False
