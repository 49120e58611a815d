"""Atomic, per-rank checkpoints and the run directory's identity.

Layout under a run directory:
  config.yaml                 the run's config (its identity part decides compatibility)
  checkpoints/step_<S>/rank<r>.pt   each rank's full state after step S
  checkpoints/latest.json     {"step": S, "hash": ...}: written last, by rank 0, after every
                              rank's file is in place, so it only ever names a complete set
  summary.json                written when the run has finished

Each file is written to a temporary name and renamed, so a kill at any moment leaves either
the previous checkpoint or the new one, never a torn file. A full or read-only disk ends the
write with one `UserError` line naming the file, its temporary file removed; `latest.json`
still names the last complete checkpoint, and a step directory it does not name is removed
when the run starts again.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import torch
import yaml

from repro.errors import UserError
from repro.storage import atomic_write, probe_write, storage_error


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a synced temporary file and a rename."""
    atomic_write(path, lambda f: f.write(data), "run_dir", prefix=f".{path.name}.")


def write_json(path: Path, obj: dict) -> None:
    write_atomic(path, json.dumps(obj, indent=2, sort_keys=True, default=str).encode())


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def config_diff(old: dict, new: dict) -> list[str]:
    a, b = _flatten(old), _flatten(new)
    return [
        f"{k}: {a.get(k)!r} -> {b.get(k)!r}"
        for k in sorted(a.keys() | b.keys())
        if a.get(k) != b.get(k)
    ]


def check_run_dir(run_dir: Path, identity: dict) -> None:
    """Fail early, writing nothing, if `run_dir` cannot be written or holds another config."""
    existing = run_dir
    while not existing.exists():
        existing = existing.parent
    try:
        if not existing.is_dir():
            raise NotADirectoryError(f"{existing} is not a directory")
        probe_write(existing)
    except OSError as e:
        raise UserError(
            f"run_dir={run_dir} cannot be written ({e.strerror or e}); pass a writable run_dir=..."
        ) from None
    cfg_file = run_dir / "config.yaml"
    if cfg_file.exists():
        diff = config_diff(yaml.safe_load(cfg_file.read_text()) or {}, identity)
        if diff:
            raise UserError(
                f"run_dir={run_dir} holds a run of another config ({'; '.join(diff[:3])}"
                f"{' ...' if len(diff) > 3 else ''}); use a new run_dir or delete that one"
            )


def record_run_dir(run_dir: Path, identity: dict) -> None:
    """Create `run_dir` and record the config that owns it (after check_run_dir passed).

    Also removes the step directories `latest.json` does not name: a checkpoint that a full
    disk or a kill cut short would otherwise hold its space until the next commit. Every
    process of a run calls this before the rendezvous, so no worker is saving yet."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise storage_error(run_dir, e, "run_dir") from None
    if not (run_dir / "config.yaml").exists():
        write_atomic(run_dir / "config.yaml", yaml.safe_dump(identity, sort_keys=True).encode())
    committed = f"step_{latest_step(run_dir):08d}"
    for step_dir in (run_dir / "checkpoints").glob("step_*"):
        if step_dir.name != committed:
            shutil.rmtree(step_dir, ignore_errors=True)


def latest_step(run_dir: Path) -> int:
    meta = run_dir / "checkpoints" / "latest.json"
    return json.loads(meta.read_text())["step"] if meta.exists() else 0


def resume_hint(run_dir: Path) -> str:
    """What re-running the same command does after a run was cut short; read once every
    worker has ended, so `latest.json` names the last complete checkpoint."""
    step = latest_step(run_dir)
    if step:
        return f"re-running the same command resumes from step {step} ({run_dir / 'checkpoints'})"
    return "re-running the same command starts the run again (no checkpoint was written yet)"


def save_rank(run_dir: Path, step: int, rank: int, state: dict) -> None:
    """Write one rank's state for `step`; commit() makes it the one a restart loads."""
    save_model(run_dir / "checkpoints" / f"step_{step:08d}" / f"rank{rank}.pt", state)


def save_model(path: Path, state: dict) -> None:
    """Write `state` to `path` atomically, the same bytes for the same state.

    torch.save names the zip archive's inner folder after the file it writes to, here the
    random temporary name, so identical runs would write different files; an in-memory
    buffer always gets the folder `archive`. write_atomic then renames a synced temporary
    file into place (never a torn file) and turns a full disk into one line."""
    buf = io.BytesIO()
    torch.save(state, buf)
    write_atomic(path, buf.getvalue())


def commit(run_dir: Path, step: int, config_hash: str, world_size: int) -> None:
    """Rank 0, after all ranks saved: point latest.json at `step`, drop older checkpoints."""
    ckpt = run_dir / "checkpoints"
    write_json(ckpt / "latest.json", {"step": step, "hash": config_hash, "world_size": world_size})
    for old in ckpt.glob("step_*"):
        if old.name != f"step_{step:08d}":
            shutil.rmtree(old, ignore_errors=True)


def load_rank(run_dir: Path, rank: int, config_hash: str) -> dict | None:
    meta_path = run_dir / "checkpoints" / "latest.json"
    if not meta_path.exists():
        return None
    meta = json.loads(meta_path.read_text())
    if meta["hash"] != config_hash:
        raise UserError(
            f"the checkpoint in {run_dir} was written by another config (hash {meta['hash']}, "
            f"this run {config_hash}); use a new run_dir or delete that one"
        )
    path = run_dir / "checkpoints" / f"step_{meta['step']:08d}" / f"rank{rank}.pt"
    return torch.load(path, weights_only=False)
