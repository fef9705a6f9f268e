#!/usr/bin/env python3
"""check_docs.py's comparison of defaults and ranges: given a table as
`kvfs --options-json` prints it, a kvfs(8) and an operations.md that agree
pass, and each kind of disagreement is reported."""
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import check_docs  # noqa: E402

TABLE = {
    "cache_mb": {"name": "cache_mb", "kind": "unsigned", "default": "1024", "range": ""},
    "uring_entries": {"name": "uring_entries", "kind": "unsigned", "default": "16",
                      "range": "1 to 1024"},
    "prefetch": {"name": "prefetch", "kind": "choice", "default": "lookup", "range": ""},
    "relatime": {"name": "relatime", "kind": "flag", "default": "on", "range": ""},
    "noatime": {"name": "noatime", "kind": "flag", "default": "off", "range": ""},
}

MAN = r""".SH OPTIONS
.SS kvfs options
.TP
.BI cache_mb= n
RAM cache of file data, in MiB (default 1024).
.TP
.BI uring_entries= n
Requests per queue
(default 16, 1 to 1024).
.TP
.BI prefetch= mode
.B off
or
.B lookup
(the default).
.TP
.BR relatime " (default), " noatime
When atime moves.
.SS Other options
"""

OPS = """<!-- mount-options -->
| option | default | what it does |
|---|---|---|
| `cache_mb=N` | 1024 | RAM cache |
| `uring_entries=N` | 16 | requests per queue (1..1024) |
| `prefetch=lookup\\|off` | lookup | what prefetches |
| `relatime` | on | atime rule |
| `noatime` | - | never |
"""


def problems(man=MAN, ops=OPS):
    out = []
    check_docs.check_defaults(TABLE, man, ops, out)
    return out


# (docs text, text replaced, replacement, words the one problem reported names)
MISMATCHES = [
    ("man", "(default 1024)", "(default 2048)", ["man/kvfs.8: cache_mb", "2048"]),
    ("man", ".B lookup\n(the default)", ".B lookup\n.B off\n(the default)",
     ["prefetch", "says off"]),
    ("man", "(default 16, 1 to 1024)", "(default 16)", ["uring_entries", "1 to 1024"]),
    ("man", ".BI cache_mb= n", ".BI cache_size= n", ["no .TP entry for mount option cache_mb"]),
    ("man", '.BR relatime " (default), " noatime', ".BR relatime , noatime",
     ["relatime is on by default"]),
    ("ops", "| `cache_mb=N` | 1024 |", "| `cache_mb=N` | 512 |",
     ["docs/operations.md: cache_mb", "512"]),
    ("ops", "| `noatime` | - |", "| `noatime` | on |", ["docs/operations.md: noatime"]),
    ("ops", "(1..1024)", "(1..512)", ["uring_entries", "1 to 512"]),
]


class CheckDefaults(unittest.TestCase):
    def test_docs_that_agree_pass(self):
        self.assertEqual(problems(), [])

    def test_each_disagreement_is_one_problem_naming_it(self):
        for doc, old, new, words in MISMATCHES:
            with self.subTest(replace=old, by=new):
                self.assertIn(old, MAN if doc == "man" else OPS)
                if doc == "man":
                    p = problems(man=MAN.replace(old, new))
                else:
                    p = problems(ops=OPS.replace(old, new))
                self.assertEqual(len(p), 1, p)
                for w in words:
                    self.assertIn(w, p[0])


if __name__ == "__main__":
    unittest.main()
