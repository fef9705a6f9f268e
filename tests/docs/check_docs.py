#!/usr/bin/env python3
"""Docs that cannot rot: checks the documentation against the code.

- every mount option the daemon accepts (read from its option table,
  tools/daemon/mount_options.cc, and the fuse_opt keys of tools/, and from
  `kvfs --help` when a binary is given) appears in man/kvfs.8 and in the
  options tables of docs/operations.md, and every option those tables list
  is one the daemon accepts;
- with a binary, each option's default and range as `kvfs --options-json`
  gives them (read from the library's structs) are the ones kvfs(8) states
  in the option's entry ("default N" or "N (the default)", and the range
  as "A to B" or "at least A"), and the default column of
  docs/operations.md says the same (a flag: "on", or "-"/"off"), as does
  any range the row states ("A to B", "A..B");
- every kvfsctl subcommand (read from its add_subcommand calls, and from
  `kvfsctl --help` when a binary is given) appears in man/kvfsctl.8 and
  docs/operations.md;
- every relative link in README.md and docs/*.md resolves: the file or
  directory exists, and an #anchor names a heading of the target;
- every test that docs/connectors.md names (tests/...py::test_name)
  exists, and each connector section names at least one.

Prints one line per problem and exits 1 if there is any, 0 otherwise.
Usage: check_docs.py --source-root DIR [--kvfs BIN] [--kvfsctl BIN]
"""
import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

# Option tables in the daemon's source: the table's entries,
# Unsigned("name", ...), Choice<T>("name", ...), lane("lane_x", ...), and
# FUSE_OPT_KEY("name", key); names starting with '-' are command-line flags.
OPT_RE = re.compile(r'\b(?:FUSE_OPT_KEY|Unsigned|UnsignedWith|Number|Flag|FlagOrText|Text|lane|'
                    r'Choice\s*<[^>]*>)\s*\(\s*"([^"]+)"')
# {"name=%s", offsetof(...), 1} written without the macro.
RAW_OPT_RE = re.compile(r'\{\s*"([a-z][a-z0-9_]*(?:=[^"]*)?)"\s*,\s*offsetof\(')
SUBCOMMAND_RE = re.compile(r'add_subcommand\s*\(\s*"([^"]+)"')
LINK_RE = re.compile(r'(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+"[^"]*")?\)')
IMAGE_RE = re.compile(r'!\[[^\]]*\]\(([^)\s]+)\)')
HREF_RE = re.compile(r'<a\s[^>]*href="([^"]+)"')
TEST_REF_RE = re.compile(r'(tests/[\w./-]+\.py)::(test_\w+)')
OPTIONS_TABLE_MARK = "<!-- mount-options -->"
CONNECTORS = ("LMCache", "SGLang", "vLLM", "Dynamo")


def option_name(spec):
    return re.split(r"[=%\s]", spec, maxsplit=1)[0]


def daemon_options_from_source(root):
    names = set()
    files = (sorted((root / "tools").glob("*.cc")) + sorted((root / "tools" / "daemon").glob("*.cc"))
             + sorted((root / "src" / "fuse").glob("*.cc")))
    for path in files:
        text = path.read_text(errors="replace")
        for spec in OPT_RE.findall(text) + RAW_OPT_RE.findall(text):
            if spec.startswith("-"):
                continue
            name = option_name(spec)
            if name:
                names.add(name)
    return names


def help_text(binary):
    try:
        out = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30,
                             env={**os.environ, "LC_ALL": "C"})
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{binary} --help: {e}"
    return out.stdout + out.stderr, None


def daemon_options_from_help(text):
    """Option names of the 'kvfs options (-o):' part of kvfs --help."""
    names = set()
    section = re.search(r"kvfs options \(-o\):\n(.*?)(?:\n\S|\Z)", text, re.S)
    if not section:
        return names
    for line in section.group(1).splitlines():
        m = re.match(r"  (\S.*?)(?:\s{2,}|$)", line)
        if not m:
            continue  # a continuation line (deeper indent)
        for part in m.group(1).split(","):
            part = part.strip()
            if re.match(r"[a-z][a-z0-9_]*($|=|\[)", part):
                names.add(option_name(part.split("[")[0]))
    return names


def options_json(binary):
    """`kvfs --options-json`: {name: entry}, or (None, error)."""
    try:
        out = subprocess.run([binary, "--options-json"], capture_output=True, text=True,
                             timeout=30, env={**os.environ, "LC_ALL": "C"})
        return {e["name"]: e for e in json.loads(out.stdout)}, None
    except (OSError, subprocess.TimeoutExpired, ValueError, KeyError, TypeError) as e:
        return None, f"{binary} --options-json: {e}"


def man_option_entries(text):
    """{option name: the plain text of its .TP entry (term and body)} for
    the entries of kvfs(8)'s 'kvfs options' section."""
    lines = text.splitlines()
    entries = {}
    try:
        start = lines.index(".SS kvfs options")
    except ValueError:
        return entries
    i = start + 1
    while i < len(lines) and not lines[i].startswith((".SS", ".SH")):
        if lines[i] == ".TP" and i + 1 < len(lines):
            term = lines[i + 1]
            j = i + 2
            while j < len(lines) and not lines[j].startswith((".TP", ".SS", ".SH")):
                j += 1
            plain = " ".join(roff_plain(re.sub(r'^\.[A-Z]{1,2}\s?', "", l)).replace('"', "")
                             for l in lines[i + 1:j])
            plain = re.sub(r"\s+", " ", plain)
            for name in re.findall(r"[A-Za-z0-9_]+", roff_plain(term)):
                entries.setdefault(name, plain)
            i = j
        else:
            i += 1
    return entries


DEFAULT_RE = re.compile(r"\bdefaults? (?!is\b)([^\s,;:)]+)|([^\s(]+) \((?:the )?default\)", re.I)
RANGE_RE = re.compile(r"\b(\d+) ?(?:to|\.\.) ?(\d+)\b")


def stated_default(text):
    m = DEFAULT_RE.search(text)
    if not m:
        return None
    return (m.group(1) or m.group(2)).rstrip(".")


def flag_cell(cell):
    return {"on": "on", "-": "off", "off": "off"}.get(cell, cell)


def options_table_cells(md_text):
    """{option name: (default cell, whole row)} of the options tables with
    a default column."""
    cells = {}
    lines = md_text.splitlines()
    for i, line in enumerate(lines):
        if line.strip() != OPTIONS_TABLE_MARK:
            continue
        j = i + 1
        while j < len(lines) and not lines[j].startswith("|"):
            j += 1
        header = [c.strip() for c in re.split(r"(?<!\\)\|", lines[j])[1:-1]]
        if "default" not in header:
            continue
        col = header.index("default")
        j += 2
        while j < len(lines) and lines[j].startswith("|"):
            row = [c.strip() for c in re.split(r"(?<!\\)\|", lines[j])[1:-1]]
            cell = row[col].replace("`", "")
            cell = re.split(r"[\s(]", cell, maxsplit=1)[0]
            for code in re.findall(r"`([^`]+)`", row[0]):
                cells.setdefault(option_name(code), (cell, lines[j]))
            j += 1
    return cells


def check_defaults(table, man_text, ops_text, problems):
    """Defaults and ranges of `kvfs --options-json` against the docs."""
    entries = man_option_entries(man_text)
    cells = options_table_cells(ops_text)
    for name, e in sorted(table.items()):
        default, rng, flag = e["default"], e["range"], e["kind"] in ("flag", "flag_or_text")
        entry = entries.get(name)
        if entry is None:
            problems.append(f"man/kvfs.8: no .TP entry for mount option {name} under "
                            "'.SS kvfs options'")
        elif flag:
            if default == "on" and not re.search(r"\bdefault\b", entry, re.I):
                problems.append(f"man/kvfs.8: {name} is on by default; its entry does not say so")
        elif default:
            said = stated_default(entry)
            if said != default:
                problems.append(f"man/kvfs.8: {name}: the daemon's default is {default}, the "
                                f"entry says {said if said else 'none'} (write 'default "
                                f"{default}')")
        if entry is not None and rng and rng not in entry:
            problems.append(f"man/kvfs.8: {name}: the entry does not state its range '{rng}'")
        if name in cells:
            cell, row = cells[name]
            have = flag_cell(cell) if flag else cell
            if default and have != default:
                problems.append(f"docs/operations.md: {name}: the default column says {cell}, "
                                f"the daemon's default is {default}")
            m = re.fullmatch(r"(\d+) to (\d+)", rng)
            for lo, hi in RANGE_RE.findall(row):
                if m and (lo, hi) != m.groups():
                    problems.append(f"docs/operations.md: {name}: the row states {lo} to {hi}, "
                                    f"the daemon takes {rng}")


def subcommands_from_source(root):
    names = set()
    for path in [root / "tools" / "kvfsctl.cc"] + sorted((root / "tools" / "ctl").glob("*.cc")):
        if path.exists():
            names.update(SUBCOMMAND_RE.findall(path.read_text(errors="replace")))
    return names


def subcommands_from_help(text):
    section = re.search(r"SUBCOMMANDS:\n(.*?)(?:\n\n|\Z)", text, re.S)
    if not section:
        return set()
    return {m.group(1) for m in re.finditer(r"^\s+([a-z][a-z0-9-]*)\s", section.group(1), re.M)}


def roff_plain(text):
    """man page source with escapes that split words taken out."""
    text = re.sub(r"\\f[BIRP]|\\f\(..|\\&|\\%", "", text)
    return text.replace("\\-", "-").replace("\\(en", "-")


def roff_markup_words(text):
    """Words set in bold or italic in a man page: macro lines (.B, .BI,
    .TP's next line ...) and inline \\fB...\\fR runs."""
    words = set()
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"\.(B|I|BI|IB|BR|RB|IR|RI)\b", line) or (i > 0 and lines[i - 1] == ".TP"):
            words.update(re.findall(r"[A-Za-z0-9_-]+", roff_plain(line)))
    for run in re.findall(r"\\f[BI](.*?)\\f[RP]", text):
        words.update(re.findall(r"[A-Za-z0-9_-]+", roff_plain(run)))
    return words


def word_in(name, text):
    return re.search(r"(?<![A-Za-z0-9_-])" + re.escape(name) + r"(?![A-Za-z0-9_-])", text) is not None


def options_tables(md_text):
    """Option names in the first column of the tables that follow a
    '<!-- mount-options -->' marker in a Markdown file."""
    names = set()
    lines = md_text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == OPTIONS_TABLE_MARK:
            i += 1
            while i < len(lines) and not lines[i].startswith("|"):
                i += 1
            rows = 0
            while i < len(lines) and lines[i].startswith("|"):
                rows += 1
                if rows > 2:  # past the header and the |---| line
                    first = re.split(r"(?<!\\)\|", lines[i])[1]
                    for code in re.findall(r"`([^`]+)`", first):
                        name = option_name(code)
                        if re.fullmatch(r"[a-z][a-z0-9_]*", name):
                            names.add(name)
                i += 1
        else:
            i += 1
    return names


def github_slug(heading):
    """The anchor GitHub gives a Markdown heading."""
    s = heading.strip().lower()
    s = re.sub(r"`|\*\*|\*|<[^>]+>", "", s)
    s = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", s)
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors_of(path, cache={}):
    if path not in cache:
        slugs, seen = set(), {}
        in_code = False
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith("```"):
                in_code = not in_code
                continue
            m = None if in_code else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
            if m:
                slug = github_slug(m.group(1))
                n = seen.get(slug, 0)
                seen[slug] = n + 1
                slugs.add(slug if n == 0 else f"{slug}-{n}")
        slugs.update(re.findall(r'<a\s+(?:name|id)="([^"]+)"', path.read_text(errors="replace")))
        cache[path] = slugs
    return cache[path]


def strip_code(md_text):
    """Markdown without fenced blocks and inline code spans (a link-like
    text inside code is not a link)."""
    md_text = re.sub(r"^```.*?^```", "", md_text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", md_text)


def check_links(root, problems):
    files = [root / "README.md"] + sorted((root / "docs").glob("*.md"))
    for md in files:
        if not md.exists():
            problems.append(f"{md.relative_to(root)}: missing")
            continue
        text = strip_code(md.read_text(errors="replace"))
        targets = LINK_RE.findall(text) + IMAGE_RE.findall(text) + HREF_RE.findall(text)
        for target in targets:
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:, man: ...
                continue
            path_part, _, anchor = target.partition("#")
            dest = md if not path_part else (md.parent / path_part)
            where = f"{md.relative_to(root)}: link {target}"
            try:
                dest.resolve().relative_to(root.resolve())
            except ValueError:
                problems.append(f"{where}: points outside the source tree")
                continue
            if not dest.exists():
                problems.append(f"{where}: {path_part} does not exist")
                continue
            if anchor and dest.suffix == ".md" and anchor not in anchors_of(dest):
                problems.append(f"{where}: no heading #{anchor} in {dest.relative_to(root)}")


def check_connector_tests(root, problems):
    doc = root / "docs" / "connectors.md"
    if not doc.exists():
        problems.append("docs/connectors.md: missing")
        return
    text = doc.read_text(errors="replace")
    for path, test in TEST_REF_RE.findall(text):
        f = root / path
        if not f.exists():
            problems.append(f"docs/connectors.md: names {path}::{test}, but {path} does not exist")
        elif not re.search(r"^\s*def " + re.escape(test) + r"\(", f.read_text(errors="replace"),
                           re.M):
            problems.append(f"docs/connectors.md: names {path}::{test}, which {path} does not define")
    # Each connector's section (## heading naming it) names a test.
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    for connector in CONNECTORS:
        mine = [s for s in sections if connector.lower() in s.splitlines()[0].lower()]
        if not mine:
            problems.append(f"docs/connectors.md: no section (## heading) for {connector}")
        elif not any(TEST_REF_RE.search(s) for s in mine):
            problems.append(f"docs/connectors.md: the {connector} section names no test "
                            "(tests/integration/test_*.py::test_*)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source-root", required=True, type=Path)
    ap.add_argument("--kvfs", help="the kvfs daemon, to read its --help")
    ap.add_argument("--kvfsctl", help="kvfsctl, to read its --help")
    args = ap.parse_args()
    root = args.source_root
    problems = []

    # Mount options.
    options = daemon_options_from_source(root)
    if args.kvfs:
        text, err = help_text(args.kvfs)
        if err:
            problems.append(err)
        else:
            from_help = daemon_options_from_help(text)
            if not from_help:
                problems.append(f"{args.kvfs} --help: no 'kvfs options (-o):' list found")
            options |= from_help
    if len(options) < 10:
        problems.append(f"found only {len(options)} mount options in the daemon's source: "
                        "has its option table moved? (update tests/docs/check_docs.py)")
    man = (root / "man" / "kvfs.8").read_text(errors="replace")
    man_words = roff_markup_words(man)
    ops_path = root / "docs" / "operations.md"
    ops = ops_path.read_text(errors="replace") if ops_path.exists() else ""
    if not ops:
        problems.append("docs/operations.md: missing")
    tabled = options_tables(ops)
    if ops and not tabled:
        problems.append(f"docs/operations.md: no options table after a '{OPTIONS_TABLE_MARK}' line")
    for name in sorted(options):
        if name not in man_words:
            problems.append(f"man/kvfs.8: mount option {name} is not described (in bold or "
                            "italic, e.g. '.BI {name}= n')".replace("{name}", name))
        if ops and name not in tabled:
            problems.append(f"docs/operations.md: mount option {name} is not in the options tables")
    for name in sorted(tabled - options):
        problems.append(f"docs/operations.md: the options table lists {name}, which the daemon "
                        "does not accept")
    if args.kvfs:
        table, err = options_json(args.kvfs)
        if err:
            problems.append(err)
        else:
            check_defaults(table, man, ops, problems)

    # kvfsctl subcommands.
    subcommands = subcommands_from_source(root)
    if args.kvfsctl:
        text, err = help_text(args.kvfsctl)
        if err:
            problems.append(err)
        else:
            subcommands |= subcommands_from_help(text)
    if not subcommands:
        problems.append("found no kvfsctl subcommands (add_subcommand) in tools/kvfsctl.cc")
    ctl_man = (root / "man" / "kvfsctl.8").read_text(errors="replace")
    ctl_words = roff_markup_words(ctl_man)
    for name in sorted(subcommands):
        if name not in ctl_words:
            problems.append(f"man/kvfsctl.8: subcommand {name} is not described")
        if ops and not word_in(f"kvfsctl {name}", ops):
            problems.append(f"docs/operations.md: kvfsctl {name} is not described")

    check_links(root, problems)
    check_connector_tests(root, problems)

    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} problem(s) in the docs")
        return 1
    print(f"docs ok: {len(options)} mount options, {len(subcommands)} kvfsctl subcommands, "
          "links and connector tests checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
