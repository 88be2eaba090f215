"""A job's progress as a command shows it: a bar at a terminal; elsewhere (a log file, nohup, CI), where a bar
would be noise, one line every FLAWFORGE_PROGRESS_LOG_S seconds."""
from __future__ import annotations

import sys
import time
from typing import Optional

from tqdm import tqdm


def duration(seconds: float) -> str:
    """'45s', '9m12s', '2h05m'."""
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class ProgressBar:
    def __init__(self, label: str):
        self.bar = tqdm(desc=label, unit="item", dynamic_ncols=True, leave=False)

    def update(self, done: int, total: Optional[int], message: str) -> None:
        if total is not None:
            self.bar.total = total
        self.bar.n = done
        self.bar.set_postfix_str(message, refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()


class ProgressLog:
    """One line every `every_s` seconds: done/total, the rate since the job's current stage began (or since the
    command began to follow it: a resumed job's earlier work does not count), and the time left at that rate."""

    def __init__(self, label: str, every_s: float):
        self.label, self.every_s = label, every_s
        self.next_at = time.monotonic() + every_s
        # Where the current stage's rate is counted from: (its total and message, when, done then).
        self.stage: Optional[tuple[tuple[Optional[int], str], float, int]] = None

    def update(self, done: int, total: Optional[int], message: str) -> None:
        now = time.monotonic()
        if self.stage is None or self.stage[0] != (total, message) or done < self.stage[2]:
            self.stage = ((total, message), now, done)  # a job's stages count their own items
        if now < self.next_at:
            return
        self.next_at = now + self.every_s
        _, began, done_then = self.stage
        rate = (done - done_then) / (now - began) if now > began else 0.0
        parts = [f"{done}/{total} ({done / total:.0%})" if total else f"{done}/?"]
        if rate > 0:
            parts.append(f"{rate:.2f} items/s" if rate < 10 else f"{rate:.0f} items/s")
        if total:
            parts.append(f"ETA {duration((total - done) / rate)}" if rate > 0 else "ETA unknown")
        line = f"{self.label}: {', '.join(parts)}" + (f" ({message})" if message else "")
        print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        pass


def progress_display(label: str) -> ProgressBar | ProgressLog:
    """A bar where stderr is a terminal, else the periodic line."""
    from flawforge.settings import Settings

    return ProgressBar(label) if sys.stderr.isatty() else ProgressLog(label, Settings().progress_log_s)
