"""Every method's config declares its test variants and model copies, and the config path
of each declared variant stays torch-free.

A method config without the declarations is refused at config time in one line naming
its file and the fix (exit 2, nothing written, no heavy library loaded), as any bad value
is (`tests/integration/test_startup.py`).
"""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from repro.conformance import variants
from repro.errors import UserError
from repro.strategies.base import registered
from tests.integration.test_startup import HEAVY, probe


def test_every_registered_method_declares_variants_and_copies():
    """Discovered methods and declared variants agree: each method at least once, every
    variant composing `method=<its name>` first."""
    declared = variants()
    assert sorted({v.method for v in declared}) == sorted(registered())
    assert all(v.overrides[0] == f"method={v.method}" for v in declared)
    assert [v.method for v in declared if v.first] == sorted(registered())
    ids = [v.id for v in declared]
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize("name", sorted(registered()))
def test_a_config_without_the_declarations_is_refused_naming_its_file(name):
    """What a method yaml holding no declarations composes to: its schema's defaults."""
    config_cls, _ = registered()[name]
    bare = OmegaConf.to_object(OmegaConf.structured(config_cls))
    where = rf"^configs/method/{name}\.yaml declares"
    with pytest.raises(UserError, match=rf"{where} no test_variants"):
        bare.check_declared()
    bare.test_variants = [[]]
    with pytest.raises(UserError, match=rf"{where} model_copies=None"):
        bare.check_declared()
    bare.model_copies = 0
    bare.check_declared()


@pytest.mark.parametrize(
    ("override", "line"),
    [
        ("method.test_variants=[]", "configs/method/sync.yaml declares no test_variants; add"),
        ("method.model_copies=null", "configs/method/sync.yaml declares model_copies=None; set"),
    ],
)
def test_the_cli_refuses_a_missing_declaration_before_torch(tmp_path, override, line):
    code, stderr, loaded = probe(tmp_path, "train", override)
    assert code == 2
    assert stderr.splitlines() == [stderr.strip()] and stderr.startswith(f"error: {line}")
    assert loaded == []
    assert list(tmp_path.iterdir()) == []  # nothing written


# Composes every declared variant at 4 workers (each method's own checks included), then
# lists the heavy modules left loaded. The first heavy import is watched for, so that a
# failure names the project's line that made it (on stderr), not the 800 modules it loaded.
COMPOSE_ALL = f"""
import json, sys, traceback
heavy = {HEAVY!r}

class Watch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in heavy:
            ours = [f for f in traceback.extract_stack() if "/repro/" in f.filename]
            at = f"{{ours[-1].filename}}:{{ours[-1].lineno}}" if ours else "outside repro"
            print(f"{{name}} first imported at {{at}}", file=sys.stderr)
            sys.meta_path.remove(self)

sys.meta_path.insert(0, Watch())
from repro.config import compose
from repro.conformance import variants
for v in variants():
    compose([*v.overrides, "trainer.world_size=4", "compute.mode=sampled"])
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in heavy)))
"""


def test_every_declared_variant_composes_without_loading_torch(tmp_path):
    code, stderr, loaded = probe(tmp_path, code=COMPOSE_ALL)
    assert code == 0, stderr[-2000:]
    assert loaded == [], f"{stderr.strip()}; then {len(loaded)} heavy modules in all"
