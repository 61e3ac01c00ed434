"""Record how long each test file takes, for conftest.py's heaviest-first order.

    .venv/bin/python -m pytest -q -n 2 --dist loadfile > LOG
    .venv/bin/python tests/file_seconds.py LOG

reads the duration lines pyproject's addopts (`--durations=0 --durations-min=1`) make pytest end
with (the setup, call and teardown of a test, each over a second) and rewrites
tests/file_seconds.json: seconds per file, rounded. Files the log does not name (skipped, or new)
keep their entry. The numbers only order the files: a stale table costs time, never a result.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

TABLE = Path(__file__).with_name("file_seconds.json")
DURATION = re.compile(r"^\s*([\d.]+)s (?:setup|call|teardown)\s+tests/(test_\w+\.py)::")


def file_seconds(log: str) -> Counter[str]:
    seconds: Counter[str] = Counter()
    for line in log.splitlines():
        if match := DURATION.match(line):
            seconds[match.group(2)] += float(match.group(1))
    return seconds


def main(log_path: str) -> None:
    table = json.loads(TABLE.read_text()) if TABLE.is_file() else {}
    measured = file_seconds(Path(log_path).read_text())
    table |= {name: round(value) for name, value in measured.items()}
    ordered = dict(sorted(table.items(), key=lambda item: (-item[1], item[0])))
    TABLE.write_text(json.dumps(ordered, indent=0) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
