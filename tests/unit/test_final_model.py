"""`final_model.pt` is the same bytes for the same weights, wherever it is written."""

import torch

from repro.train.checkpoint import save_model


def test_same_state_gives_identical_bytes(tmp_path):
    torch.manual_seed(0)
    state = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()).state_dict()
    first, second = tmp_path / "a" / "final_model.pt", tmp_path / "b" / "other_name.pt"
    first.parent.mkdir()
    second.parent.mkdir()
    save_model(first, state)
    save_model(second, state)
    assert first.read_bytes() == second.read_bytes()
    loaded = torch.load(second, weights_only=True)
    assert loaded.keys() == state.keys()
    assert all(torch.equal(loaded[k], state[k]) for k in state)
    # Only the two files: the temporary file was renamed into place, none left behind.
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == [
        "final_model.pt",
        "other_name.pt",
    ]
