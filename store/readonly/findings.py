"""What a check found: damage (the exit status 1 of `python -m store verify`) and warnings,
counted by kind, with the first examples of each kind in the order they were found."""
from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any


class Findings:
    """Damage (exit 1) and warnings, counted by kind, with the first examples of each."""

    def __init__(self, max_examples: int = 20) -> None:
        self.max_examples = max_examples
        self.damage_counts: Counter[str] = Counter()
        self.warning_counts: Counter[str] = Counter()
        self.examples: dict[str, list[dict]] = defaultdict(list)

    def damage(self, kind: str, message: str, count: int = 1, **fields: Any) -> None:
        self.damage_counts[kind] += count
        if count != 1:
            fields["count"] = count
        if len(self.examples[kind]) < self.max_examples:
            self.examples[kind].append({"kind": kind, "severity": "damage", "message": message,
                                        **fields})

    def warn(self, kind: str, message: str, **fields: Any) -> None:
        self.warning_counts[kind] += 1
        if len(self.examples[kind]) < self.max_examples:
            self.examples[kind].append({"kind": kind, "severity": "warning", "message": message,
                                        **fields})

    @property
    def damaged(self) -> bool:
        return bool(self.damage_counts)

    def issues(self) -> list[dict]:
        return [e for kind in self.examples for e in self.examples[kind]]
