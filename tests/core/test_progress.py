"""Long steps are never silent in a log: core.progress prints a line at most every 30 s."""

from __future__ import annotations

import io

from edgeformer.core.progress import Progress, duration


def test_a_log_gets_plain_lines_and_quiet_gets_none():
    log = io.StringIO()  # not a terminal
    bar = Progress("epoch 3/40", total=4, unit="batches", stream=log, every=0.0)
    for _ in bar.iterate(range(4)):
        bar.note("loss 4.102")
    bar.close()
    lines = log.getvalue().splitlines()
    assert lines[-1].startswith("epoch 3/40: 4/4 batches (100%), 0 s, loss 4.102"), lines
    assert "\r" not in log.getvalue()
    slow = io.StringIO()
    bar = Progress("export", stream=slow)  # every 30 s: nothing within this test
    bar.advance(10)
    assert slow.getvalue() == ""
    quiet = io.StringIO()
    bar = Progress("x", 2, stream=quiet, quiet=True, every=0.0)
    bar.advance(2)
    assert quiet.getvalue() == ""


def test_duration_reads_as_a_person_would():
    assert [duration(s) for s in (5, 65, 3725)] == ["5 s", "1 min 5 s", "1 h 2 min"]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_counted_bar_and_a_summary_a_pipe_none():
    """The bar reads '3/3' (the total) or '513 sentences' (a space before the unit; it read
    '513sentences'), and finish() ends with one summary line (count, time, rate) on a terminal
    only."""
    term = Terminal()
    bar = Progress("translate big.en", total=3, unit="sentences", stream=term)
    bar.advance(3)
    shown = str(bar.bar) if bar.bar is not None else bar.line()  # tqdm's bar, or the plain line
    assert "3/3" in shown and "3sentences" not in shown, shown
    unknown = Progress("translate -", unit="sentences", stream=Terminal())  # stdin: no total
    unknown.advance(513)
    shown = str(unknown.bar) if unknown.bar is not None else unknown.line()
    assert "513 sentences" in shown, shown
    unknown.close()
    bar.finish()
    summary = term.getvalue().splitlines()[-1]
    assert summary.startswith("translate big.en: 3 sentences in 0 s"), summary
    assert "sentences/s" in summary
    pipe = io.StringIO()
    bar = Progress("translate big.en", total=3, unit="sentences", stream=pipe)
    bar.advance(3)
    bar.finish()
    assert pipe.getvalue() == ""
