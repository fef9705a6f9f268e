"""The status line on stderr."""
import shutil
import sys
import time


class Progress:
    """One status line on stderr: \\r-updated on a terminal, one line per
    finished step otherwise (logs stay readable)."""

    def __init__(self, total, stream=sys.stderr):
        self.total = total
        self.i = 0
        self.stream = stream
        self.tty = stream.isatty()
        self.t0 = time.monotonic()
        self.label = ""

    def _prefix(self):
        e = int(time.monotonic() - self.t0)
        return f"[{self.i}/{self.total} {e // 60}:{e % 60:02d}]"

    def _show(self, text):
        if self.tty:
            cols = shutil.get_terminal_size((100, 20)).columns
            self.stream.write("\r\x1b[K" + text[: cols - 1])
            self.stream.flush()

    def step(self, label):
        self.i += 1
        self.label = label
        self._show(f"{self._prefix()} {label} ...")

    def result(self, text):
        line = f"{self._prefix()} {self.label}: {text}"
        if self.tty:
            self._show(line)
        else:
            self.stream.write(line + "\n")
            self.stream.flush()

    def message(self, text):
        """A line that stays (warnings, notes)."""
        if self.tty:
            self.stream.write("\r\x1b[K")
        self.stream.write(text + "\n")
        self.stream.flush()

    def done(self):
        if self.tty:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
