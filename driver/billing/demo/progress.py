"""Hand-written progress bars (no dependency): redrawn in place on a terminal, a line now and then
otherwise (CI logs, pipes)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass


@dataclass
class Bar:
    label: str
    done: int = 0
    total: int = 0
    note: str = ""


def _bar(done: int, total: int, width: int) -> str:
    if total <= 0:
        return "·" * width
    filled = min(width, done * width // total)
    return "█" * filled + "·" * (width - filled)


class Progress:
    def __init__(self, labels: list[str], *, stream=None, interval: float = 0.25, log_interval: float = 10.0,
                 width: int = 30) -> None:
        self.stream = stream or sys.stdout
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.bars = {label: Bar(label) for label in labels}
        self.interval = interval if self.tty else log_interval
        self.width = width
        self._drawn = 0
        self._last = 0.0
        self._label_width = max(len(label) for label in labels)

    def update(self, label: str, done: int, total: int, note: str = "") -> None:
        bar = self.bars[label]
        bar.done, bar.total, bar.note = done, total, note

    def due(self) -> bool:
        """Whether a redraw is due (the interval has passed since the last one): callers can skip
        computing figures that would not be drawn."""
        return time.monotonic() - self._last >= self.interval

    def _lines(self) -> list[str]:
        lines = []
        for bar in self.bars.values():
            pct = f"{100 * bar.done // bar.total:3d}%" if bar.total > 0 else "    "
            lines.append(f"  {bar.label:<{self._label_width}} {_bar(bar.done, bar.total, self.width)} {pct}  {bar.note}")
        return lines

    def draw(self, force: bool = False) -> None:
        if not force and not self.due():
            return
        self._last = time.monotonic()
        lines = self._lines()
        if self.tty:
            out = ("\x1b[F" * self._drawn) + "".join(f"\x1b[2K{line}\n" for line in lines)
            self._drawn = len(lines)
        else:
            out = " | ".join(line.strip() for line in lines) + "\n"
        self.stream.write(out)
        self.stream.flush()

    def close(self) -> None:
        self.draw(force=True)
        if not self.tty:
            return
        self._drawn = 0
