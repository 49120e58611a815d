"""Atomic, per-rank, checksummed checkpoints and the run directory's identity.

Layout under a run directory:
  config.yaml                 the run's config (its identity part decides compatibility)
  checkpoints/step_<S>/rank<r>.pt   each rank's full state after step S
  checkpoints/step_<S>/commit.json  {"step", "hash", "world_size", "files": {name: sha256}}:
                              written by rank 0 once every rank's file is in place, so a step
                              directory without it was cut short and is never loaded
  checkpoints/latest.json     {"step": S, "hash": ...}: the newest commit, written after it
  summary.json                written when the run has finished

The newest `trainer.keep_checkpoints` committed steps are kept (2 by default), so a damaged
newest one leaves one to fall back to (`repro.train.checkpoint_pick`). Each file is written to
a temporary name and renamed, so a kill at any moment leaves either the previous checkpoint
or the new one, never a torn file; the checksums catch what a rename cannot (a bad sector,
a copy cut short, a hand edit). A full or read-only disk ends the write with one
`UserError` line naming the file, its temporary file removed; a step directory with no
commit record is removed when the run starts again.

The small JSON files carry a `sha256` of their own content (`write_checked_json`), so a
flipped byte that still parses is caught as well. Torch is imported only to write or read a
rank's state: a run set's own process reads its run directories (finished, resumable,
damaged) without paying torch's seconds of start-up.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import sys
from pathlib import Path

import yaml

from repro.errors import StorageError, UserError
from repro.storage import atomic_write, make_dir, probe_write

COMMIT = "commit.json"
CONFIG_FILE = "config.yaml"
STEP_PREFIX = "step_"
# What a run directory holds by name, and whether each is a folder: one of the other kind in
# its place (a copy gone wrong, a hand edit) is named before the run reads or writes there.
RUN_ENTRIES = {"checkpoints": True, "wandb": True, CONFIG_FILE: False, "summary.json": False}


class Damaged(Exception):
    """A state file that cannot be what was written: unreadable, or not its checksum."""


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a synced temporary file and a rename."""
    atomic_write(path, lambda f: f.write(data), "run_dir", prefix=f".{path.name}.")


def write_json(path: Path, obj: dict) -> None:
    write_atomic(path, json.dumps(obj, indent=2, sort_keys=True, default=str).encode())


def _digest(obj: dict) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def write_checked_json(path: Path, obj: dict) -> None:
    """`obj` plus a `sha256` of its own content, read back by `read_checked_json`."""
    plain = json.loads(json.dumps(obj, default=str))  # the form a reader gets back
    write_json(path, {**plain, "sha256": _digest(plain)})


def read_checked_json(path: Path) -> dict:
    """The object `write_checked_json` wrote to `path` (without its checksum); `Damaged`
    when the file is not valid JSON or not its checksum. A file written before checksums
    were recorded has none and is taken as it is."""
    try:
        obj = json.loads(path.read_bytes())
    except (UnicodeDecodeError, ValueError) as e:
        raise Damaged(f"{path.name} is not valid JSON ({type(e).__name__})") from None
    if not isinstance(obj, dict):
        raise Damaged(f"{path.name} holds no JSON object")
    recorded = obj.pop("sha256", None)
    if recorded is not None and recorded != _digest(obj):
        raise Damaged(f"{path.name} does not match its recorded checksum")
    return obj


def changed_keys(old: dict, new: dict) -> dict[str, tuple]:
    """The dotted settings whose values differ between two nested configs: key -> (old
    value, new value), in key order."""
    from repro.config import flat

    a, b = flat(old), flat(new)
    return {k: (a.get(k), b.get(k)) for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)}


def config_diff(old: dict, new: dict) -> list[str]:
    return [f"{k}: {a!r} -> {b!r}" for k, (a, b) in changed_keys(old, new).items()]


def step_dirs(run_dir: Path) -> list[tuple[int, Path]]:
    """(step, directory) of every step directory under `run_dir`, newest first."""
    found = []
    for d in (run_dir / "checkpoints").glob(f"{STEP_PREFIX}*"):
        digits = d.name[len(STEP_PREFIX) :]
        if digits.isdigit():
            found.append((int(digits), d))
    return sorted(found, reverse=True)


def committed_hashes(run_dir: Path) -> set[str]:
    """The config hashes the intact commit records of `run_dir` were written for."""
    hashes = set()
    for _, d in step_dirs(run_dir):
        try:
            hashes.add(str(read_checked_json(d / COMMIT)["hash"]))
        except (OSError, Damaged, KeyError):
            continue
    return hashes


def recorded_identity(run_dir: Path) -> tuple[dict | None, str]:
    """(the identity config.yaml records, "") or (None, why it cannot be read)."""
    try:
        recorded = yaml.safe_load((run_dir / CONFIG_FILE).read_bytes())
    except (UnicodeDecodeError, yaml.YAMLError) as e:
        return None, f"it is not valid YAML ({type(e).__name__})"
    if not isinstance(recorded, dict):
        return None, "it holds no mapping of settings"
    return recorded, ""


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # a name too long to look up: not there, and refused below
        return False


def _check_name_lengths(run_dir: Path, existing: Path) -> None:
    """Refuse a run directory whose names the file system cannot hold (ENAMETOOLONG),
    naming the settings that make them: the experiment's name and label, or run_dir."""
    longest = os.pathconf(existing, "PC_NAME_MAX")
    for part in run_dir.relative_to(existing).parts:
        if len(os.fsencode(part)) > longest:
            raise UserError(
                f"the run directory name {part[:40]}... is {len(os.fsencode(part))} bytes long "
                f"and the file system takes at most {longest}; shorten experiment.label "
                "(or experiment.name), or set a shorter run_dir=..."
            )


def _nearest_existing(run_dir: Path) -> Path:
    """`run_dir`, or the folder it would be made in: its nearest existing ancestor."""
    existing = run_dir
    while not _exists(existing):
        existing = existing.parent
    return existing


def _unwritable(run_dir: Path, err: OSError) -> StorageError:
    """The run's folder is `run_dir=` where given, else under `runs_root=`: the fix names
    both, the user having set one of them."""
    return StorageError(
        f"the run folder {run_dir} cannot be written ({err.strerror or err}); pass a writable "
        "runs_root=... (or run_dir=..., the run's own folder)"
    )


def check_writable(run_dir: Path) -> None:
    """Fail early, writing nothing, if a run cannot be made or finished in `run_dir`: its
    disk is full or read-only, or the folder is not ours to write."""
    try:
        probe_write(_nearest_existing(run_dir))
    except OSError as e:
        raise _unwritable(run_dir, e) from None


def check_run_dir(run_dir: Path, identity: dict, writing: bool = True) -> None:
    """Fail early, writing nothing, if `run_dir` cannot be written (`check_writable`, when
    `writing`: a finished run is only read) or holds another config.

    A config.yaml that is damaged, or disagrees with the hash its run's intact commit
    records were written for (which only damage or a hand edit makes), is not taken for
    another config's: `record_run_dir` writes it again, saying so. One that is intact and
    another intact commit's is that config's, whatever checkpoint of this one was copied in."""
    from repro.config import hash_of

    existing = _nearest_existing(run_dir)
    if not existing.is_dir():
        raise _unwritable(run_dir, NotADirectoryError(f"{existing} is not a directory"))
    if writing:
        check_writable(run_dir)
    _check_name_lengths(run_dir, existing)
    for name, folder in RUN_ENTRIES.items():
        path = run_dir / name
        if path.exists() and path.is_dir() != folder:
            found, kind = ("file", "folder") if folder else ("folder", "file")
            raise UserError(
                f"{path} is a {found} where the run keeps its {name} {kind}; move it away, "
                "or use a new run_dir"
            )
    cfg_file, mine, hashes = run_dir / CONFIG_FILE, hash_of(identity), committed_hashes(run_dir)
    if not cfg_file.exists():
        _check_unrecorded(run_dir, mine, hashes)
        return
    recorded, why = recorded_identity(run_dir)
    if mine in hashes and (recorded is None or hash_of(recorded) not in hashes):
        return  # config.yaml damaged or edited: its run's commit records say it is ours
    if recorded is None:
        raise UserError(
            f"{cfg_file} is damaged ({why}) and no intact checkpoint says whose run this is; "
            f"delete that file if {run_dir} is this config's run, or use a new run_dir"
        )
    diff = config_diff(recorded, identity)
    if diff:
        raise UserError(
            f"run_dir={run_dir} holds a run of another config ({'; '.join(diff[:3])}"
            f"{' ...' if len(diff) > 3 else ''}); use a new run_dir or delete that one"
        )


def _check_unrecorded(run_dir: Path, mine: str, hashes: set[str]) -> None:
    """A run directory without config.yaml is this run's only where its intact commit
    records say so, or where it holds nothing of a run: another config's checkpoints, or a
    finished summary no record vouches for, would be taken for this run's."""
    others = sorted(hashes - {mine})
    if others:
        raise UserError(
            f"run_dir={run_dir} has no {CONFIG_FILE} and holds checkpoints of another config "
            f"(hash {others[0]}, this one's is {mine}); use a new run_dir or delete that one"
        )
    if not hashes and (run_dir / "summary.json").exists():
        raise UserError(
            f"run_dir={run_dir} holds a finished run's summary.json but no {CONFIG_FILE} or "
            "checkpoint says whose; use a new run_dir, or delete that one"
        )


def repair_config(run_dir: Path, identity: dict) -> None:
    """Write config.yaml again if it is damaged (`check_run_dir` found it this run's by
    its commit records), saying so; nothing when it is intact."""
    cfg_file = run_dir / CONFIG_FILE
    recorded = recorded_identity(run_dir)[0] if cfg_file.exists() else None
    if recorded is None or config_diff(recorded, identity):
        if cfg_file.exists():
            print(f"note: {cfg_file} was damaged; written again from this config", file=sys.stderr)
        write_atomic(cfg_file, yaml.safe_dump(identity, sort_keys=True).encode())


def record_run_dir(run_dir: Path, identity: dict) -> None:
    """Create `run_dir` and record the config that owns it (after check_run_dir passed).

    Also removes the step directories without a commit record: a checkpoint that a full
    disk or a kill cut short would otherwise hold its space until the next commit. The
    process holding the run's lock (the launcher, or rank 0 of an external launch) calls
    this before the rendezvous, so no worker of the run is saving yet."""
    make_dir(run_dir, "run_dir")
    repair_config(run_dir, identity)
    from repro.train.checkpoint_pick import legacy_step

    legacy = legacy_step(run_dir)
    for step, step_dir in step_dirs(run_dir):
        if not (step_dir / COMMIT).exists() and step != legacy:
            shutil.rmtree(step_dir, ignore_errors=True)


def latest_step(run_dir: Path) -> int:
    """The step `latest.json` names; 0 when there is none or it cannot be read."""
    try:
        return int(read_checked_json(run_dir / "checkpoints" / "latest.json")["step"])
    except (OSError, Damaged, KeyError, TypeError, ValueError):
        return 0


def resume_hint(run_dir: Path) -> str:
    """What re-running the same command does after a run was cut short; read once every
    worker has ended, so `latest.json` names the last complete checkpoint."""
    step = latest_step(run_dir)
    if step:
        return f"re-running the same command resumes from step {step} ({run_dir / 'checkpoints'})"
    return "re-running the same command starts the run again (no checkpoint was written yet)"


def save_rank(run_dir: Path, step: int, rank: int, state: dict) -> None:
    """Write one rank's state for `step` and its checksum beside it; commit() records the
    checksums of every rank and makes the step one a restart loads."""
    step_dir = run_dir / "checkpoints" / f"{STEP_PREFIX}{step:08d}"
    data = save_model(step_dir / f"rank{rank}.pt", state)
    write_atomic(step_dir / f"rank{rank}.sha256", hashlib.sha256(data).hexdigest().encode())


def save_model(path: Path, state: dict) -> bytes:
    """Write `state` to `path` atomically, the same bytes for the same state; returns them.

    torch.save names the zip archive's inner folder after the file it writes to, here the
    random temporary name, so identical runs would write different files; an in-memory
    buffer always gets the folder `archive`. write_atomic then renames a synced temporary
    file into place (never a torn file) and turns a full disk into one line."""
    import torch

    buf = io.BytesIO()
    torch.save(state, buf)
    data = buf.getvalue()
    write_atomic(path, data)
    return data


def commit(run_dir: Path, step: int, config_hash: str, world_size: int, keep: int = 2) -> None:
    """Rank 0, after all ranks saved: record the step's checksums, point latest.json at it,
    and keep only the newest `keep` committed steps up to it."""
    ckpt = run_dir / "checkpoints"
    step_dir = ckpt / f"{STEP_PREFIX}{step:08d}"
    files = {}
    for rank in range(world_size):
        sidecar = step_dir / f"rank{rank}.sha256"
        if sidecar.exists():
            files[f"rank{rank}.pt"] = sidecar.read_text(encoding="utf-8").strip()
    record = {"step": step, "hash": config_hash, "world_size": world_size, "files": files}
    if step_dir.is_dir():
        write_checked_json(step_dir / COMMIT, record)
        for rank in range(world_size):  # recorded in the commit now
            (step_dir / f"rank{rank}.sha256").unlink(missing_ok=True)
    write_checked_json(ckpt / "latest.json", {"step": step, "hash": config_hash})
    kept = 0
    for s, d in step_dirs(run_dir):
        if s <= step and (d / COMMIT).exists() and kept < keep:
            kept += 1
        else:  # older than the kept ones, or steps after this one a fallback left behind
            shutil.rmtree(d, ignore_errors=True)


def load_rank(run_dir: Path, rank: int, config_hash: str) -> dict | None:
    """This rank's state at the newest good checkpoint, or None to start from step 0."""
    from repro.train.checkpoint_pick import choose

    choice = choose(run_dir, config_hash)
    if choice.step_dir is None:
        return None
    import torch

    data = (choice.step_dir / f"rank{rank}.pt").read_bytes()
    return torch.load(io.BytesIO(data), weights_only=False)
