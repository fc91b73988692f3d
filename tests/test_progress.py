"""Long jobs' progress: lines always; a bar with counts only on a terminal."""

from __future__ import annotations

import fcntl
import io
import os
import select
import struct
import termios

from specdraft.progress import Progress


def test_off_a_terminal_only_the_lines():
    out = io.StringIO()
    with Progress(3, "[bench] runs", stream=out) as bar:
        assert bar.bar is None  # a file or a CI log gets no bar
        bar.say("[bench] round 1/1 none")
        bar.advance()
    assert out.getvalue() == "[bench] round 1/1 none\n"


def test_on_a_terminal_a_bar_counts_the_runs():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    term = Terminal()  # the bench's terminal (its fds 1 and 2 go to the engine log)
    with Progress(4, "[bench] runs", "run", stream=term) as bar:
        assert bar.bar is not None
        bar.advance()
        bar.advance()
        bar.say("a line")
        assert bar.bar.n == 2
    text = term.getvalue()
    assert "a line\n" in text and "/4" in text and "[bench] runs" in text


def test_a_terminal_that_reports_no_width_still_gets_a_bar():
    # a pseudo terminal nobody sized (0 x 0, as `script` makes off a terminal): tqdm's dynamic
    # width would cut the bar to nothing
    main, sub = os.openpty()
    fcntl.ioctl(sub, termios.TIOCSWINSZ, struct.pack("HHHH", 0, 0, 0, 0))
    with os.fdopen(sub, "w", buffering=1) as term:
        with Progress(4, "[bench] runs", "run", stream=term) as bar:
            assert bar.bar is not None
            bar.advance()
            bar.bar.refresh()
        drawn = b""  # what reached the terminal (read while it is open; nothing: no wait)
        while select.select([main], [], [], 0.5)[0]:
            drawn += os.read(main, 65536)
    os.close(main)
    drawn = drawn.decode(errors="replace")
    assert "[bench] runs" in drawn and "1/4" in drawn
