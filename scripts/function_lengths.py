#!/usr/bin/env python3
"""Flags product C++ functions longer than 70 lines.

Usage: scripts/function_lengths.py [source_dir]

Scans *.cc and *.h under the product directories, prints every function definition over the
limit as "file:line name length" and exits 1 if one of them is not in
scripts/function_lengths.allow (data tables, one "file function reason" a line).

A function's length counts its lines from the one holding its opening brace to the one holding
its closing brace. Lambdas and local classes count toward the function that holds them. The
scanner matches braces after blanking comments, strings, character literals and preprocessor
lines; it assumes the .clang-format style (the opening brace ends the signature line).
"""

import pathlib
import re
import sys

LIMIT = 70
PRODUCT_DIRS = ("core", "net", "client", "sim", "testing", "fuzz", "bench")
NOT_FUNCTIONS = {"if", "for", "while", "switch", "catch", "do", "else", "return", "namespace",
                 "class", "struct", "union", "enum", "try"}
NOT_NAMES = {"decltype", "noexcept", "alignas", "requires", "sizeof", "alignof", "__attribute__"}


def blank(text):
    """Returns text with comments, literals and preprocessor lines turned into spaces."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == "#":
            # A directive runs to the end of the line, and on past each trailing backslash.
            while i < n and not (text[i] == "\n" and text[i - 1] != "\\"):
                out.append("\n" if text[i] == "\n" else " ")
                i += 1
            continue
        if c == "\n":
            line_start = True
            out.append(c)
            i += 1
            continue
        if not c.isspace():
            line_start = False
        if text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2) + 2
            end = n if end < 2 else end
        elif c == '"' and i > 0 and text[i - 1] == "R":
            delim = text[i + 1:text.index("(", i)]
            end = text.index(")" + delim + '"', i) + len(delim) + 2
        elif c == '"' or (c == "'" and not re.search(r"\b\d[\w']*$", text[max(0, i - 40):i])):
            end = i + 1
            while text[end] != c:
                end += 2 if text[end] == "\\" else 1
            end += 1
        else:
            out.append(c)
            i += 1
            continue
        out.append("".join(ch if ch == "\n" else " " for ch in text[i:end]))
        i = end
    return "".join(out)


def function_name(head):
    """Returns the name a function head declares, or None if the head declares no function."""
    head = re.sub(r"^\s*(public|private|protected)\s*:(?!:)", "", head).strip()
    head = re.sub(r"^template\s*<[^{;]*?>\s*(?=[A-Za-z_])", "", head)
    head = re.sub(r"\[\[.*?\]\]", "", head).strip()
    first = re.match(r"~?[A-Za-z_]\w*", head)
    if not first or "(" not in head:
        return None
    if first.group(0) in NOT_FUNCTIONS and not re.match(r"(struct|class)\s+\w+\s*[*&]", head):
        return None  # a statement or a type, but "struct raft* raft() {" is a function
    operator = re.search(r"(?:[\w:]*::)?operator\s*(\(\)|[^\s(]+)\s*\(", head)
    if operator:
        return re.sub(r"\s+", "", operator.group(0)[:-1])
    depth = 0
    for match in re.finditer(r"[()<>=]|->", head):
        token = match.group(0)
        if token == "=" and depth == 0:
            return None  # an initialised variable, such as "auto f = [](int x) {"
        if token in "(<":
            name = re.search(r"(~?[A-Za-z_][\w:~]*)\s*$", head[:match.start()])
            if token == "(" and depth == 0 and name and name.group(1) not in NOT_NAMES:
                return name.group(1)
            depth += 1
        elif token in ")>":
            depth -= 1
    return None


def functions(text):
    """Yields (line, name, length) for each function defined in text, outermost only."""
    clean = blank(text)
    stack = []  # one entry per open brace: (kind, name, line)
    head, line, parens = [], 1, 0
    for c in clean:
        if c == "\n":
            line += 1
        if stack and stack[-1][0] == "init":
            # Inside a brace of an initialiser ("x_{1}", "f(T{1})"), which the head skips.
            if c == "{":
                stack.append(("init", None, line))
            elif c == "}":
                stack.pop()
                if not stack or stack[-1][0] != "init":
                    head.append("{}")
            continue
        if c == "{":
            in_function = any(kind == "function" for kind, _, _ in stack)
            text_head = "".join(head)
            name = None if in_function or parens else function_name(text_head)
            if parens or name and re.search(r"\)[^(){}]*[^:]:[^:].*\w\s*$", text_head):
                stack.append(("init", None, line))
                continue
            stack.append(("function" if name else "block", name, line))
            head = []
        elif c == "}" and stack:
            kind, name, start = stack.pop()
            if kind == "function":
                yield start, name, line - start + 1
            head = []
        elif c == ";" and not parens:
            head = []
        else:
            parens += (c == "(") - (c == ")")
            head.append(c)


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    allow_file = pathlib.Path(__file__).with_suffix(".allow")
    allowed = set()
    for entry in allow_file.read_text().splitlines():
        if entry.strip() and not entry.startswith("#"):
            allowed.add(tuple(entry.split()[:2]))
    failed = False
    for directory in PRODUCT_DIRS:
        for path in sorted((root / directory).rglob("*")):
            if path.suffix not in (".cc", ".h"):
                continue
            relative = path.relative_to(root).as_posix()
            for line, name, length in functions(path.read_text()):
                if length > LIMIT:
                    listed = (relative, name) in allowed
                    failed |= not listed
                    note = " (allowed: data table)" if listed else ""
                    print(f"{relative}:{line} {name} {length}{note}")
    if failed:
        print(f"functions over {LIMIT} lines: cut them, or list data tables in "
              "scripts/function_lengths.allow")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
