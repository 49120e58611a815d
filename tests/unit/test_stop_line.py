"""The one line a stopped command ends with is its last: nothing the stop cut off may print
after it (a terminal shows the last line; the interrupt tests read it as the command's)."""

import warnings

from repro.errors import say_stopped


def test_a_coroutine_the_stop_cut_off_warns_nothing_after_the_line(capsys):
    """Ctrl-C landing in a call that had made a coroutine and not yet awaited it (wandb's
    client in the command's thread): the coroutine lived on in the stop's frames and, freed
    after the line, Python's "coroutine ... was never awaited" warning came below it."""

    async def flush() -> None:
        pass

    def log() -> None:
        pending = flush()  # made, then the stop lands before it is awaited
        raise KeyboardInterrupt(pending)

    def command() -> int:
        try:
            log()
        except KeyboardInterrupt as stop:
            stop.args = ()  # only the frames hold it, as in a real stop
            return say_stopped(stop, "train stopped")
        return 0

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert command() == 130
    assert [str(w.message) for w in said] == []
    assert capsys.readouterr().err == "interrupted: train stopped\n"
